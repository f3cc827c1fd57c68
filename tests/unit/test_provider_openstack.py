"""The openstack provider against the simulator's Keystone v3 + Nova subset (SPEC L2, S6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providers.openstack import OpenStackProvider
from slurm_heal.providers.simulator import SimulatorServer, server_id
from slurm_heal.types import Action


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.05, os_users={"heal": "pw"}) as server:
        yield server


def _provider(sim: SimulatorServer, tmp_path: Path, **kw: object) -> OpenStackProvider:
    args: dict[str, object] = dict(auth_url=sim.url, username="heal", password="pw",
                                   project_name="hpc", image="img-clean", state_dir=tmp_path,
                                   read_timeout=1.0, backoff=0.01, sleep=lambda s: None)
    args.update(kw)
    return OpenStackProvider(**args)  # type: ignore[arg-type]


def test_hard_reboot_through_nova_succeeds_once_active(sim: SimulatorServer,
                                                      tmp_path: Path) -> None:
    p = _provider(sim, tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-1:act:0")
    assert op.status == "running" and "reboot accepted" in op.detail
    assert sim.wait_idle(5)
    done = p.status("r-1:act:0")
    assert done is not None and done.status == "succeeded"
    assert sim.stats()["executed"] == {"r-1:act:0": 1}


def test_rebuild_and_migrate_reach_nova(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path)
    p.submit("gpu07", Action.REBUILD, "r-2:act:0")
    p.submit("gpu08", Action.MIGRATE, "r-3:act:0")
    actions = {o["node"]: o["action"] for o in sim.operations()}
    assert actions == {"gpu07": "rebuild", "gpu08": "migrate"}
    # Migrate hands the old host to validation (SPEC V1).
    assert [v["host"] for v in sim.validation()] == ["host-gpu08"]


def test_a_key_is_never_posted_twice_even_after_a_restart(sim: SimulatorServer,
                                                          tmp_path: Path) -> None:
    """Nova has no idempotency key: the local record keeps S6."""
    _provider(sim, tmp_path).submit("gpu07", Action.REBOOT, "r-4:act:0")
    again = _provider(sim, tmp_path).submit("gpu07", Action.REBOOT, "r-4:act:0")
    assert again.key == "r-4:act:0"
    assert sim.stats()["executed"] == {"r-4:act:0": 1}


def test_lost_answer_is_resolved_by_polling_not_by_posting_again(sim: SimulatorServer,
                                                                 tmp_path: Path) -> None:
    sim.set_faults(lose_response=1)
    p = _provider(sim, tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-5:act:0")
    assert op.status == "running" and "no answer" in op.detail
    assert sim.wait_idle(5)
    done = p.status("r-5:act:0")
    assert done is not None and done.status == "succeeded"
    assert sim.stats()["executed"] == {"r-5:act:0": 1}


def test_failed_server_ends_the_operation_failed(sim: SimulatorServer, tmp_path: Path) -> None:
    sim.set_faults(fail_actions=1)
    p = _provider(sim, tmp_path)
    p.submit("gpu07", Action.REBOOT, "r-6:act:0")
    assert sim.wait_idle(5)
    done = p.status("r-6:act:0")
    assert done is not None and done.status == "failed" and "ERROR" in done.detail


def test_configured_server_map_skips_the_name_lookup(sim: SimulatorServer,
                                                     tmp_path: Path) -> None:
    sim.host_of("gpu07")  # the server exists in the simulated cloud
    p = _provider(sim, tmp_path, servers={"gpu07": server_id("gpu07")})
    assert p.submit("gpu07", Action.REBOOT, "r-7:act:0").node == "gpu07"


def test_wrong_password_is_a_clear_error(sim: SimulatorServer, tmp_path: Path) -> None:
    p = _provider(sim, tmp_path, password="nope")
    with pytest.raises(ProviderError, match="HTTP 401.*requires authentication"):
        p.submit("gpu07", Action.REBOOT, "r-8:act:0")
    assert sim.stats()["executed"] == {}


def test_power_cycle_and_imageless_rebuild_are_refused(sim: SimulatorServer,
                                                       tmp_path: Path) -> None:
    p = _provider(sim, tmp_path, image=None)
    assert not p.supports(Action.REBUILD) and not p.supports(Action.POWER_CYCLE)
    with pytest.raises(ProviderRefused, match="rebuild needs"):
        p.submit("gpu07", Action.REBUILD, "r-9:act:0")
    with pytest.raises(ProviderRefused, match="cannot power_cycle"):
        p.submit("gpu07", Action.POWER_CYCLE, "r-10:act:0")
