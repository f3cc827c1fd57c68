"""AMD ECC where rocm-smi's JSON carries none (SPEC D3, D9), on real rocm-smi output
(tests/data/real/amd, origins in tests/data/real/SOURCES.md): the count comes from the
kernel's RAS counters in sysfs, else the detector says "ECC not readable" and never
reports clean."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.checks import paths
from slurm_heal.checks.config import CheckConfig
from slurm_heal.checks.detectors import amd, gpu

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "amd"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def _root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ras: dict[str, str] | None) -> None:
    """A replay root with amdgpu loaded, a rocm-smi on PATH printing the real capture,
    and (when given) card0's RAS counter files, written in amdgpu's "ue: / ce:" form."""
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path / "root"))
    (tmp_path / "root/sys/module/amdgpu").mkdir(parents=True)
    if ras is not None:
        d = tmp_path / "root/sys/class/drm/card0/device/ras"
        d.mkdir(parents=True)
        for name, text in ras.items():
            (d / name).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "rocm-smi"
    stub.write_text(f"#!/bin/sh\ncat '{REAL / 'rocm-smi-json-radeon-780m.json'}'\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")


def test_real_rocm_smi_json_has_no_ecc_count() -> None:
    """The real rocm-smi 6.2.4 JSON (Radeon 780M) has the bus, a placeholder serial and
    the replay counter, but no RAS count: unknown, not zero."""
    (card,) = amd.parse_rocm_smi((REAL / "rocm-smi-json-radeon-780m.json").read_text())
    assert card.ecc_dbe_volatile is None
    assert card.pci == "0000:c4:00.0" and card.serial == "N/A" and card.pcie_replays == 0
    assert "No JSON data to report" in (REAL / "rocm-smi-json-showrasinfo-mi300a.txt").read_text()


def test_an_amd_gpu_without_a_readable_ecc_count_is_noted_never_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D3, O6: rocm-smi's real JSON and no RAS counters in sysfs: the "cannot tell"
    finding gpu.ecc.unreadable (record-only; issue 35 item 2: it was no finding at all),
    and the detector's note says ECC is not readable on GPU 0."""
    _root(tmp_path, monkeypatch, None)
    findings, update = amd.detect(CheckConfig(), {}, "gpu07", NOW)
    assert [(f.fault, f.severity.value) for f in findings] == [("gpu.ecc.unreadable", "info")]
    assert findings[0].evidence[0].data["ecc"] == "unknown"
    assert update[amd.NOTE].startswith("ECC not readable on GPU 0: rocm-smi gives no")


def test_uncorrectable_errors_in_sysfs_are_the_ecc_fault(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D3, D9: the kernel's counters (umc ue 2, gfx ue 0) give the count rocm-smi
    does not: gpu.ecc.dbe on GPU 0, its evidence naming the blocks; no note."""
    _root(tmp_path, monkeypatch, {"umc_err_count": "ue: 2\nce: 7\nde: 0\n",
                                  "gfx_err_count": "ue: 0\nce: 0\n",
                                  "features": "feature mask: 0x000003ff\n"})
    findings, update = amd.detect(CheckConfig(), {}, "gpu07", NOW)
    assert [f.fault for f in findings] == ["gpu.ecc.dbe"]
    assert "gfx=0 umc=2" in findings[0].evidence[0].text
    assert amd.NOTE not in update


def test_clean_sysfs_counters_are_clean_and_not_noted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _root(tmp_path, monkeypatch, {"umc_err_count": "ue: 0\nce: 0\n"})
    findings, update = amd.detect(CheckConfig(), {}, "gpu07", NOW)
    assert findings == [] and amd.NOTE not in update


def test_ras_count_files_without_a_ue_line_are_not_counts() -> None:
    assert amd.parse_ras_counts({"umc_err_count": "ue: 3\nce: 1\n",
                                 "gfx_err_count": "garbage\n",
                                 "sdma_err_count": "ue: lots\n"}) == {"umc": 3}
    readings, unreadable = amd.with_sysfs_ecc(
        [gpu.GpuReading(index=4, ecc_dbe_volatile=0), gpu.GpuReading(index=5, lost=True)],
        lambda p: "/nonexistent" + p)
    assert unreadable == [] and readings[0].ecc_dbe_volatile == 0


def test_the_check_run_shows_the_note_on_the_amd_status_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D3, O6 end to end (dry run, only the amd detector): status ok with the note,
    and the run is not "healthy" (issue 35 item 2): it reports the cannot-tell finding."""
    from slurm_heal.checks import runner

    _root(tmp_path, monkeypatch, None)
    cfg = CheckConfig(state_dir=str(tmp_path / "state"))
    result = runner.run_check(cfg, node_name="gpu07", dry_run=True,
                              only=frozenset({"amd"}), now=NOW)
    (status,) = [s for s in result.statuses if s.name == "amd"]
    assert status.status == "ok"
    assert status.message.startswith("ECC not readable on GPU 0")
    assert [f.fault for f in result.findings] == ["gpu.ecc.unreadable"]
    import io

    from slurm_heal.checks import fastcli

    text = io.StringIO()
    fastcli.render_text(result, text)
    assert "gpu07: healthy" not in text.getvalue()
    assert "gpu.ecc.unreadable: cannot tell ECC on GPU 0" in text.getvalue()
    assert "detector amd: ok: ECC not readable on GPU 0" in text.getvalue()


@pytest.mark.parametrize("capture", ["rocm-smi-json-mi100x6-rocm-5.7.1.json",
                                     "rocm-smi-json-mi100x4-rocm-6.0.2.json"])
def test_mi100_nodes_without_an_ecc_count_publish_cannot_tell_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capture: str) -> None:
    """SPEC O6, D3 on the real MI100 captures (telegraf's rocm-smi 5.7.1 and 6.0.2
    JSON, no uncorrectable count, no sysfs RAS): ``--json`` lists the cannot-tell
    finding for every GPU (before: ``[]``, exit 0), the exit status says findings, and
    the alert goes into our Extra key, which status and the console show (before: a
    healthy node everywhere but one text line)."""
    import io
    import json

    from slurm_heal import extra
    from slurm_heal.checks import fastcli, runner

    _root(tmp_path, monkeypatch, None)
    (tmp_path / "bin" / "rocm-smi").write_text(f"#!/bin/sh\ncat '{REAL / capture}'\n")
    cfg = CheckConfig(state_dir=str(tmp_path / "state"))
    result = runner.run_check(cfg, node_name="gpu07", dry_run=True,
                              only=frozenset({"amd"}), now=NOW)
    out = io.StringIO()
    fastcli.render_json(result, out)
    (found,) = json.loads(out.getvalue())
    gpus = len(amd.parse_rocm_smi((REAL / capture).read_text()))
    assert found["fault"] == "gpu.ecc.unreadable" and found["severity"] == "info"
    assert found["evidence"][0]["data"]["gpus"] == list(range(gpus))
    assert found["evidence"][0]["data"]["ecc"] == "unknown"
    assert runner.exit_code(result) == runner.EXIT_FINDINGS
    section = extra.our_section(runner.to_alerts(result.findings, {}, NOW), NOW)
    assert [a["fault"] for a in section["alerts"]] == ["gpu.ecc.unreadable"]
    assert "cannot tell ECC" in section["alerts"][0]["summary"]
    assert not runner.cordons(result.findings[0])
