"""Mass failure (issue 8, SPEC S5): 30 % of the nodes fail within minutes.

The real controller (engine, store, http provider against the provider simulator over
HTTP) on the in-process simulated cluster (`MemorySlurm`, the one `slurm-heal demo`
runs) of 20 nodes, on a clock the test moves. Six nodes fail at seeded moments within
five minutes. The breaker must open after the configured number of automatic starts;
after that no automatic action runs, however long the failures last or whatever else
fails; a person's request still runs (`slurm-heal request`, the real command). The lab
has 4 nodes, too few for 30 %; `tests/integration/test_daemon_lab.py` has the same S5
behaviour on the lab.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.models import Phase
from slurm_heal.policy import is_automatic
from slurm_heal.types import Severity
from tests.fakes import Rig, controller_rig, wall_now
from tests.reliability.harness import rng

pytestmark = [pytest.mark.reliability]

NODES = [(f"gpu{i:02d}", "a" if i <= 10 else "b") for i in range(1, 21)]
THRESHOLD = 3
POLICY = {"approvals": {"default": "manual", "rules": [
    {"fault": "gpu.xid.119", "action": "reboot", "mode": "auto"},
    {"fault": "request", "mode": "auto"}]},
    "safety": {"breaker_threshold": THRESHOLD, "breaker_window": "1h", "concurrency": 10,
               "one_per_pool": False},
    "capacity": {"min_available_percent": 0}}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with controller_rig(tmp_path, NODES, POLICY, start=wall_now(), idle_wait=0.5) as r:
        yield r


def test_thirty_percent_failing_opens_the_breaker_and_only_a_person_acts(
        rig: Rig, tmp_path: Path) -> None:
    r = rng("mass-failure")
    failing = sorted(r.sample([n for n, _ in NODES], k=len(NODES) * 30 // 100))
    at = sorted(r.randrange(0, 10) for _ in failing)  # cycle of 30 s: within five minutes
    when = dict(zip(failing, at, strict=True))
    print(f"failing: {failing} at cycles {at}")
    for cycle in range(60):  # 30 minutes
        for node, c in when.items():
            if c == cycle:
                rig.alert(node, "gpu.xid.119", Severity.CRITICAL)
        rig.cycle()
    state = rig.store.load()
    # SPEC S5: the breaker opened after THRESHOLD automatic starts
    assert state.breaker.open, state.breaker
    started = [x for x in state.remediations if "cordoned" in x.phase_times]
    assert len(started) == THRESHOLD and all(is_automatic(x) for x in started)
    executed = rig.sim.stats()["executed"]
    assert len(executed) == THRESHOLD and set(executed.values()) == {1}
    held = [x for x in state.remediations if x not in started]
    assert len(held) == len(failing) - THRESHOLD
    for rem in held:
        assert any(s.rule == "S5" for s in rem.steps), rem.steps
        assert not any(a.effect in ("cordon", "act") for a in rem.attempts)
        assert not rig.cluster.node(rem.node).drained  # nothing disruptive on it
    assert all(x.phase is Phase.DONE for x in started)  # the started ones finish

    # More failures later: still nothing automatic.
    healthy = [n for n, _ in NODES if n not in failing]
    late = healthy.pop()
    rig.alert(late, "gpu.xid.119", Severity.CRITICAL)
    for _ in range(10):
        rig.cycle()
    assert len(rig.sim.stats()["executed"]) == THRESHOLD
    assert not rig.cluster.node(late).drained

    # A person's request still runs (S5: manual ones stay possible).
    person = healthy.pop()
    rig.alert(person, "ib.link_degraded", Severity.WARNING)
    # The rig's cycles stand for a running daemon: its heartbeat is what tells the CLI that
    # this store is read by a controller (I4: writes to an unread store are refused).
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "request", person, "reboot",
                           "--reason", "flapping link", "--by", "alice", "--state-dir",
                           str(tmp_path / "state")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for _ in range(20):
        rig.cycle()
    mine = [x for x in rig.store.load().remediations if x.node == person]
    assert len(mine) == 1 and mine[0].phase is Phase.DONE, mine
    assert mine[0].origin == "operator" and mine[0].requested_by == "alice"
    assert len(rig.sim.stats()["executed"]) == THRESHOLD + 1
    assert rig.store.load().breaker.open  # still open: only a person resets it
    assert "reboot" in rig.cluster.history(person)
