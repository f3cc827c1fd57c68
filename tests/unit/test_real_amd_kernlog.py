"""AMD's fatal RAS events on real amdgpu kernel logs (tests/data/real/kernlog, origins in
tests/data/real/SOURCES.md): the same flow as NVIDIA's Xid 48/62/79 (SPEC D9, D3): a
fatal uncorrectable error, a failed GPU reset and RAS poison consumption are critical
faults that drain the node and take the reboot ladder."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from slurm_heal import catalog
from slurm_heal.checks import kernlog
from slurm_heal.checks.runner import cordons
from slurm_heal.types import Action, Severity

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "kernlog"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def _findings(name: str) -> dict[str, list[object]]:
    res = kernlog.scan((REAL / name).read_bytes(), now=NOW)
    cat = catalog.load()
    latched = kernlog.latch({}, res.events, kernlog.GpuMap(), NOW, None,
                            lambda f: cat.get(f).severity, lambda f: cat.get(f).explanation,
                            lambda t: None)
    out: dict[str, list[object]] = {}
    for f in kernlog.findings(latched, "mi01"):
        out.setdefault(f.fault, []).append(f)
    return out


def test_a_mi50_fatal_ras_error_whose_reset_fails_drains_the_node_for_a_reboot() -> None:
    """SPEC D9 on a real MI50 (ROCm issue 1886): ERREVENT_ATHUB_INTERRUPT, the driver's
    reset begins, PSP resume fails, "GPU reset(1) failed", "GPU reset end with ret = -62".
    The fatal error and the failed reset are critical, drain the node and map to a
    reboot, like NVIDIA's Xid 48/62 (before: gpu.health and gpu.reset warnings only)."""
    found = _findings("rocm-1886-mi50-errevent-reset-failed-dmesg-T.log")
    cat = catalog.load()
    for fault in ("gpu.ras.fatal", "gpu.reset.failed"):
        (f,) = found[fault]
        assert f.severity is Severity.CRITICAL and cordons(f)  # type: ignore[attr-defined]
        assert cat.get(fault).action is Action.REBOOT
        assert "0000:e3:00" in f.summary  # type: ignore[attr-defined]
    failed = found["gpu.reset.failed"][0]
    assert "2 times" in failed.summary  # type: ignore[attr-defined]
    assert any(e.data.get("ret") == -62 for e in failed.evidence)  # type: ignore[attr-defined]
    # the reset that began (twice) stays a record: its own outcome decides
    assert found["gpu.reset"][0].severity is Severity.WARNING  # type: ignore[attr-defined]
    # "GPU reset succeeded, trying to resume" and "VRAM is lost due to GPU reset!" are no
    # faults of their own
    assert set(found) == {"gpu.ras.fatal", "gpu.reset", "gpu.reset.failed"}


def test_a_mi300x_fatal_ras_error_with_the_event_sequence_prefix_is_critical() -> None:
    """SPEC D9 on a real MI300X node (ROCm issue 4021): ROCm 6.2's ``{1}`` event number
    before "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!" on GPU
    0000:dd:00; the reset then succeeded, the GPU stayed wedged (a reboot was needed).
    Correctable xgmi_wafl counts are no fault."""
    found = _findings("rocm-4021-mi300x-errevent-seq-prefix-dmesg.log")
    (fatal,) = found["gpu.ras.fatal"]
    assert fatal.severity is Severity.CRITICAL and cordons(fatal)  # type: ignore[attr-defined]
    assert "0000:dd:00" in fatal.summary  # type: ignore[attr-defined]
    assert "gpu.reset.failed" not in found and "gpu.health" not in found


def test_a_ring_timeout_whose_gpu_reset_succeeds_is_no_failed_reset() -> None:
    """SPEC D9 on a real ring timeout (ROCm issue 6273): the ring's own soft reset fails
    ("Ring gfx_0.0.0 reset failed"), the driver escalates to a GPU reset, which
    succeeds: a reset is recorded, nothing drains."""
    found = _findings("rocm-6273-ring-timeout-reset-recovered-dmesg.log")
    assert set(found) == {"gpu.reset"}
    assert not cordons(found["gpu.reset"][0])  # type: ignore[arg-type]


def test_ras_poison_consumption_and_the_6x_capitalised_fatal_line_are_critical() -> None:
    """SPEC D9: KFD's poison consumption lines (amdkfd/kfd_int_process_v9.c, the words
    of the driver, written) and the RAS manager's "{N} Uncorrectable hardware
    error(ERREVENT_ATHUB_INTERRUPT) detected!" (capital U) are critical."""
    res = kernlog.scan(
        b"[  10.0] amdgpu 0000:c1:00.0: amdgpu: RAS poison consumption, fall back to gpu "
        b"reset flow: client id 5\n"
        b"[  11.0] amdgpu 0000:c2:00.0: amdgpu: poison is consumed by client 5, kick off "
        b"gpu reset flow\n"
        b"[  12.0] amdgpu 0000:c3:00.0: {3} Uncorrectable hardware error(ERREVENT_ATHUB_"
        b"INTERRUPT) detected!\n"
        b"[  13.0] amdgpu 0000:c4:00.0: amdgpu: GPU reset failed\n")
    assert [(e.fault, e.pci) for e in res.events] == [
        ("gpu.ras.poison", "0000:c1:00"), ("gpu.ras.poison", "0000:c2:00"),
        ("gpu.ras.fatal", "0000:c3:00"), ("gpu.reset.failed", "0000:c4:00")]
    cat = catalog.load()
    for fault in ("gpu.ras.poison", "gpu.ras.fatal", "gpu.reset.failed"):
        assert cat.get(fault).severity is Severity.CRITICAL and cat.get(fault).cordon
