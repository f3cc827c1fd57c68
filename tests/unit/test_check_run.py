"""`slurm-heal check` end to end on a replay root, against the in-memory Slurm
(SPEC D1, D7, I1, I2; house style 2 "we own our reasons")."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import extra
from slurm_heal.checks import config, fastcli, runner
from slurm_heal.errors import SlurmError
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.memory import MemorySlurm

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
XID79 = "2,501,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
XID13 = "4,502,130223999,-;NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception: ESR 0x404600\n"
NOISE = "6,500,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"


class Node:
    """A replayed node: files under a root dir, SLURM_HEAL_ROOT pointing at it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "dev").mkdir(parents=True)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        self.boot("boot-1")
        self.kmsg(NOISE)
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")

    def boot(self, boot_id: str) -> None:
        (self.root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")

    def kmsg(self, text: str, append: bool = False) -> None:
        with (self.root / "dev/kmsg").open("a" if append else "w") as fh:
            fh.write(text)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no systemctl: services unsupported
    return Node(tmp_path / "root")


@pytest.fixture
def slurm() -> MemorySlurm:
    return MemorySlurm([("gpu01", "gpu"), ("gpu02", "gpu")], clock=lambda: T0)


def check(slurm: SlurmClient | None, mode: str = "healthcheck", dry_run: bool = False,
          now: datetime = T0,
          factory: Callable[[], SlurmClient] | None = None) -> runner.CheckResult:
    return runner.run_check(config.CheckConfig(), node_name="gpu01", mode=mode, dry_run=dry_run,
                            client=slurm, client_factory=factory, now=now)


def ours(slurm: MemorySlurm) -> dict[str, object] | None:
    ex = slurm.node("gpu01").extra or {}
    value = ex.get(extra.KEY)
    return value if isinstance(value, dict) else None


def test_xid_79_drains_the_node_and_publishes_the_alert_with_evidence(node: Node,
                                                                     slurm: MemorySlurm) -> None:
    """SPEC D1, D7, I2: alert with the raw line in Extra, drained with our reason."""
    node.kmsg(XID79, append=True)
    result = check(slurm)
    assert result.exit_code == runner.EXIT_FINDINGS
    info = slurm.node("gpu01")
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check")
    section = ours(slurm)
    assert section is not None
    (alert,) = section["alerts"]  # type: ignore[index]
    assert alert["fault"] == "gpu.xid.79" and alert["severity"] == "critical"
    assert "GPU has fallen off the bus" in alert["evidence"][0]["text"]
    assert alert["evidence"][0]["data"]["pci"] == "0000:3b:00"


def test_alert_stays_and_keeps_its_first_seen_while_nothing_new_is_logged(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S1 needs first_seen to persist; an Xid 79 does not go away by itself."""
    node.kmsg(XID79, append=True)
    check(slurm)
    later = check(slurm, now=T0 + timedelta(minutes=10))
    (alert,) = later.alerts
    assert alert.first_seen == T0 and alert.last_seen == T0 + timedelta(minutes=10)
    assert slurm.node("gpu01").drained


def test_after_a_reboot_the_alert_clears_and_our_drain_is_resumed(node: Node,
                                                                 slurm: MemorySlurm) -> None:
    node.kmsg(XID79, append=True)
    check(slurm)
    node.boot("boot-2")
    node.kmsg(NOISE)  # a fresh kernel ring buffer
    result = check(slurm, now=T0 + timedelta(minutes=30))
    assert result.exit_code == runner.EXIT_HEALTHY
    assert not slurm.node("gpu01").drained
    section = ours(slurm)  # SPEC L5: no alerts, and when the check ran
    assert section is not None and section["alerts"] == []
    assert section["checked_at"] == (T0 + timedelta(minutes=30)).isoformat()
    assert any("resumed" in a for a in result.actions)


def test_a_node_drained_by_someone_else_is_never_resumed_or_relabelled(
        node: Node, slurm: MemorySlurm) -> None:
    """House style 2: "bad DIMM" stays exactly as the operator wrote it."""
    slurm.drain("gpu01", "bad DIMM")
    node.kmsg(XID79, append=True)
    first = check(slurm)
    assert slurm.node("gpu01").reason == "bad DIMM"
    assert any("already drained by someone else" in n for n in first.notes)
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=30))
    info = slurm.node("gpu01")
    assert info.drained and info.reason == "bad DIMM"


XID79_AGAIN = ("2,503,130299999,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1300, name=python3, "
               "GPU has fallen off the bus.\n")


def test_a_persons_resume_of_their_own_drain_acknowledges_what_was_published(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8 (issue 32, the deployed suite's own-drain): a person drained the node; an
    Xid 79 is published while it is theirs (not drained over); they resume it: what was
    published then is acknowledged and never drains it again; a new record of it does."""
    slurm.drain("gpu01", "bad DIMM -- bob")
    node.kmsg(XID79, append=True)
    first = check(slurm)
    assert slurm.node("gpu01").reason == "bad DIMM -- bob"  # theirs, never relabelled
    assert [a.fault for a in first.alerts] == ["gpu.xid.79"]
    slurm.resume("gpu01")  # the person, with the fault in Extra
    second = check(slurm, now=T0 + timedelta(minutes=5))
    assert [a.fault for a in second.acknowledged] == ["gpu.xid.79"]
    assert not slurm.node("gpu01").drained
    assert not slurm.node("gpu01").drained and check(
        slurm, now=T0 + timedelta(minutes=10)).acknowledged
    node.kmsg(XID79_AGAIN, append=True)  # a record nobody saw: a new fault
    check(slurm, now=T0 + timedelta(minutes=15))
    assert slurm.node("gpu01").drained and "by=check" in slurm.node("gpu01").reason


XID119 = ("2,504,130300000,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1400, name=python3, Timeout "
          "after 6s of waiting for RPC response from GPU0 GSP!\n")


def test_a_second_resume_keeps_what_the_first_acknowledged(node: Node,
                                                           slurm: MemorySlurm) -> None:
    """SPEC S8 (issue 32, the deployed suite's resume-race): a person resumed the node over
    an Xid 79 (acknowledged); a new fault, an Xid 119, drains it again; the person resumes
    it again: the 119 is acknowledged and the 79 stays acknowledged (it was dropped, and
    the node drained again for the 79 the person had seen twice)."""
    node.kmsg(XID79, append=True)
    check(slurm)
    slurm.resume("gpu01")
    assert [a.fault for a in check(slurm, now=T0 + timedelta(minutes=1)).acknowledged] \
        == ["gpu.xid.79"]
    node.kmsg(XID119, append=True)
    check(slurm, now=T0 + timedelta(minutes=2))
    assert "gpu.xid.119" in slurm.node("gpu01").reason
    slurm.resume("gpu01")
    after = check(slurm, now=T0 + timedelta(minutes=3))
    assert sorted(a.fault for a in after.acknowledged) == ["gpu.xid.119", "gpu.xid.79"]
    assert not slurm.node("gpu01").drained
    check(slurm, now=T0 + timedelta(minutes=4))
    assert not slurm.node("gpu01").drained


def test_nhcs_own_lift_of_its_drain_is_no_persons_resume(node: Node,
                                                          slurm: MemorySlurm) -> None:
    """LBNL NHC resumes a node it drained ("NHC: ...") by itself once its check passes:
    no person saw our fault, so the next run drains the node for it (SPEC S8, D1)."""
    slurm.drain("gpu01", "NHC: check_fs_mount:  /scratch not mounted")
    node.kmsg(XID79, append=True)
    check(slurm)
    slurm.resume("gpu01")  # NHC's node-mark-online
    after = check(slurm, now=T0 + timedelta(minutes=5))
    assert after.acknowledged == []
    assert slurm.node("gpu01").drained and "by=check" in slurm.node("gpu01").reason


def test_a_node_the_controller_cordoned_is_not_resumed_by_the_check(
        node: Node, slurm: MemorySlurm) -> None:
    node.kmsg(XID79, append=True)
    check(slurm)
    slurm.resume("gpu01")
    slurm.drain("gpu01", "heal: gpu.xid.79 rem=r-1 by=controller cordoned for migrate")
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=30))
    assert slurm.node("gpu01").reason.startswith("heal: gpu.xid.79 rem=r-1 by=controller")


def test_foreign_extra_keys_are_kept(node: Node, slurm: MemorySlurm) -> None:
    slurm.set_extra("gpu01", "site", {"rack": "r12"})
    node.kmsg(XID79, append=True)
    check(slurm)
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=30))
    ex = slurm.node("gpu01").extra or {}
    assert ex["site"] == {"rack": "r12"} and set(ex) == {"site", extra.KEY}
    assert ex[extra.KEY]["alerts"] == []


def test_non_json_extra_is_kept_and_the_node_still_drains(node: Node,
                                                          slurm: MemorySlurm) -> None:
    """A site's own text in Extra is never overwritten, and a GPU off the bus must
    still keep jobs away (review finding: the drain used to be skipped)."""
    slurm.set_extra_text("gpu01", "rack=B12 pdu=7")
    node.kmsg(XID79, append=True)
    result = check(slurm)
    info = slurm.node("gpu01")
    assert info.extra_raw == "rack=B12 pdu=7"
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check")
    assert any("not written" in n for n in result.notes)


def test_a_node_an_admin_set_down_keeps_its_reason(node: Node, slurm: MemorySlurm) -> None:
    """House style 2: DOWN by a person ("RMA ticket") is not relabelled, never resumed."""
    slurm.mark_down("gpu01", "RMA ticket 4711")
    node.kmsg(XID79, append=True)
    check(slurm)
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=30))
    info = slurm.node("gpu01")
    assert info.down and info.reason == "RMA ticket 4711"


def test_a_drain_whose_answer_was_lost_is_still_resumed_later(node: Node,
                                                             slurm: MemorySlurm) -> None:
    """scontrol timed out after slurmctld applied the drain: the check still owns it."""
    real_drain = slurm.drain

    def drain_then_time_out(name: str, reason: str) -> None:
        real_drain(name, reason)
        raise SlurmError("scontrol timed out", command=["scontrol", "update"])

    slurm.drain = drain_then_time_out  # type: ignore[method-assign]
    node.kmsg(XID79, append=True)
    with pytest.raises(SlurmError):
        check(slurm)
    slurm.drain = real_drain  # type: ignore[method-assign]
    assert slurm.node("gpu01").drained
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=30))
    assert not slurm.node("gpu01").drained


def test_dry_run_writes_nothing_to_slurm(node: Node, slurm: MemorySlurm) -> None:
    node.kmsg(XID79, append=True)
    result = check(slurm, dry_run=True)
    assert [f.fault for f in result.findings] == ["gpu.xid.79"]
    assert not slurm.node("gpu01").drained and ours(slurm) is None


def test_a_healthy_node_with_nothing_published_does_not_call_slurm(node: Node) -> None:
    """Cheap epilogs: once the state knows nothing of ours is in Slurm, no Slurm call."""
    calls: list[int] = []

    def factory() -> SlurmClient:
        calls.append(1)
        return MemorySlurm([("gpu01", "gpu")], clock=lambda: T0)

    check(None, factory=factory)  # first run reconciles with Slurm once
    check(None, mode="epilog", factory=factory)
    check(None, mode="prolog", factory=factory)
    assert calls == [1]  # (each health-check run refreshes checked_at: SPEC O1)


def test_a_warning_is_published_but_does_not_drain(node: Node, slurm: MemorySlurm) -> None:
    """SPEC D8: an application Xid is recorded, the node stays in service."""
    node.kmsg(XID13, append=True)
    result = check(slurm)
    assert result.exit_code == runner.EXIT_FINDINGS
    assert not slurm.node("gpu01").drained
    assert ours(slurm) is not None


def test_a_failing_detector_keeps_the_alert_and_the_drain(node: Node,
                                                         slurm: MemorySlurm) -> None:
    """A broken detector never clears an alert or resumes a node."""
    node.kmsg(XID79, append=True)
    check(slurm)
    (node.root / "dev/kmsg").unlink()
    result = check(slurm, now=T0 + timedelta(minutes=5))
    assert [s.status for s in result.statuses if s.name == "kernel_log"] == ["error"]
    assert [a.fault for a in result.alerts] == ["gpu.xid.79", runner.DETECTOR_ERROR]  # O1
    assert slurm.node("gpu01").drained


def test_a_detectors_error_stands_through_runs_that_do_not_run_it(node: Node,
                                                                 slurm: MemorySlurm) -> None:
    """SPEC O1: the health check's nvidia detector cannot run (the driver loaded,
    nvidia-smi missing); a prolog run (no nvidia detector in that mode) and the agent's
    wake-up for one kernel record keep the error's alert as it was (same first seen,
    nothing written to Slurm), so the controller does not see a new alert, and notify
    again, after every such run (the deployed suite: one notification every few
    seconds). A run of it that works ends it."""
    (node.root / "proc/driver/nvidia").mkdir(parents=True)
    first = check(slurm)
    (err,) = [a for a in first.alerts if a.fault == runner.DETECTOR_ERROR]
    assert "nvidia-smi is not on PATH" in err.summary
    before = slurm.node("gpu01").extra_raw
    for mode, minutes in (("prolog", 1), ("epilog", 2)):
        result = check(slurm, mode=mode, now=T0 + timedelta(minutes=minutes))
        assert [(a.fault, a.first_seen) for a in result.alerts] == [(runner.DETECTOR_ERROR,
                                                                     T0)]
        assert result.exit_code == 0
    woke = runner.run_check(config.CheckConfig(), node_name="gpu01", mode="agent",
                            client=slurm, only=frozenset({"kernel_log"}),
                            now=T0 + timedelta(minutes=3))
    assert [(a.fault, a.first_seen) for a in woke.alerts] == [(runner.DETECTOR_ERROR, T0)]
    assert slurm.node("gpu01").extra_raw == before  # nothing changed, nothing written
    (node.root / "proc/driver/nvidia").rmdir()  # no driver: the detector has nothing to do
    healthy = check(slurm, now=T0 + timedelta(minutes=4))
    assert [a.fault for a in healthy.alerts] == []


def test_a_read_only_root_file_system_drains_the_node(node: Node, slurm: MemorySlurm) -> None:
    """SPEC D4."""
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    check(slurm)
    assert slurm.node("gpu01").reason.startswith("heal: fs.readonly by=check")


def test_prolog_fails_only_for_faults_that_make_the_node_unusable(node: Node,
                                                                  slurm: MemorySlurm) -> None:
    node.kmsg(XID13, append=True)
    assert check(slurm, mode="prolog").exit_code == 0
    node.kmsg(XID79, append=True)
    assert check(slurm, mode="prolog").exit_code == 1


def test_epilog_always_exits_zero_and_drains_with_our_reason(node: Node,
                                                            slurm: MemorySlurm) -> None:
    """A failing epilog makes Slurm drain with its own reason; we drain with ours."""
    node.kmsg(XID79, append=True)
    assert check(slurm, mode="epilog").exit_code == 0
    assert slurm.node("gpu01").reason.startswith("heal: gpu.xid.79")


def test_json_output_is_a_list_of_findings(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    node.kmsg(XID79, append=True)
    code = fastcli.main(["--json", "--dry-run", "--node", "gpu01"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert set(out[0]) == {"fault", "severity", "summary", "evidence", "detector", "node"}
    assert out[0]["node"] == "gpu01"


def test_a_bad_config_file_is_a_usage_error_naming_the_key(
        node: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "check.toml"
    bad.write_text("[kernel_log]\nsorce = 'kmsg'\n")
    assert fastcli.main(["--config", str(bad), "--dry-run"]) == 2
    assert "kernel_log.sorce" in capsys.readouterr().err


def test_prolog_fails_when_an_unusable_node_cannot_be_drained(node: Node,
                                                              slurm: MemorySlurm) -> None:
    """SPEC I1: the prolog's exit 1 makes Slurm drain the node and requeue the job, the
    fallback when our own drain cannot reach slurmctld."""
    def refuse(name: str, reason: str) -> None:
        raise SlurmError("slurmctld not answering", command=["scontrol", "update"])

    slurm.drain = refuse  # type: ignore[method-assign]
    node.kmsg(XID79, append=True)
    result = check(slurm, mode="prolog")
    assert result.exit_code == runner.EXIT_FINDINGS
    assert any("prolog fails" in n for n in result.notes)


def _nvidia_smi_stub(node: Node, xml_name: str = "smi-q-x-healthy-8.xml") -> None:
    data = Path(__file__).resolve().parent.parent / "data" / "nvidia"
    bin_dir = node.root.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "nvidia-smi"
    stub.write_text(f"""#!/bin/sh
case "$1" in
  -q) /bin/cat "{data / xml_name}";;
  nvlink) /bin/cat "{data / 'nvlink-s-healthy-8.txt'}";;
esac
""")
    stub.chmod(0o755)


def test_gpu_serials_are_published_as_the_machine_identity(node: Node,
                                                           slurm: MemorySlurm) -> None:
    """SPEC E1/E3: the controller's machine identity comes from the GPU serials, so the
    same bad hardware is recognised under another node name or after a re-image."""
    from slurm_heal.policy.engine import host_of

    _nvidia_smi_stub(node)
    check(slurm)
    section = ours(slurm)
    assert section is not None
    serials = [f"165492200{1000 + i}" for i in range(8)]
    assert section["machine"] == {"gpu_serials": serials}
    assert section["host"] == extra.machine_identity(serials)["host"]  # type: ignore[index]
    assert host_of(slurm.node("gpu01"), "gpu01") == section["host"]


def test_the_nodes_driver_cohort_is_published_for_the_controller(node: Node,
                                                                 slurm: MemorySlurm) -> None:
    """SPEC S7, D12 (issue 37): the node check publishes the domains the node is in (its
    driver version and VBIOS here; no NVLink domain on a board without one), and the
    controller reads them back."""
    _nvidia_smi_stub(node)
    check(slurm)
    section = ours(slurm)
    assert section is not None
    assert section["domains"] == {"driver": "570.124.06", "vbios": "96.00.99.00.01"}
    data = extra.read_check_data("gpu01", slurm.node("gpu01").extra, T0)
    assert dict(data.domains) == {"driver": "570.124.06", "vbios": "96.00.99.00.01"}
    # An image-based OS names its image in os-release (IMAGE_ID, IMAGE_VERSION): it joins
    # the cohort, and the change is published at once.
    (node.root / "etc").mkdir(exist_ok=True)
    (node.root / "etc/os-release").write_text('NAME="Ubuntu"\nIMAGE_ID=gpu-node\n'
                                              'IMAGE_VERSION="2026.01.3"\n')
    check(slurm, now=T0 + timedelta(minutes=1))
    assert ours(slurm)["domains"]["image"] == "gpu-node 2026.01.3"  # type: ignore[index]


def test_machine_identity_is_the_same_for_the_same_gpus_in_any_order() -> None:
    a = extra.machine_identity(["B2", "A1", " A1 "])
    b = extra.machine_identity(["A1", "B2"])
    assert a is not None and b is not None and a["host"] == b["host"]
    assert a["host"] != (extra.machine_identity(["A1", "C3"]) or {}).get("host")
    assert extra.machine_identity([]) is None
    assert extra.machine_identity([], "i-0abc") == {"host": "instance-i-0abc",
                                                    "instance_id": "i-0abc"}


def test_slurms_instance_id_is_published_in_the_machine_identity(node: Node,
                                                                 slurm: MemorySlurm) -> None:
    """SPEC E1/E3: where Slurm has an InstanceId (23.11+) it travels with the GPU serials;
    it is read from Slurm once per boot, not on every run."""
    _nvidia_smi_stub(node)
    slurm.set_instance_id("gpu01", "i-0abc123")
    check(slurm)
    section = ours(slurm)
    assert section is not None
    assert section["machine"]["instance_id"] == "i-0abc123"  # type: ignore[index]
    assert str(section["host"]).startswith("gpus-")  # the GPUs identify the hardware first
    slurm.set_instance_id("gpu01", "i-changed")
    node.kmsg(XID79, append=True)
    check(slurm, now=T0 + timedelta(minutes=5))
    assert ours(slurm)["machine"]["instance_id"] == "i-0abc123"  # type: ignore[index]


def test_a_persons_resume_acknowledges_the_faults_seen_so_far(node: Node,
                                                              slurm: MemorySlurm) -> None:
    """SPEC S8: drained for an Xid 79, resumed by a person: the Xid is acknowledged
    (published under ``acknowledged``, no alert for the controller) and the node stays in
    service, the prolog passes; a fault the person did not see (an Xid 13) drains it."""
    node.kmsg(XID79, append=True)
    check(slurm)
    slurm.resume("gpu01")  # a person's `scontrol update state=resume`
    result = check(slurm, now=T0 + timedelta(minutes=5))
    assert not slurm.node("gpu01").drained
    assert result.exit_code == runner.EXIT_HEALTHY and result.findings == []
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]
    section = ours(slurm)
    assert section is not None and section["alerts"] == []
    assert [a["fault"] for a in section["acknowledged"]] == ["gpu.xid.79"]  # type: ignore[index]
    assert check(slurm, mode="prolog", now=T0 + timedelta(minutes=6)).exit_code == 0
    assert not slurm.node("gpu01").drained
    node.kmsg(XID13, append=True)
    result = check(slurm, now=T0 + timedelta(minutes=7))
    assert [a.fault for a in result.alerts] == ["gpu.xid.13"]
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]


def test_extra_says_the_checks_drain_holds_only_after_the_drain_and_until_a_resume(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8 (issue 32, the deployed suite's resume-race): the write that publishes a
    new fault comes before the drain and does not say ``drained``; once the drain took
    effect Extra says so, for a controller that sees the node in service again without
    ever having seen it drained. A person's resume ends it (the acknowledgement's
    write), as does the release of our drain; a warning that drains nothing never says
    it."""
    writes: list[dict[str, Any]] = []
    real_set, real_drain = slurm.set_extra, slurm.drain

    def set_extra(name: str, key: str, value: Any, current: str | None = None) -> None:
        writes.append({"drained_then": slurm.node(name).drained, **(value or {})})
        real_set(name, key, value, current=current)

    def drain(name: str, reason: str) -> None:
        writes.append({"drain": reason})
        real_drain(name, reason)

    slurm.set_extra = set_extra  # type: ignore[method-assign]
    slurm.drain = drain  # type: ignore[method-assign]
    node.kmsg(XID79, append=True)
    check(slurm)
    assert [("drain" in w, w.get("drained", False)) for w in writes] == [
        (False, False), (True, False), (False, True)]
    assert writes[-1]["drained_then"] and [a["fault"] for a in writes[-1]["alerts"]] \
        == ["gpu.xid.79"]
    section = ours(slurm)
    assert section is not None and section["drained"] is True
    assert extra.read_check_data("gpu01", slurm.node("gpu01").extra, T0).drained
    check(slurm, now=T0 + timedelta(minutes=1))  # nothing new: nothing written
    assert len(writes) == 3 and ours(slurm)["drained"] is True  # type: ignore[index]
    slurm.resume("gpu01")  # a person's resume
    check(slurm, now=T0 + timedelta(minutes=2))
    section = ours(slurm)
    assert section is not None and "drained" not in section and section["acknowledged"]
    assert not extra.read_check_data("gpu01", slurm.node("gpu01").extra, T0).drained


def test_a_refused_write_after_the_drain_leaves_the_node_drained_and_says_why(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8, D1: Slurm refuses the write that says our drain holds (it took the drain):
    the node stays drained, the run still reports the fault, and its notes say that
    Extra does not carry the word; nothing is half-written (the alert is published)."""
    real_set = slurm.set_extra
    calls: list[int] = []

    def set_extra(name: str, key: str, value: Any, current: str | None = None) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise SlurmError("scontrol: error: Invalid node state specified")
        real_set(name, key, value, current=current)

    slurm.set_extra = set_extra  # type: ignore[method-assign]
    node.kmsg(XID79, append=True)
    result = check(slurm)
    assert result.exit_code == runner.EXIT_FINDINGS and slurm.node("gpu01").drained
    assert any("does not say the check drained it" in n for n in result.notes)
    section = ours(slurm)
    assert section is not None and "drained" not in section
    assert [a["fault"] for a in section["alerts"]] == ["gpu.xid.79"]  # type: ignore[index]


def test_a_malformed_drained_word_is_a_problem_named_not_a_resume() -> None:
    """SPEC S8, I2: ``drained`` that is not a boolean (a hand edit, another tool) makes
    the node's check data unreadable, naming the field; never taken for our word."""
    bad = extra.read_check_data("gpu01", {extra.KEY: {
        "v": 1, "checked_at": T0.isoformat(), "alerts": [], "drained": "yes"}}, T0)
    assert not bad.drained and bad.problem is not None and "drained" in bad.problem
    assert "a boolean" in bad.problem


def test_a_detectors_kept_error_survives_a_garbled_state() -> None:
    """SPEC O1: the state's record of the last errors, garbled (a hand edit, a state of
    another build), is no error: a skipped detector keeps nothing from it, and a run
    that sees the error records it afresh."""
    skipped = [runner.DetectorStatus("nvidia", "skipped", "not run in prolog mode")]
    for garbage in ("text", ["nvidia"], {"nvidia": "error"}, {"nvidia": {"status": "ok"}}):
        st: dict[str, Any] = {"detector_errors": garbage}
        assert runner.kept_errors(st, skipped) == [] and st["detector_errors"] == {}
    st = {"detector_errors": "text"}
    failed = [runner.DetectorStatus("nvidia", "error", "nvidia-smi is not on PATH")]
    assert runner.kept_errors(st, failed) == failed
    assert runner.kept_errors(st, skipped) == [
        runner.DetectorStatus("nvidia", "error", "nvidia-smi is not on PATH")]


def test_extra_stops_saying_drained_when_the_check_releases_its_drain(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8, L4: the fault gone (a new boot), the check writes its healthy key
    (no ``drained``) before it resumes its own drain."""
    node.kmsg(XID79, append=True)
    check(slurm)
    assert ours(slurm)["drained"] is True  # type: ignore[index]
    node.boot("boot-2")
    node.kmsg(NOISE)
    check(slurm, now=T0 + timedelta(minutes=5))
    assert not slurm.node("gpu01").drained
    section = ours(slurm)
    assert section is not None and section["alerts"] == [] and "drained" not in section


def test_a_node_the_check_never_held_is_drained_as_before(node: Node,
                                                        slurm: MemorySlurm) -> None:
    """SPEC S8 is about a node we held: a fault on a node in service drains it."""
    node.kmsg(XID79, append=True)
    result = check(slurm)
    assert slurm.node("gpu01").drained and result.acknowledged == []


def test_acknowledgement_ends_when_the_fault_clears_or_comes_anew() -> None:
    """SPEC S8 (pure): a condition stays acknowledged while it holds; an event fault
    with evidence the person did not see is new; a cleared fault's return is new."""
    from slurm_heal.types import Evidence, Finding, Severity

    ro = Finding(fault="fs.readonly", severity=Severity.CRITICAL, summary="/ ro",
                 detector="mounts", node="n", evidence=(Evidence("m", "ro", at="t1"),))
    xid = Finding(fault="gpu.xid.79", severity=Severity.CRITICAL, summary="off",
                  detector="kernel_log", node="n", evidence=(Evidence("k", "line1", at="t1"),))
    acked = runner.acknowledge([ro, xid], T0)
    assert set(acked) == {"fs.readonly", "gpu.xid.79"}
    ro_later = Finding(fault="fs.readonly", severity=Severity.CRITICAL, summary="/ ro",
                       detector="mounts", node="n", evidence=(Evidence("m", "ro", at="t2"),))
    assert set(runner.standing([ro_later, xid], acked)) == {"fs.readonly", "gpu.xid.79"}
    xid_again = Finding(fault="gpu.xid.79", severity=Severity.CRITICAL, summary="off",
                        detector="kernel_log", node="n",
                        evidence=(Evidence("k", "line1", at="t1"), Evidence("k", "line2", at="t3")))
    assert set(runner.standing([ro, xid_again], acked)) == {"fs.readonly"}
    assert set(runner.standing([xid], acked)) == {"gpu.xid.79"}  # the mount is rw again


XID79_GPU2 = ("2,503,130229999,-;NVRM: Xid (PCI:0000:86:00): 79, pid=777, name=python3, "
              "GPU has fallen off the bus.\n")


def test_a_new_xid_in_the_run_that_notices_the_resume_drains_the_node(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8, D1 (issue 32 item 1): a person resumes the node the check drained for an
    Xid 79; before the check's next run (the one the node agent starts when the kernel
    logs something) another GPU falls off the bus. That event was never published, so the
    resume cannot have acknowledged it: the node is drained again at once."""
    node.kmsg(XID79, append=True)
    check(slurm)
    assert slurm.node("gpu01").drained
    slurm.resume("gpu01")  # a person's `scontrol update state=resume`
    node.kmsg(XID79_GPU2, append=True)  # right after it, before the next run
    result = check(slurm, now=T0 + timedelta(seconds=1))
    info = slurm.node("gpu01")
    assert info.drained and info.reason.startswith("heal: gpu.xid.79 by=check"), info.reason
    assert result.acknowledged == [] and [a.fault for a in result.alerts] == ["gpu.xid.79"]
    assert result.exit_code == runner.EXIT_FINDINGS
    section = ours(slurm)
    assert section is not None and "acknowledged" not in section
    texts = [e["text"] for a in section["alerts"] for e in a["evidence"]]  # type: ignore[index]
    assert any("0000:86:00" in t for t in texts) and any("0000:3b:00" in t for t in texts)


def test_a_new_fault_in_the_run_that_notices_the_resume_drains_and_the_seen_one_stays_acknowledged(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8 (issue 32 item 1): the Xid 79 the person saw stays acknowledged; a read-only
    root file system found in the same run (never published) drains the node."""
    node.kmsg(XID79, append=True)
    check(slurm)
    slurm.resume("gpu01")
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    result = check(slurm, now=T0 + timedelta(seconds=1))
    info = slurm.node("gpu01")
    assert info.drained and info.reason.startswith("heal: fs.readonly by=check"), info.reason
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]
    assert [a.fault for a in result.alerts] == ["fs.readonly"]


def test_a_resume_acknowledges_only_what_was_published() -> None:
    """SPEC S8 (pure): with what was published before the resume, a fault never published
    is not acknowledged and an event fault keeps only its published evidence, so its
    unpublished event ends the acknowledgement at once."""
    from slurm_heal.types import Evidence, Finding, Severity

    old = Evidence("k", "line1", at="t1")
    xid = Finding(fault="gpu.xid.79", severity=Severity.CRITICAL, summary="off",
                  detector="kernel_log", node="n", evidence=(old, Evidence("k", "line2", at="t2")))
    ro = Finding(fault="fs.readonly", severity=Severity.CRITICAL, summary="/ ro",
                 detector="mounts", node="n", evidence=(Evidence("m", "ro", at="t2"),))
    pub: dict[str, object] = {}
    runner.remember_published(pub, [Finding(fault="gpu.xid.79", severity=Severity.CRITICAL,
                                            summary="off", detector="kernel_log", node="n",
                                            evidence=(old,))])
    acked = runner.acknowledge([xid, ro], T0, pub["seen"])  # type: ignore[arg-type]
    assert set(acked) == {"gpu.xid.79"}
    assert runner.standing([xid, ro], acked) == {}
    assert set(runner.standing([replace_evidence(xid, (old,)), ro], acked)) == {"gpu.xid.79"}
    # a state from before this was recorded: everything found is acknowledged, as before
    assert set(runner.acknowledge([xid, ro], T0)) == {"gpu.xid.79", "fs.readonly"}


def replace_evidence(f: object, evidence: tuple[object, ...]) -> object:
    from slurm_heal.frozen import replace

    return replace(f, evidence=evidence)  # type: ignore[type-var]


def test_a_crash_in_the_check_is_exit_11_and_reported_with_the_published_alerts_kept(
        node: Node, slurm: MemorySlurm, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC I1, O1 (issue 32 item 11): an unexpected exception in the check (forced here)
    is not a fault of the node: exit 11 (which our Prolog lets through, not 1), nothing
    drained, and a record-only alert of the detector `check` added to what Extra held,
    the alert published before kept."""
    node.kmsg(XID13, append=True)
    check(slurm)  # publishes gpu.xid.13 (not a drain)
    assert not slurm.node("gpu01").drained

    def broken(*args: object, **kwargs: object) -> runner.CheckResult:
        raise RuntimeError("forced: a bug in the check")

    monkeypatch.setattr(runner, "run_check", broken)
    monkeypatch.setattr(runner, "default_client", lambda: slurm)
    assert fastcli.main(["--mode", "prolog", "--node", "gpu01"]) == runner.EXIT_CRASHED
    err = capsys.readouterr().err
    assert "RuntimeError: forced: a bug in the check" in err and "Traceback" in err
    assert not slurm.node("gpu01").drained
    section = ours(slurm)
    assert section is not None
    faults = [(a["fault"], a["detector"]) for a in section["alerts"]]  # type: ignore[index]
    assert faults == [("gpu.xid.13", "kernel_log"), ("check.detector_error", "check")]
    from slurm_heal.extra import read_check_data

    data = read_check_data("gpu01", slurm.node("gpu01").extra, datetime.now(timezone.utc))
    assert data.problem is None and len(data.alerts) == 2


def test_the_first_run_after_a_crash_writes_its_own_alerts_without_the_crash(
        node: Node, slurm: MemorySlurm, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC O1, I1 with issue 43's writes on change: the crash's alert is written into
    Extra outside what the state says we last wrote, so the next run that completes
    writes (what it says did not change, Extra did), and the crash's alert goes then,
    not at the next heartbeat 30 minutes later."""
    node.kmsg(XID13, append=True)
    check(slurm)
    real_run = runner.run_check

    def broken(*args: object, **kwargs: object) -> runner.CheckResult:
        raise RuntimeError("forced: a bug in the check")

    monkeypatch.setattr(runner, "run_check", broken)
    monkeypatch.setattr(runner, "default_client", lambda: slurm)
    assert fastcli.main(["--node", "gpu01"]) == runner.EXIT_CRASHED
    capsys.readouterr()
    section = ours(slurm)
    assert section is not None and len(section["alerts"]) == 2  # type: ignore[arg-type]
    monkeypatch.setattr(runner, "run_check", real_run)
    check(slurm, now=T0 + timedelta(minutes=1))  # well before the heartbeat
    section = ours(slurm)
    assert section is not None
    assert [a["fault"] for a in section["alerts"]] == ["gpu.xid.13"]  # type: ignore[index]


def test_a_fault_that_cleared_and_came_back_is_not_acknowledged_by_its_old_publication(
        node: Node, slurm: MemorySlurm) -> None:
    """SPEC S8 (issue 32 item 1, found by the deployed suite with IB ports down twice on a
    node held for an Xid): the check holds the node for an Xid 79; a read-only root is
    published, then the mount is writable again (no longer published), then read-only
    again and a person resumes the node before the check's next run. The second episode
    was never published: the resume acknowledges the Xid the person saw and the node is
    drained at once for the file system."""
    node.kmsg(XID79, append=True)
    check(slurm)
    assert slurm.node("gpu01").drained
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    first = check(slurm, now=T0 + timedelta(seconds=10))
    assert {a.fault for a in first.alerts} == {"gpu.xid.79", "fs.readonly"}
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    cleared = check(slurm, now=T0 + timedelta(seconds=20))
    assert [a.fault for a in cleared.alerts] == ["gpu.xid.79"]
    assert slurm.node("gpu01").drained  # still held for the Xid
    (node.root / "proc/mounts").write_text("/dev/sda1 / ext4 ro,relatime 0 0\n")
    slurm.resume("gpu01")  # a person's resume, before the check has run again
    result = check(slurm, now=T0 + timedelta(seconds=30))
    info = slurm.node("gpu01")
    assert info.drained and info.reason.startswith("heal: fs.readonly by=check"), info.reason
    assert [a.fault for a in result.acknowledged] == ["gpu.xid.79"]
    assert [a.fault for a in result.alerts] == ["fs.readonly"]


def test_a_port_that_flapped_between_two_runs_is_down_anew() -> None:
    """SPEC S8 (issue 32 item 1, the deployed suite's leaf switch fixed and down again
    within seconds): a person's resume acknowledged a port down; the port came back and
    went down again between two runs of the check, which saw it down both times. Its
    link_downed count rose: the acknowledgement ends and the node drains. The same
    count keeps it; another port down is new too; a record without counts (an older
    state) keeps the old reading."""
    from slurm_heal.checks.detectors import infiniband

    def port(dev: str, downed: int) -> infiniband.Port:
        return infiniband.Port(dev, "1", "1: DOWN", "3: Disabled", "400 Gb/sec",
                               "InfiniBand", {"link_downed": downed})

    def findings(*ports: infiniband.Port) -> list[Any]:
        found, _ = infiniband.evaluate(list(ports), {}, T0, "gpu01")
        return found

    first = findings(port("mlx5_0", 3))
    assert first[0].evidence[0].data["link_downed"] == 3
    acked = runner.acknowledge(first, T0)
    assert acked["ib.link_down"]["downs"] == {"/sys/class/infiniband/mlx5_0/ports/1": 3}
    assert set(runner.standing(findings(port("mlx5_0", 3)), acked)) == {"ib.link_down"}
    assert runner.standing(findings(port("mlx5_0", 4)), acked) == {}
    assert runner.standing(findings(port("mlx5_0", 3), port("mlx5_1", 0)), acked) == {}
    old = {"ib.link_down": {k: v for k, v in acked["ib.link_down"].items() if k != "downs"}}
    assert set(runner.standing(findings(port("mlx5_0", 4)), old)) == {"ib.link_down"}
