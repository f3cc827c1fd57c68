"""The real controller in-process against the simulated cluster (`MemorySlurm`, what
`slurm-heal demo` runs) and the provider simulator over HTTP, on a clock the test moves.

Faults come from the two simulators' own controls: `MemorySlurm.inject_failure` (a
Slurm command that fails for one node) and `SimulatorServer.set_faults` (timeouts, 5xx,
lost answers, failed actions, actions that never finish).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import extra
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, CycleReport, Notifier
from slurm_heal.models import Effect, Remediation
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Evidence, Severity


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
    notes: Path
    reports: list[CycleReport] = field(default_factory=list)
    idle_wait: float = 0.5  # seconds a cycle waits for the simulator's actions to end

    def alert(self, node: str, fault: str = "gpu.xid.119",
              severity: Severity = Severity.CRITICAL) -> None:
        """What the node check publishes (its own tests prove that part)."""
        now = self.clock()
        a = Alert(node=node, fault=fault, severity=severity, summary=f"{fault} seen",
                  first_seen=now, last_seen=now, detector="kernel_log",
                  evidence=(Evidence(source="kmsg", text=f"NVRM: Xid ...: {fault}"),))
        self.cluster.set_extra(node, extra.KEY, extra.our_section([a], now))

    def cycle(self, seconds: float = 30.0) -> None:
        self.reports.append(self.controller.cycle())
        if self.idle_wait:
            self.sim.wait_idle(self.idle_wait)
        self.clock.now += timedelta(seconds=seconds)

    def run(self, cycles: int, seconds: float = 30.0) -> None:
        for _ in range(cycles):
            self.cycle(seconds)

    def rems(self, node: str | None = None) -> list[Remediation]:
        return [r for r in self.store.load().remediations if node is None or r.node == node]


@contextmanager
def memory_rig(tmp_path: Path, nodes: list[tuple[str, str]], policy: dict[str, Any],
               notifier: Callable[[Effect, datetime], None] | None = None,
               reboot_takes: timedelta = timedelta(minutes=3)) -> Iterator[Rig]:
    """Provider reboots take ``reboot_takes``; a node runs its health check at boot (a
    clean log). The clock starts at the real date (the CLI stamps commands with it)."""
    clock = Clock(datetime.now(timezone.utc).replace(microsecond=0))
    holder: dict[str, MemorySlurm] = {}

    def on_boot(node: str) -> None:
        holder["c"].set_extra(node, extra.KEY, extra.our_section([], clock()))

    cluster = MemorySlurm(nodes, clock=clock, on_boot=on_boot)
    holder["c"] = cluster

    def on_action(node: str, action: Action, op: Any) -> str | None:
        cluster.simulate_reboot(node, reboot_takes)
        return None

    with SimulatorServer(port=0, on_action=on_action, duration=0.0) as sim:
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=5, attempts=3,
                                backoff=0.01)
        store = Store(tmp_path / "state")
        notes = tmp_path / "notes.jsonl"
        ctl = Controller(slurm=cluster, provider=provider, store=store,
                         policy=policy_from_dict(policy, source="test"), clock=clock,
                         notifier=notifier or Notifier(notes))
        try:
            yield Rig(clock, cluster, sim, store, ctl, notes)
        finally:
            provider.close()
