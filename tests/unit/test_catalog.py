"""The fault catalog as data (ARCHITECTURE "catalog as data"; SPEC D8, E4, Q2)."""

import pytest

from slurm_heal import catalog
from slurm_heal.errors import CatalogError
from slurm_heal.types import Action, Severity

REQUIRED = [
    "gpu.off_bus", "gpu.missing", "gpu.ecc.dbe", "gpu.row_remap.failure", "gpu.row_remap.pending",
    "gpu.pcie.replay_rate", "gpu.thermal", "fs.readonly", "fs.xfs_shutdown", "kernel.hung_task",
    "kernel.soft_lockup", "kernel.rcu_stall", "service.restart_loop", "ib.link_down",
    "ib.link_degraded", "host.unreachable", "disk.low_space", "slurm.node_down",
    "slurm.node_drain", "request",
]


@pytest.mark.parametrize("fault_id", REQUIRED)
def test_every_required_fault_is_in_the_catalog(fault_id: str) -> None:
    fault = catalog.load().get(fault_id)
    assert fault.explanation and fault.severity in Severity


@pytest.mark.parametrize("code", [13, 31, 43, 94])
def test_application_level_xids_take_no_node_action(code: int) -> None:
    assert catalog.load().get(f"gpu.xid.{code}").action is Action.NONE


@pytest.mark.parametrize("code", [63, 92])
def test_informational_xids_are_recorded_only(code: int) -> None:
    f = catalog.load().get(f"gpu.xid.{code}")
    assert (f.severity, f.action) == (Severity.INFO, Action.NONE)


@pytest.mark.parametrize("code", [48, 62, 64, 95, 109, 119, 120, 136, 140, 143])
def test_reset_class_xids_reboot_and_cordon(code: int) -> None:
    f = catalog.load().get(f"gpu.xid.{code}")
    assert (f.action, f.severity, f.cordon) == (Action.REBOOT, Severity.CRITICAL, True)


def test_xid_79_needs_the_power_cut_and_migrates_on_vms() -> None:  # SPEC E4
    f = catalog.load().get("gpu.xid.79")
    assert f.action is Action.MIGRATE and f.power_cut


def test_unknown_xid_is_a_warning_never_dropped() -> None:
    f = catalog.load().get("gpu.xid.4242")
    assert (f.severity, f.action, f.known) == (Severity.WARNING, Action.NONE, False)
    assert "4242" in f.explanation


def test_unknown_non_xid_fault_is_an_error() -> None:
    with pytest.raises(CatalogError, match="unknown fault id"):
        catalog.load().get("gpu.bogus")


def test_low_disk_space_is_record_only() -> None:  # SPEC D8
    f = catalog.load().get("disk.low_space")
    assert f.record_only and f.action is Action.NONE


def test_xid_154_maps_the_drivers_recovery_action() -> None:
    c = catalog.load()
    assert c.recovery_action("Node Reboot Required") is Action.REBOOT
    assert c.recovery_action("None") is Action.NONE
    assert c.recovery_action("something new") is None


def test_catalog_records_its_driver_branch() -> None:
    assert catalog.load().driver_branch.startswith("r")


def test_catalog_rejects_an_automatic_remove() -> None:  # SPEC Q2
    bad = {"faults": {"gpu.xid.unknown": {"severity": "warning", "explanation": "x"},
                      "x.y": {"severity": "critical", "action": "remove", "explanation": "x"}}}
    with pytest.raises(CatalogError, match="never automatic"):
        catalog.parse_catalog(bad)


def test_a_hung_task_does_not_drain_on_sight() -> None:
    """SPEC D4 with S5 in mind: a file server failover prints hung-task warnings on every
    client at once; draining them all on sight would empty the cluster."""
    f = catalog.load().get("kernel.hung_task")
    assert (f.severity, f.cordon) == (Severity.WARNING, False)
    assert catalog.load().get("kernel.soft_lockup").cordon  # a stuck CPU still drains
