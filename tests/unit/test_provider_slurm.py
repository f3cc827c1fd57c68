"""The slurm provider: reboot through scontrol (the site's RebootProgram); everything
else refused (SPEC L2, S6). Runs against the in-process Slurm cluster (the product's
own simulated cluster, slurm_heal.slurm.memory), with a clock the test moves."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderRefused
from slurm_heal.providers.slurm import SlurmRebootProvider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action
from tests.fakes import Clock


@pytest.fixture
def clock() -> Clock[datetime]:
    return Clock(datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc))


@pytest.fixture
def cluster(clock: Clock[datetime]) -> MemorySlurm:
    return MemorySlurm([("gpu07", "gpu"), ("gpu08", "gpu")], clock=clock)


@pytest.mark.parametrize("action", [Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE])
def test_slurm_cannot_rebuild_migrate_or_power_cycle(cluster: MemorySlurm, clock: Clock[datetime],
                                                      action: Action) -> None:
    p = SlurmRebootProvider(cluster, clock=clock)
    assert not p.supports(action)
    with pytest.raises(ProviderRefused, match=f"cannot {action.value} a node"):
        p.submit("gpu07", action, "r-1:act:0")
    assert cluster.history("gpu07") == []


def test_reboot_succeeds_once_the_node_is_back(cluster: MemorySlurm, clock: Clock[datetime],
                                               tmp_path: Path) -> None:
    p = SlurmRebootProvider(cluster, clock=clock, state_dir=tmp_path)
    clock.now += timedelta(seconds=30)
    op = p.submit("gpu07", Action.REBOOT, "r-2:act:0")
    assert op.status == "running" and "scontrol reboot" in op.detail
    assert p.status("r-2:act:0").status == "running"  # type: ignore[union-attr]
    clock.now += timedelta(seconds=5)  # the simulated reboot takes 2 s
    done = p.status("r-2:act:0")
    assert done is not None and done.status == "succeeded" and "is back" in done.detail


def test_same_key_reboots_once_even_after_a_restart(cluster: MemorySlurm, clock: Clock[datetime],
                                                    tmp_path: Path) -> None:
    SlurmRebootProvider(cluster, clock=clock, state_dir=tmp_path).submit(
        "gpu07", Action.REBOOT, "r-3:act:0")
    SlurmRebootProvider(cluster, clock=clock, state_dir=tmp_path).submit(
        "gpu07", Action.REBOOT, "r-3:act:0")
    assert cluster.history("gpu07") == ["reboot"]


def test_node_that_never_returns_fails_after_the_timeout(cluster: MemorySlurm,
                                                         clock: Clock[datetime],
                                                         tmp_path: Path) -> None:
    p = SlurmRebootProvider(cluster, clock=clock, state_dir=tmp_path, timeout=60)
    op = p.submit("gpu08", Action.REBOOT, "r-4:act:0")
    cluster.simulate_reboot("gpu08", timedelta(hours=1))  # it hangs in boot
    clock.now += timedelta(seconds=61)
    failed = p.status(op.key)
    assert failed is not None and failed.status == "failed"
    assert "did not come back within 60s" in failed.detail


def test_unknown_key_has_no_status(cluster: MemorySlurm, clock: Clock[datetime]) -> None:
    assert SlurmRebootProvider(cluster, clock=clock).status("r-x:act:0") is None
