"""The tests' shared fakes: one clock the test moves, one controller rig.

`Clock` is what the code under test reads as its clock (a datetime, or a float where the
code counts seconds); the test sets or advances `now`. `controller_rig` is the real
controller in-process against the simulated cluster (`MemorySlurm`, what `slurm-heal
demo` runs) and the provider simulator over HTTP, on a `Clock`: reboots through the
provider take `reboot_takes`, and a node runs its health check at boot (a clean log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar

from slurm_heal import extra
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, CycleReport, Notifier
from slurm_heal.models import Effect, Remediation
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Evidence, Severity

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)

T = TypeVar("T", datetime, float)


def wall_now() -> datetime:
    """The real date to the second: a rig's start where the CLI's commands, stamped with
    the real date, must meet its clock."""
    return datetime.now(timezone.utc).replace(microsecond=0)


class Clock(Generic[T]):
    """A clock the test moves: calling it answers `now`."""

    def __init__(self, now: T) -> None:
        self.now: T = now

    def __call__(self) -> T:
        return self.now

    def advance(self, **kw: float) -> None:
        """Move on by ``timedelta(**kw)`` (seconds=, minutes=, hours=, days=)."""
        step = timedelta(**kw)
        if isinstance(self.now, datetime):
            self.now = self.now + step
        else:
            self.now = self.now + step.total_seconds()


@dataclass
class Rig:
    """The cluster, the provider simulator and the store one or more controllers share."""

    clock: Clock[datetime]
    cluster: MemorySlurm
    sim: SimulatorServer
    store: Store
    policy: Any
    notes: Path
    notifier: Callable[[Effect, datetime], None] | None = None
    idle_wait: float = 5.0  # seconds a cycle waits for the simulator's actions to end
    providers: list[HttpProvider] = field(default_factory=list)
    reports: list[CycleReport] = field(default_factory=list)
    _main: Controller | None = None

    def controller(self, clock: Callable[[], datetime] | None = None) -> Controller:
        """A new controller (a replica, or a restart) with its own provider client; on
        ``clock`` (the daemon's `SteadyClock` over this rig's clock), else the rig's."""
        provider = HttpProvider(self.sim.url, connect_timeout=2, read_timeout=5,
                                attempts=3, backoff=0.01)
        self.providers.append(provider)
        return Controller(slurm=self.cluster, provider=provider, store=self.store,
                          policy=self.policy, clock=clock or self.clock,
                          notifier=self.notifier or Notifier(self.notes))

    @property
    def main(self) -> Controller:
        """The rig's own controller, made on first use."""
        if self._main is None:
            self._main = self.controller()
        return self._main

    def alert(self, node: str, fault: str = "gpu.xid.119",
              severity: Severity = Severity.CRITICAL) -> None:
        """What the node check publishes (its own tests prove that part)."""
        now = self.clock()
        a = Alert(node=node, fault=fault, severity=severity, summary=f"{fault} seen",
                  first_seen=now, last_seen=now, detector="kernel_log",
                  evidence=(Evidence(source="kmsg", text=f"NVRM: Xid ...: {fault}"),))
        self.cluster.set_extra(node, extra.KEY, extra.our_section([a], now))

    def cycle(self, ctl: Controller | None = None, step: float = 30.0) -> CycleReport:
        """One cycle of ``ctl`` (the rig's own controller by default), the simulator's
        actions given time to end, then the clock ``step`` seconds on."""
        report = (ctl or self.main).cycle()
        self.reports.append(report)
        if self.idle_wait:
            self.sim.wait_idle(self.idle_wait)
        self.clock.advance(seconds=step)
        return report

    def run(self, ctl: Controller, cycles: int, step: float = 30.0) -> None:
        for _ in range(cycles):
            self.cycle(ctl, step)

    def rems(self, node: str | None = None) -> list[Remediation]:
        return [r for r in self.store.load().remediations if node is None or r.node == node]


@contextmanager
def controller_rig(tmp_path: Path, nodes: list[tuple[str, str]], policy: dict[str, Any], *,
                   start: datetime = T0,
                   notifier: Callable[[Effect, datetime], None] | None = None,
                   reboot_takes: timedelta = timedelta(minutes=3), return_to_service: int = 2,
                   idle_wait: float = 5.0) -> Iterator[Rig]:
    """The rig on ``nodes`` ((name, partition) pairs) under ``policy`` (heal.toml's
    [policy] as a dict); the store in ``tmp_path/state``, notes in ``tmp_path/notes.jsonl``."""
    clock = Clock(start)
    holder: dict[str, MemorySlurm] = {}

    def on_boot(node: str) -> None:  # the node's health check at boot: a clean log
        holder["c"].set_extra(node, extra.KEY, extra.our_section([], clock()))

    cluster = MemorySlurm(nodes, clock=clock, on_boot=on_boot,
                          return_to_service=return_to_service)
    holder["c"] = cluster

    def on_action(node: str, action: Action, op: Any) -> str | None:
        cluster.simulate_reboot(node, reboot_takes)
        return None

    with SimulatorServer(port=0, on_action=on_action, duration=0.0) as sim:
        rig = Rig(clock, cluster, sim, Store(tmp_path / "state"),
                  policy_from_dict(policy, source="test"), tmp_path / "notes.jsonl",
                  notifier=notifier, idle_wait=idle_wait)
        try:
            yield rig
        finally:
            for p in rig.providers:
                p.close()
