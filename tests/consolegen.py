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

The topology (issue 42's fleet map), as node features (``topology.source = "auto"``
finds them with the default prefixes): the ``gpu`` nodes in NVLink blocks of 18
(``block=nvl001`` is n00001-n00018, the NVL72 rack's 18 trays), the ``cpu`` nodes in
racks of 40 (``rack=r001`` from n05001), but the last `LOOSE` nodes under no component
(the map groups them by partition). An open incident is on ``block:nvl100``
(n01783-n01800). The store's history (`history`): 90 days of ended remediations, the
older ones in the audit archive, breaker openings and ended incidents.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from slurm_heal import extra
from slurm_heal.incidentstore import INCIDENTS_KEY, dump
from slurm_heal.models import Breaker, Incident, IncidentAlert, Phase, Remediation, State, Step
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


BLOCK, RACK, LOOSE = 18, 40, 40
INCIDENT_BLOCK = "nvl100"


def features(i: int, n: int) -> tuple[str, ...]:
    """Node ``i``'s features: its block (gpu half) or rack (cpu half), none for the last
    `LOOSE`."""
    if i > n - LOOSE:
        return ()
    if i <= n // 2:
        return (f"block=nvl{(i - 1) // BLOCK + 1:03d}",)
    return (f"rack=r{(i - n // 2 - 1) // RACK + 1:03d}",)


def block_nodes(block: int) -> list[str]:
    return [name(i) for i in range((block - 1) * BLOCK + 1, block * BLOCK + 1)]


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
        slurm.set_features(node, features(i, n))
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
    old, incidents, openings = history(n, now)
    with st.transaction() as txn:
        txn.state = State(remediations=(rem, *old),
                          breaker=Breaker(opened_at=openings[-1], openings=openings,
                                          reset_by="alice", reset_at=openings[-1]),
                          data={INCIDENTS_KEY: dump(incidents)})
    st.prune(now, keep=timedelta(days=14), archive=True)  # the older ones: the archive
    (state_dir / "heartbeat").write_text(now.astimezone(timezone.utc).isoformat())
    return st


FAULTS = (("gpu.xid.79", Action.REBOOT), ("gpu.xid.48", Action.REBOOT),
          ("gpu.xid.94", Action.RESET_GPU), ("ib.link_down", Action.REBOOT),
          ("nvlink.errors", Action.REBOOT), ("gpu.ecc.dbe", Action.REBUILD))
HISTORY_DAYS = 90
PER_DAY = 6


def history(n: int, now: datetime
            ) -> tuple[list[Remediation], list[Incident], tuple[datetime, ...]]:
    """90 days of ended remediations (seeded: the same every run), on the healthy
    nodes n00011-n00060 so a few machines repeat; five ended incidents and the open one
    on `INCIDENT_BLOCK`; two breaker openings (S5 blocked steps, and the breaker's
    history of them)."""
    rnd = random.Random(42)
    rems: list[Remediation] = []
    openings: list[datetime] = []
    outcomes = ([Phase.DONE] * 14 + [Phase.FAILED] * 2 + [Phase.CANCELLED, Phase.WITHDRAWN,
                                                          Phase.DENIED])
    for day in range(HISTORY_DAYS):
        for k in range(rnd.randint(0, PER_DAY)):
            fault, action = FAULTS[rnd.randrange(len(FAULTS))]
            node = name(rnd.randint(11, 60))
            start = now - timedelta(days=day, hours=rnd.uniform(1, 20))
            phase = outcomes[rnd.randrange(len(outcomes))]
            took = timedelta(minutes=rnd.uniform(4, 40) * (3 if action is Action.REBUILD
                                                          else 1))
            end = start + took
            times = {"proposed": start}
            steps = [Step(at=start, phase="proposed", rule=f"catalog:{fault}", why=fault)]
            if phase in (Phase.DONE, Phase.FAILED):
                times["acting"] = start + took / 4
                steps.append(Step(at=times["acting"], phase="acting", rule="L1",
                                  why=f"{action.value} started"))
            if day in (3, 40) and k == 0:
                openings.append(start)
                steps.append(Step(at=start, phase="blocked", rule="S5",
                                  why="5 automatic remediations started within 1h "
                                      "(threshold 5): the breaker opens; automatic "
                                      "remediation stops until a person resets it"))
            times[phase.value] = end
            steps.append(Step(at=end, phase=phase.value, rule="L1", why=phase.value))
            rems.append(Remediation(
                id=f"r-hist-{day:02d}-{k}", node=node, host=f"gpu-serial-{node}",
                fault=fault, action=action, phase=phase, created=start, updated=end,
                alert_first_seen=start - timedelta(minutes=2), phase_times=times,
                steps=tuple(steps)))
    incidents = []
    for k, day in enumerate((2, 9, 25, 33, 70)):
        opened = now - timedelta(days=day, hours=3)
        members = block_nodes(10 + k)
        incidents.append(Incident(
            id=f"i-hist-{k}", component=f"block:nvl{10 + k:03d}", kind="block",
            name=f"nvl{10 + k:03d}", group="xid", size=BLOCK, opened=opened,
            updated=opened + timedelta(hours=2), nodes=tuple(members[:4]),
            state="resolved", resolved=opened + timedelta(hours=2), resolved_by="alice",
            why="Xid 79 on 4 nodes of one block", resolution="closed by alice"))
    members = block_nodes(int(INCIDENT_BLOCK[3:]))
    opened = now - timedelta(minutes=12)
    incidents.append(Incident(
        id="i-scale-open", component=f"block:{INCIDENT_BLOCK}", kind="block",
        name=INCIDENT_BLOCK, group="xid", size=BLOCK, opened=opened, updated=opened,
        nodes=tuple(members[:3]),
        alerts=tuple(IncidentAlert(node=m, fault="gpu.xid.79", first_seen=opened)
                     for m in members[:3]),
        why="Xid 79 on 3 nodes of one NVLink block"))
    return rems, incidents, tuple(sorted(openings))
