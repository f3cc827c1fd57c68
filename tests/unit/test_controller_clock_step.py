"""A step of the controller host's wall clock changes no wait (issue 34 item 5; SPEC P3,
L5, P4).

The real controller cycle, engine and store against the simulated cluster and the
provider simulator (tests/fakes.py), on the daemon's `SteadyClock`: the rig's clock is
the host's wall clock (the simulated slurmctld on the same host reads it too), the test
moves a monotonic clock and names the boot beside it. A step is the wall clock moved
without the monotonic one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal.clock import SteadyClock
from slurm_heal.controller import Controller
from slurm_heal.models import Phase, Remediation
from slurm_heal.store import clock_frame
from tests.fakes import Clock, Rig, controller_rig

NODES = [("gpu01", "a"), ("gpu02", "a")]
POLICY = {"approvals": {"default": "manual", "rules": [
    {"fault": "gpu.xid.119", "action": "reboot", "mode": "auto"}]},
    "safety": {"breaker_threshold": 10, "concurrency": 4, "one_per_pool": False,
               "return_timeout": "30m"},
    "waiting": {"max_wait": "1h"},
    "capacity": {"min_available_percent": 0}}
EVICTIONS = ("requeue_jobs", "cancel_jobs")


class Host:
    """The controller's host: the rig's clock as its wall clock, a monotonic clock, a
    boot id."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.mono = Clock(1000.0)
        self.boot = "boot-1"

    def controller(self) -> Controller:
        """The daemon as it starts (a restart: a new process, the same store)."""
        boot = self.boot
        return self.rig.controller(SteadyClock(wall=self.rig.clock, monotonic=self.mono,
                                               boot_id=lambda: boot))

    def run(self, ctl: Controller, cycles: int, step: float) -> None:
        """``cycles`` cycles, ``step`` seconds of real time after each."""
        for _ in range(cycles):
            self.rig.cycle(ctl, step)
            self.mono.advance(seconds=step)

    def until(self, ctl: Controller, phase: Phase, step: float) -> Remediation:
        for _ in range(60):
            self.run(ctl, 1, step)
            rems = self.rig.rems("gpu01")
            if rems and rems[0].phase is phase:
                return rems[0]
        raise AssertionError(f"never {phase.value}: {self.rig.rems('gpu01')}")

    def steps_logged(self, caplog: pytest.LogCaptureFixture) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "wall clock stepped" in r.getMessage()]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with controller_rig(tmp_path, NODES, POLICY, idle_wait=0.5,
                        reboot_takes=timedelta(days=1)) as rig:
        yield Host(rig)


def evictions(rem: Remediation) -> list[str]:
    return [a.effect for a in rem.attempts if a.effect in EVICTIONS]


def test_wall_clock_step_forward_does_not_end_the_job_wait(
        host: Host, caplog: pytest.LogCaptureFixture) -> None:
    """SPEC P3: a job on gpu01, max_wait 1 h. 15 s into the wait the wall clock steps
    +2 h: no requeue (15 s of the hour passed), the step logged once (WARNING, its size),
    the wait's start moved with it; the wait still ends after its real hour."""
    caplog.set_level(logging.WARNING, logger="slurm_heal.controller")
    rig = host.rig
    rig.cluster.submit_job("gpu01", timedelta(days=30))
    rig.alert("gpu01")
    ctl = host.controller()
    rem = host.until(ctl, Phase.WAITING, step=5)
    cordoned = rem.phase_times["cordoned"]
    host.run(ctl, 2, step=5)
    rig.clock.advance(hours=2)  # the step: the wall clock only
    host.run(ctl, 3, step=5)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.WAITING and not evictions(rem), rem.steps
    assert rig.cluster.jobs("gpu01")  # the job runs on
    assert rem.phase_times["cordoned"] == cordoned + timedelta(hours=2)
    assert any("clock stepped +2:00:00" in s.why and s.rule == "P4" for s in rem.steps)
    logged = host.steps_logged(caplog)
    assert len(logged) == 1 and "+2:00:00" in logged[0], logged
    # the hour counts real time: not over at 58 minutes, over at 61
    start = rem.phase_times["cordoned"]
    while rig.clock() - start < timedelta(minutes=58):
        host.run(ctl, 1, step=60)
    assert not evictions(rig.rems("gpu01")[0])
    host.run(ctl, 3, step=60)
    (rem,) = rig.rems("gpu01")
    assert evictions(rem) == ["requeue_jobs"], rem.steps
    evicted = next(a.started for a in rem.attempts if a.effect in EVICTIONS)
    assert timedelta(hours=1) <= evicted - start <= timedelta(hours=1, minutes=1)
    assert len(host.steps_logged(caplog)) == 1


def test_wall_clock_step_back_does_not_lengthen_the_return_timeout(
        host: Host, caplog: pytest.LogCaptureFixture) -> None:
    """SPEC L5: gpu01 was rebooted and does not come back (return_timeout 30 m). The wall
    clock steps +2 h, then back -2 h: the return timeout still ends the remediation after
    its real 30 minutes, neither at once (+2 h) nor 2 h later (counted from the future)."""
    caplog.set_level(logging.WARNING, logger="slurm_heal.controller")
    rig = host.rig
    rig.alert("gpu01")
    ctl = host.controller()
    host.until(ctl, Phase.RETURNING, step=30)
    returning = host.mono()
    host.run(ctl, 1, step=60)
    rig.clock.advance(hours=2)
    host.run(ctl, 10, step=60)
    assert rig.rems("gpu01")[0].phase is Phase.RETURNING
    rig.clock.advance(hours=-2)
    while host.mono() - returning < 28 * 60:
        host.run(ctl, 1, step=60)
    assert rig.rems("gpu01")[0].phase is Phase.RETURNING
    host.run(ctl, 4, step=60)
    rem = rig.rems("gpu01")[0]  # (E1's next recommendation follows it)
    assert rem.phase is Phase.FAILED, rem.steps
    assert any(s.rule == "L5" and "within 30m" in s.why for s in rem.steps), rem.steps
    assert [m.split("stepped ")[1][:8] for m in host.steps_logged(caplog)] == \
        ["+2:00:00", "-2:00:00"]


def test_step_made_while_the_daemon_was_stopped_is_seen_at_start(
        host: Host, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 34 item 5: the daemon stops 15 s into gpu01's wait; the wall clock steps
    +2 h; it starts again on the same boot. The store's recorded frame shows the step:
    no requeue, the stored times moved once, logged once."""
    caplog.set_level(logging.WARNING, logger="slurm_heal.controller")
    rig = host.rig
    rig.cluster.submit_job("gpu01", timedelta(days=30))
    rig.alert("gpu01")
    rem = host.until(host.controller(), Phase.WAITING, step=5)
    cordoned = rem.phase_times["cordoned"]
    host.mono.advance(seconds=10)  # stopped for 10 s, in which the wall clock stepped
    rig.clock.advance(hours=2, seconds=10)
    ctl = host.controller()  # the restart
    host.run(ctl, 3, step=5)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.WAITING and not evictions(rem), rem.steps
    assert rem.phase_times["cordoned"] == cordoned + timedelta(hours=2)
    assert len(host.steps_logged(caplog)) == 1
    # a second restart without a step moves nothing
    host.run(host.controller(), 2, step=5)
    assert rig.rems("gpu01")[0].phase_times["cordoned"] == cordoned + timedelta(hours=2)
    assert len(host.steps_logged(caplog)) == 1


def test_new_boot_anchors_fresh_without_a_step(
        host: Host, caplog: pytest.LogCaptureFixture) -> None:
    """After a reboot of the controller's host (a new boot id, the monotonic clock from
    zero) the clock anchors on the wall clock: nothing moves, nothing is logged, the
    store records the new boot's frame."""
    caplog.set_level(logging.WARNING, logger="slurm_heal.controller")
    rig = host.rig
    rig.cluster.submit_job("gpu01", timedelta(days=30))
    rig.alert("gpu01")
    rem = host.until(host.controller(), Phase.WAITING, step=5)
    cordoned = rem.phase_times["cordoned"]
    rig.clock.advance(minutes=10)  # down for ten minutes
    host.boot, host.mono = "boot-2", Clock(3.0)
    ctl = host.controller()
    host.run(ctl, 2, step=5)
    (rem,) = rig.rems("gpu01")
    assert rem.phase is Phase.WAITING and rem.phase_times["cordoned"] == cordoned
    frame = clock_frame(rig.store.load())
    assert frame is not None and frame.boot == "boot-2"
    assert not host.steps_logged(caplog)
