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
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import extra
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, Notifier
from slurm_heal.models import Phase
from slurm_heal.policy import is_automatic
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Evidence, Severity
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


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Rig:
    clock: Clock
    cluster: MemorySlurm
    sim: SimulatorServer
    store: Store
    controller: Controller

    def alert(self, node: str, fault: str, severity: Severity) -> None:
        now = self.clock()
        a = Alert(node=node, fault=fault, severity=severity, summary=f"{fault} seen",
                  first_seen=now, last_seen=now, detector="kernel_log",
                  evidence=(Evidence(source="kmsg", text=f"NVRM: Xid ...: {fault}"),))
        self.cluster.set_extra(node, extra.KEY, extra.our_section([a], now))

    def cycle(self, seconds: float = 30.0) -> None:
        self.controller.cycle()
        self.sim.wait_idle(5)
        self.clock.now += timedelta(seconds=seconds)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    # The real clock's date: the CLI stamps a person's request with it.
    clock = Clock(datetime.now(timezone.utc).replace(microsecond=0))
    holder: dict[str, MemorySlurm] = {}

    def on_boot(node: str) -> None:  # the node's health check at boot: a clean log
        holder["c"].set_extra(node, extra.KEY, extra.our_section([], clock()))

    cluster = MemorySlurm(NODES, clock=clock, on_boot=on_boot)
    holder["c"] = cluster

    def on_action(node: str, action: Action, op: Any) -> str | None:
        cluster.simulate_reboot(node, timedelta(minutes=3))
        return None

    with SimulatorServer(port=0, on_action=on_action, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=3,
                                backoff=0.01)
        store = Store(tmp_path / "state")
        ctl = Controller(slurm=cluster, provider=provider, store=store,
                         policy=policy_from_dict(POLICY, source="test"), clock=clock,
                         notifier=Notifier(tmp_path / "notes.jsonl"))
        try:
            yield Rig(clock, cluster, sim, store, ctl)
        finally:
            provider.close()


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
