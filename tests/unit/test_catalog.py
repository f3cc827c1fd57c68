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


# ---------------------------------------------------------------- NVIDIA's whole Xid catalog

def _xid_faults() -> list[catalog.Fault]:
    return [f for f in catalog.load().faults.values() if f.xid is not None]


def test_every_xid_nvidia_publishes_is_in_the_catalog() -> None:
    """SPEC D1: NVIDIA's Xid catalog for Ampere and newer lists codes 1-172."""
    assert sorted(f.xid for f in _xid_faults() if f.xid is not None) == list(range(1, 173))


def test_no_xid_code_appears_twice_in_the_catalog_file() -> None:
    import re

    text = catalog.CATALOG_FILE.read_text()
    codes = re.findall(r"^\[xid\.(\d+)\]", text, flags=re.MULTILINE)
    dupes = {c for c in codes if codes.count(c) > 1}
    assert not dupes, f"Xid codes listed twice: {sorted(dupes)}"
    assert len(codes) == 172


def test_an_xid_also_listed_as_a_fault_is_rejected_as_a_duplicate() -> None:
    bad = {"faults": {"gpu.xid.unknown": {"severity": "warning", "explanation": "x"},
                      "gpu.xid.48": {"severity": "critical", "explanation": "x"}},
           "xid": {"48": {"severity": "critical", "explanation": "x", "bucket": "RESET_GPU"}}}
    with pytest.raises(CatalogError, match="duplicate fault id gpu.xid.48"):
        catalog.parse_catalog(bad)


def test_every_xid_keeps_nvidias_bucket_and_mnemonic() -> None:
    for f in _xid_faults():
        assert f.bucket in catalog.BUCKETS, f.id
        assert f.mnemonic, f.id


def test_an_xid_without_a_bucket_is_rejected() -> None:
    bad = {"faults": {"gpu.xid.unknown": {"severity": "warning", "explanation": "x"}},
           "xid": {"48": {"severity": "critical", "explanation": "x"}}}
    with pytest.raises(CatalogError, match="gpu.xid.48: NVIDIA resolution bucket"):
        catalog.parse_catalog(bad)


@pytest.mark.parametrize("bucket,expected", [
    ("RESET_GPU", (Action.REBOOT, Severity.CRITICAL, True)),
    ("RESTART_VM", (Action.REBOOT, Severity.CRITICAL, True)),
    ("WORKFLOW_XID_48", (Action.REBOOT, Severity.CRITICAL, True)),
    ("IGNORE", (Action.NONE, Severity.INFO, False)),
    ("RESTART_APP", (Action.NONE, Severity.WARNING, False)),
    ("CONTACT_SUPPORT", (Action.NONE, Severity.WARNING, False)),
])
def test_nvidias_bucket_decides_our_action_and_severity(bucket: str,
                                                        expected: tuple[Action, Severity, bool]) -> None:
    group = [f for f in _xid_faults() if f.bucket == bucket]
    assert group, bucket
    for f in group:
        assert (f.action, f.severity, f.cordon) == expected, f.id


def test_nvlink5_xids_are_marked_for_sub_code_parsing() -> None:
    assert sorted(f.xid for f in _xid_faults() if f.nvlink5) == list(range(144, 151))
