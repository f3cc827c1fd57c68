"""Kernel log parsing on golden files (SPEC D1, D2, D4).

Each ``tests/data/kmsg/<name>.log`` has a ``<name>.expected.json`` next to it: the
events the scan must find, in order. The real capture is read where it lives
(``../shared/fixtures/real``).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import catalog
from slurm_heal.checks import kernlog
from slurm_heal.types import Severity
from tests.realdata import MISSING, REAL

DATA = Path(__file__).resolve().parent.parent / "data" / "kmsg"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def summarize(res: kernlog.ScanResult) -> dict[str, Any]:
    """The parts of a scan a golden file pins down."""
    events = []
    for e in res.events:
        raw = {"fault": e.fault, "key": e.key, "pci": e.pci, "xid": e.xid, "pid": e.pid,
               "process": e.process, "at": e.line.at, "usec": e.line.usec, "seq": e.line.seq,
               "data": e.data or None}
        events.append({k: v for k, v in raw.items() if v is not None})
    return {"gpu_uuids": res.gpu_uuids, "events": events}


def _latch(res: kernlog.ScanResult, gpus: kernlog.GpuMap | None = None) -> dict[str, Any]:
    cat = catalog.load()

    def recovery(text: str) -> str | None:
        action = cat.recovery_action(text)
        return action.value if action else None

    return kernlog.latch({}, res.events, gpus or kernlog.GpuMap(uuid=res.gpu_uuids), NOW, None,
                         lambda f: cat.get(f).severity, lambda f: cat.get(f).explanation,
                         recovery)


@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.log")))
def test_every_log_format_yields_the_golden_events(name: str) -> None:
    """SPEC D1: kmsg records, dmesg, dmesg -T, journalctl short-iso, syslog. ``now``
    is fixed: it dates the year-less syslog stamps."""
    res = kernlog.scan((DATA / f"{name}.log").read_bytes(), now=NOW)
    expected = json.loads((DATA / f"{name}.expected.json").read_text())
    assert summarize(res) == expected


def test_real_xid_119_capture_is_one_critical_alert_on_the_right_gpu() -> None:
    """SPEC D1 on a real H100 capture: five Xid 119 lines on one GPU, GSP RPC noise in
    between; the RPC history lines are not events."""
    path = REAL / "dmesg-xid-119.log"
    if not path.exists():
        pytest.skip(MISSING)
    res = kernlog.scan(path.read_bytes())
    assert [e.fault for e in res.events] == ["gpu.xid.119"] * 5
    assert {e.pci for e in res.events} == {"0000:9b:00"}
    assert res.events[0].process == "nvidia-smi" and res.events[0].pid == 2024380
    assert res.events[0].line.at == "2025-02-23T16:24:18"
    found = kernlog.findings(_latch(res), "gpu07")
    assert len(found) == 1
    assert found[0].severity is Severity.CRITICAL
    assert "5 times" in found[0].summary
    assert found[0].evidence[0].data["gpu_uuid"] == "GPU-509665ad-b600-ac93-3616-d754b23d636d"


def test_real_kmsg_capture_without_faults_yields_nothing() -> None:
    path = REAL / "kmsg-1.log"
    if not path.exists():
        pytest.skip(MISSING)
    assert kernlog.scan(path.read_bytes()).events == []


def test_unknown_xid_is_a_warning_never_dropped() -> None:
    """SPEC D1/D8: an Xid the catalog does not list is recorded as gpu.xid.<n>."""
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:bb:00): 999, pid=77, name=weird, new\n")
    (finding,) = kernlog.findings(_latch(res), "n1")
    assert finding.fault == "gpu.xid.999"
    assert finding.severity is Severity.WARNING


def test_xid_154_carries_the_recovery_action_the_driver_names() -> None:
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:bb:00): 154, GPU recovery action "
                       b"changed from 0x0 (None) to 0x2 (Node Reboot Required)\n")
    (finding,) = kernlog.findings(_latch(res), "n1")
    assert finding.evidence[0].data["action"] == "reboot"
    assert finding.severity is Severity.CRITICAL


def test_xid_154_back_to_none_is_informational() -> None:
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:bb:00): 154, GPU recovery action "
                       b"changed from 0x1 (GPU Reset Required) to 0x0 (None)\n")
    (finding,) = kernlog.findings(_latch(res), "n1")
    assert finding.severity is Severity.INFO


def test_xid_79_and_the_kernels_off_the_bus_line_are_one_alert() -> None:
    """SPEC D2: the Xid 79 line says it; the driver's extra line adds no second alert."""
    res = kernlog.scan(
        b"4,1,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        b"3,2,2,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
    assert [e.fault for e in res.events] == ["gpu.xid.79"]


def test_gpu_index_from_the_driver_is_in_the_evidence() -> None:
    """SPEC D1: the PCI bus id is mapped to the GPU index where known."""
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:3B:00): 79, pid=1, name=x, off.\n")
    (finding,) = kernlog.findings(_latch(res, kernlog.GpuMap(index={"0000:3b:00": 3})), "n1")
    assert finding.evidence[0].data["gpu_index"] == 3
    assert finding.summary.startswith("GPU 3 (PCI 0000:3b:00)")


def test_repeats_update_one_latched_fault_with_first_and_latest_evidence() -> None:
    lines = b"".join(b"4,%d,%d,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, t%d\n"
                     % (i, i, i) for i in range(6))
    rec = next(iter(_latch(kernlog.scan(lines)).values()))
    assert rec["count"] == 6
    assert [e["data"]["seq"] for e in rec["evidence"]] == [0, 4, 5]


def test_non_critical_kernel_faults_expire_after_the_hold_time() -> None:
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:18:00): 13, Graphics Exception\n"
                       b"4,2,2,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, off\n")
    latched = _latch(res)
    later = datetime(2026, 1, 5, 14, 0, tzinfo=timezone.utc)
    kept = kernlog.expire(latched, later, hold_seconds=3600)
    assert [r["fault"] for r in kept.values()] == ["gpu.xid.79"]


def test_lines_without_a_needle_are_never_parsed() -> None:
    """The prefilter: noise around an event costs no per-line parsing."""
    data = b"6,1,1,-;noise\n" * 1000 + b"0,2,2,-;watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [a:1]\n"
    res = kernlog.scan(data)
    assert res.lines == 1 and res.events[0].fault == "kernel.soft_lockup"


def test_pci_ids_are_normalised() -> None:
    assert kernlog.norm_pci("00000000:3B:00.0") == "0000:3b:00"
    assert kernlog.norm_pci("3b:00.0") == "0000:3b:00"


def test_expedited_rcu_stalls_are_a_deadlock_alert() -> None:
    """SPEC D4: "detected expedited stalls" (kernel/rcu/tree_exp.h) is an RCU stall like
    "self-detected stall" and (before 4.19, no "rcu: " prefix) "detected stalls"; the
    continuation lines add nothing (golden rcu-stalls.log)."""
    res = kernlog.scan((DATA / "rcu-stalls.log").read_bytes(), now=NOW)
    assert [(e.fault, e.line.seq) for e in res.events] == [
        ("kernel.rcu_stall", 2001), ("kernel.rcu_stall", 2003), ("kernel.rcu_stall", 2005)]
    (rec,) = _latch(res).values()
    assert rec["count"] == 3 and rec["severity"] == catalog.load().get(
        "kernel.rcu_stall").severity.value


def test_a_classic_syslog_line_keeps_its_time_in_the_evidence() -> None:
    """SPEC D7: the syslog stamp (local time, no year) is the evidence's time, in the
    year that does not put it in the future; the [sec.usec] stamp is kept beside it."""
    line = (b"Feb 23 16:24:18 gpu07 kernel: [ 4211.500000] NVRM: Xid (PCI:0000:3b:00): 79, "
            b"pid=1, name=x, GPU has fallen off the bus.\n")
    res = kernlog.scan(line, now=datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    assert res.events[0].line.at == "2026-02-23T16:24:18"
    assert res.events[0].line.usec == 4_211_500_000
    (finding,) = kernlog.findings(_latch(res), "n1")
    assert finding.evidence[0].at == "2026-02-23T16:24:18"


def test_a_december_syslog_line_read_in_january_is_last_years() -> None:
    line = b"Dec 31 23:59:58 gpu07 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
    res = kernlog.scan(line, now=datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc))
    assert res.events[0].line.at == "2025-12-31T23:59:58"


def test_a_fatal_nvlink5_xid_is_critical_with_its_sub_code_in_the_evidence() -> None:
    """Xid 144-150: the sub-code, the link and the registers NVIDIA's decode table keys on."""
    res = kernlog.scan(b"[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal"
                       b"   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 "
                       b"0x00000000 0x00000000)\n")
    (finding,) = kernlog.findings(_latch(res), "n1")
    data = finding.evidence[0].data
    assert (finding.fault, finding.severity) == ("gpu.xid.149", Severity.CRITICAL)
    assert (data["subcode"], data["fatal"], data["link"], data["intr_info"],
            data["error_status"]) == ("NETIR_LINK_EVT", True, 1, "0x021425c6", "0x00000000")


def test_a_non_fatal_nvlink5_xid_is_informational_and_never_drains() -> None:
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:1e:00): 145, RLW_REMAP Nonfatal XC0 i0 "
                       b"Link 03 (0x00000004 0x00000001 0x0 0x0 0x0 0x0)\n")
    (finding,) = kernlog.findings(_latch(res), "n1")
    assert finding.severity is Severity.INFO
    assert finding.evidence[0].data["subcode"] == "RLW_REMAP"


def test_a_pre_r575_nvlink5_message_is_parsed_too() -> None:
    res = kernlog.scan(b"4,1,1,-;NVRM: Xid (PCI:0000:00:1e): 149, NETIR_LINK_EVT Fatal XC 1 i 2 "
                       b"Link 01 [0x0000000a]\n")
    assert res.events[0].data == {"subcode": "NETIR_LINK_EVT", "fatal": True, "link": 1,
                                  "intr_info": "0x0000000a"}


def test_amdgpu_uncorrectable_memory_errors_are_the_same_dbe_fault_as_nvidias() -> None:
    """SPEC D9 (issue 10): amdgpu's RAS report of uncorrectable errors in the memory (umc)
    block is gpu.ecc.dbe, critical, like NVIDIA's; other blocks and a GPU reset are
    recorded as warnings on the GPU at that PCI address; the fatal ERREVENT is critical
    (issue 35). The lines follow the formats of drivers/gpu/drm/amd/amdgpu (written, not
    captured)."""
    res = kernlog.scan((DATA / "amdgpu-ras-reset.log").read_bytes(), now=NOW)
    latched = _latch(res)
    by_fault = {(v["fault"], v["severity"]) for v in latched.values()}
    assert ("gpu.ecc.dbe", "critical") in by_fault
    assert ("gpu.reset", "warning") in by_fault and ("gpu.health", "warning") in by_fault
    assert ("gpu.ras.fatal", "critical") in by_fault
    dbe = next(v for v in latched.values() if v["fault"] == "gpu.ecc.dbe")
    assert "0000:c1:00" in dbe["summary"] and "2 uncorrectable" in dbe["summary"]
    # "0 uncorrectable" and "correctable" lines are not faults
    assert all(e.data.get("block") != "gfx" for e in res.events)
