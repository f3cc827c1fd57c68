"""A generated cluster and store for the console at scale (issue 25 item 8): N nodes in
memory (``MemorySlurm``, two pools), a fresh node check on every node, and a store with
remediations, so that the overview's attention order, filters and paging can be checked
on a page of 10,000 nodes. Written for the tests, not captured from a site.

Which nodes need attention (names ``n00001`` ... zero-padded to 5 digits):

* every 500th node (``n00500``, ``n01000``, ...): an Xid 79 alert in Extra (alerting);
* every 1,000th from 250 (``n00250``, ``n01250``, ...): drained by someone else (D5);
* ``n00007``: drained under a detector's ``heal-request:`` (Q1), no alert behind it;
* ``n09999``: an open remediation (reboot, acting) in the store;
* the rest healthy; the first half of the nodes in pool ``gpu``, the others in ``cpu``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from slurm_heal import extra
from slurm_heal.models import Phase, Remediation, State, Step
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Severity


def name(i: int) -> str:
    return f"n{i:05d}"


def attention(n: int) -> list[str]:
    """The nodes the generator makes need attention, by name."""
    out = {name(i) for i in range(500, n + 1, 500)}
    out |= {name(i) for i in range(250, n + 1, 1000)}
    out |= {name(7), name(n - 1)}
    return sorted(out)


def cluster(n: int, now: datetime) -> MemorySlurm:
    slurm = MemorySlurm([(name(i), "gpu" if i <= n // 2 else "cpu") for i in range(1, n + 1)],
                        clock=lambda: now)
    fresh = extra.our_section([], now)
    for i in range(1, n + 1):
        node = name(i)
        alerts = []
        if i % 500 == 0:
            alerts = [Alert(node=node, fault="gpu.xid.79", severity=Severity.CRITICAL,
                            summary="GPU has fallen off the bus (Xid 79)",
                            first_seen=now - timedelta(minutes=3), last_seen=now,
                            detector="kmsg")]
        slurm.set_extra(node, extra.KEY, extra.our_section(alerts, now) if alerts else fresh)
    for i in range(250, n + 1, 1000):
        slurm.drain(name(i), "bad fan - ticket 123")
    slurm.drain(name(7), "heal-request: reboot detector=ibmon id=4711 link flaps")
    return slurm


def store(state_dir: Path, n: int, now: datetime) -> Store:
    t0 = now - timedelta(minutes=20)
    rem = Remediation(
        id="r-scale-acting", node=name(n - 1), fault="gpu.xid.79", severity=Severity.CRITICAL,
        action=Action.REBOOT, phase=Phase.ACTING, created=t0, updated=t0,
        approval_rule="P2:approvals[0]", action_rule="catalog:gpu.xid.79",
        phase_times={"proposed": t0, "acting": t0},
        steps=(Step(at=t0, phase="proposed", rule="catalog:gpu.xid.79", why="Xid 79"),
               Step(at=t0, phase="acting", rule="L1", why="reboot started")))
    st = Store(state_dir)
    with st.transaction() as txn:
        txn.state = State(remediations=(rem,))
    (state_dir / "heartbeat").write_text(now.astimezone(timezone.utc).isoformat())
    return st
