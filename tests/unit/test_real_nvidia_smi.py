"""``nvidia-smi -q`` text and ``--query-gpu`` CSV with its header, on real output of
drivers 590 and 595 (tests/data/real/nvidia, origins in tests/data/real/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_heal import extra
from slurm_heal.checks.detectors import nvidia
from slurm_heal.checks.runner import CheckResult

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "nvidia"
CAPTURES = ["h100-590.48.01", "l40s-595.80", "rtx-4080-super-595.71.05",
            # issue 35: an H200, and an H200 and an H100 in MIG mode (driver 590.48.01)
            "h200-590.48.01", "h200-mig-590.48.01", "h100-mig-590.48.01"]


@pytest.mark.parametrize("name", CAPTURES)
def test_the_text_and_the_csv_of_one_capture_read_the_same(name: str) -> None:
    """SPEC D3: ``nvidia-smi -q`` text reads what the CSV of the same machine says."""
    (text,) = nvidia.parse_text((REAL / f"smi-q-{name}.txt").read_text())
    (csv,) = nvidia.parse_csv((REAL / f"query-gpu-{name}.csv").read_text())
    for field in ("uuid", "pci", "name", "ecc_dbe_volatile", "hw_thermal", "sw_thermal"):
        assert getattr(text, field) == getattr(csv, field), field
    # the text prints "N/A" where the CSV prints "[N/A]": the same placeholder (SPEC D11)
    assert text.serial == csv.serial or (extra.is_placeholder_serial(text.serial)
                                         and extra.is_placeholder_serial(csv.serial))


def test_nvidia_smi_q_text_of_an_h100() -> None:
    """SPEC D3 on a real H100 (driver 590.48.01): ECC from the volatile SRAM/DRAM
    uncorrectable counters, remaps, the replay counter (9), no thermal slowdown (the
    "Clocks Event Reasons Counters" section's microseconds are not flags)."""
    (g,) = nvidia.parse_text((REAL / "smi-q-h100-590.48.01.txt").read_text())
    assert (g.index, g.pci, g.name) == (0, "00000000:00:09.0", "NVIDIA H100 80GB HBM3")
    assert g.ecc_dbe_volatile == 0 and g.pcie_replays == 9
    assert g.remap_pending is False and g.remap_failure is False
    assert g.hw_thermal is False and g.sw_thermal is False


def test_nvidia_smi_q_text_of_a_consumer_card_has_no_ecc() -> None:
    """A real RTX 4080 SUPER: ECC and remapped rows are N/A: unknown, not zero."""
    (g,) = nvidia.parse_text((REAL / "smi-q-rtx-4080-super-595.71.05.txt").read_text())
    assert g.ecc_dbe_volatile is None and g.remap_pending is None
    assert g.serial == "N/A"


def test_text_is_an_accepted_smi_format(tmp_path: Path) -> None:
    from slurm_heal.checks.config import load_config

    conf = tmp_path / "check.toml"
    conf.write_text('[nvidia]\nsmi_format = "text"\n')
    assert load_config(str(conf)).nvidia.smi_format == "text"


def test_an_a100_in_mig_mode_reads_ecc_from_its_instances() -> None:
    """SPEC D3 on a real A100-SXM4 in MIG mode (driver 510.47.03): the GPU's own
    volatile ECC counts are N/A, each MIG instance has its own: 0 here, not unknown; an
    uncorrectable error in one instance (2, put in by hand) is the GPU's ECC fault."""
    from datetime import datetime, timezone

    from slurm_heal.checks.detectors import gpu

    (g,) = nvidia.parse_xml((REAL / "smi-q-x-a100-sxm4-mig-510.47.03.xml").read_text())
    assert g.ecc_dbe_volatile == 0
    assert g.serial == "1324321002473" and g.pci == "00000000:00:04.0"
    assert g.hw_thermal is False and g.remap_pending is None
    (bad,) = nvidia.parse_xml(
        (REAL / "smi-q-x-a100-sxm4-mig-510.47.03-mig1-sram-ue.xml").read_text())
    assert bad.ecc_dbe_volatile == 2
    out = gpu.evaluate([bad], {}, {}, datetime(2026, 1, 5, tzinfo=timezone.utc),
                       gpu.Thresholds(), "gpu07", "nvidia", "nvidia-smi (xml)")
    assert [f.fault for f in out.findings] == ["gpu.ecc.dbe"]


@pytest.mark.parametrize(("name", "model", "bus"), [
    ("h200-590.48.01", "NVIDIA H200", "00000000:83:00.0"),
    ("h200-mig-590.48.01", "NVIDIA H200", "00000000:83:00.0"),
    ("h100-mig-590.48.01", "NVIDIA H100 80GB HBM3", "00000000:00:09.0"),
])
def test_real_h200_and_mig_mode_hopper_captures_read_clean_with_no_identity(
        name: str, model: str, bus: str) -> None:
    """SPEC D3, D11 on real ``nvidia-smi -q`` of an H200 and of an H200 and an H100 in
    MIG mode (nvidia_gpu_exporter's captures, driver 590.48.01; issue 35): ECC 0, no
    thermal slowdown, the remap state read where the GPU has it (``No``) and unknown in
    MIG mode (``Remapped Rows : N/A``), never a fault; the masked serial no identity."""
    (g,) = nvidia.parse_text((REAL / f"smi-q-{name}.txt").read_text())
    assert (g.name, g.pci, g.ecc_dbe_volatile) == (model, bus, 0)
    assert not g.hw_thermal and not g.sw_thermal and not g.lost
    assert g.remap_pending is (None if "mig" in name else False)
    assert extra.is_placeholder_serial(g.serial)


# ------------------------------------------------------------------ cannot tell (issue 35)
# What nvidia-smi prints in place of a counter NVML could not read (nvmlErrorString as
# nvidia-smi wraps it, and its own ERR!): "cannot tell", never clean (SPEC D3, O6).
NVML_ERRORS = ["[Unknown Error]", "[GPU requires reset]", "ERR!", "[Timeout]",
               "N/A (GPU is lost)"]
H100 = "h100-590.48.01"


def _csv_ecc(value: str, name: str = H100) -> str:
    """The real ``--query-gpu`` CSV of ``name`` with its volatile uncorrectable ECC cell
    printed as ``value`` (the substitution is made here, the file stays as captured)."""
    import csv

    header, row = list(csv.reader((REAL / f"query-gpu-{name}.csv").read_text().splitlines(),
                                  skipinitialspace=True))
    row[[c.split(" [")[0] for c in header].index("ecc.errors.uncorrected.volatile.total")] = value
    return ", ".join(header) + "\n" + ", ".join(row) + "\n"


def _text_ecc(value: str, name: str = H100) -> str:
    """The real ``nvidia-smi -q`` of ``name`` with its volatile DRAM Uncorrectable count
    (the first, under Volatile) printed as ``value``."""
    import re

    text = (REAL / f"smi-q-{name}.txt").read_text()
    return re.sub(r"(DRAM Uncorrectable\s+: )0\n", rf"\g<1>{value}\n", text, count=1)


def _text_remap_pending(value: str) -> str:
    """The real H100 ``nvidia-smi -q`` with Remapped Rows / Pending printed as ``value``."""
    head, sep, rows = (REAL / f"smi-q-{H100}.txt").read_text().partition("    Remapped Rows\n")
    return head + sep + rows.replace("Pending                                        : No",
                                     f"Pending                                        : {value}", 1)


def _xml_ecc(value: str) -> str:
    """The real A10G ``nvidia-smi -q -x`` with its volatile dram_uncorrectable as ``value``."""
    return (REAL / "smi-q-x-a10g-515.105.01.xml").read_text().replace(
        "<dram_uncorrectable>0</dram_uncorrectable>",
        f"<dram_uncorrectable>{value}</dram_uncorrectable>", 1)


@pytest.mark.parametrize("value", NVML_ERRORS)
def test_an_nvml_error_in_place_of_a_memory_counter_is_unreadable_in_every_format(
        value: str) -> None:
    """SPEC D3, O6 (issue 35 item 2): the real H100's CSV and text and the real A10G's XML
    with the ECC count (and, in the text, the remap flag) printed as an NVML error: the
    count is unknown and the reading names what was not readable (before: None, silently
    clean)."""
    (csv,) = nvidia.parse_csv(_csv_ecc(value))
    (text,) = nvidia.parse_text(_text_ecc(value))
    (xml,) = nvidia.parse_xml(_xml_ecc(value))
    (remap,) = nvidia.parse_text(_text_remap_pending(value))
    assert csv.unreadable == (f"ecc.errors.uncorrected.volatile.total: {value}",)
    assert text.unreadable == (f"ECC Errors/Volatile/DRAM Uncorrectable: {value}",)
    assert xml.unreadable == (f"ecc_errors/volatile/dram_uncorrectable: {value}",)
    assert remap.unreadable == (f"Remapped Rows/Pending: {value}",)
    assert remap.remap_pending is None and remap.ecc_dbe_volatile == 0
    assert csv.ecc_dbe_volatile is None and text.ecc_dbe_volatile == 0  # SRAM counts 0


def _nvidia_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, printed: str) -> None:
    """A replay root (so NVML, which reads the live hardware, is never used) and an
    nvidia-smi on PATH that prints ``printed`` for its query (nothing for the remapped
    rows and NVLink queries)."""
    from slurm_heal.checks import paths

    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path / "root"))
    (tmp_path / "root").mkdir()
    (tmp_path / "printed").write_text(printed)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text("#!/bin/sh\ncase \"$*\" in\n  *remapped*|nvlink*) exit 0 ;;\nesac\n"
                    f"cat '{tmp_path / 'printed'}'\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")


def _run(tmp_path: Path, smi_format: str) -> tuple[CheckResult, list[dict[str, Any]], str]:
    """One dry run of the nvidia detector: the result, its ``--json`` and its text."""
    import io
    import json
    from datetime import datetime, timezone

    from slurm_heal.checks import fastcli, runner
    from slurm_heal.checks.config import CheckConfig, NvidiaConfig

    cfg = CheckConfig(state_dir=str(tmp_path / "state"),
                      nvidia=NvidiaConfig(smi_format=smi_format, nvlink=False, dcgm="off"))
    result = runner.run_check(cfg, node_name="gpu07", dry_run=True,
                              only=frozenset({"nvidia"}),
                              now=datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc))
    out, text = io.StringIO(), io.StringIO()
    fastcli.render_json(result, out)
    fastcli.render_text(result, text)
    return result, json.loads(out.getvalue()), text.getvalue()


@pytest.mark.parametrize(("smi_format", "printed", "value"), [
    ("csv", _csv_ecc("[Unknown Error]"), "[Unknown Error]"),
    ("text", _text_ecc("[GPU requires reset]"), "[GPU requires reset]"),
    ("text", _text_remap_pending("ERR!"), "ERR!"),
])
def test_an_h100_whose_nvidia_smi_prints_an_nvml_error_publishes_cannot_tell_everywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smi_format: str, printed: str,
        value: str) -> None:
    """SPEC O6, D3 (issue 35 item 2) on the real H100 capture with a memory counter
    printed as an NVML error: the same state as AMD's, ``gpu.ecc.unreadable`` (info,
    record-only) in ``--json`` with the tool's words, the exit status says findings, the
    alert in our Extra key (which status and the console show), and the status line's
    note. Before: ``[]``, exit 0, "healthy"."""
    from datetime import datetime, timezone

    from slurm_heal.checks import runner

    _nvidia_root(tmp_path, monkeypatch, printed)
    result, found, text = _run(tmp_path, smi_format)
    (alert,) = found
    assert alert["fault"] == "gpu.ecc.unreadable" and alert["severity"] == "info"
    data = alert["evidence"][0]["data"]
    assert data["ecc"] == "unknown" and data["gpus"] == [0]
    assert data["pci"] == ["00000000:00:09.0"]
    assert value in alert["summary"] and value in alert["evidence"][0]["text"]
    assert runner.exit_code(result) == runner.EXIT_FINDINGS
    now = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
    section = extra.our_section(runner.to_alerts(result.findings, {}, now), now)
    assert [a["fault"] for a in section["alerts"]] == ["gpu.ecc.unreadable"]
    assert "cannot tell ECC on GPU 0" in section["alerts"][0]["summary"]
    assert not runner.cordons(result.findings[0])
    assert "gpu07: healthy" not in text
    assert "detector nvidia: ok: ECC not readable on GPU 0" in text


@pytest.mark.parametrize(("smi_format", "printed"), [
    # consumer cards and MIG mode, as captured: ECC "[N/A]" / "N/A", remapped rows N/A
    ("csv", (REAL / "query-gpu-rtx-4080-super-595.71.05.csv").read_text()),
    ("text", (REAL / "smi-q-rtx-4080-super-595.71.05.txt").read_text()),
    ("text", (REAL / "smi-q-h100-mig-590.48.01.txt").read_text()),
    ("xml", (REAL / "smi-q-x-rtx-4000-sff-ada-595.84.xml").read_text()),
    ("xml", (REAL / "smi-q-x-quadro-p400-418.43.xml").read_text()),
    ("xml", (REAL / "smi-q-x-a100-sxm4-80gb-535.54.03.xml").read_text()),
    # the H100 with its count printed as NVML's "not supported" (no ECC on the GPU)
    ("csv", _csv_ecc("[Not Supported]")),
    ("text", _text_ecc("[Not Supported]")),
])
def test_a_gpu_without_ecc_is_not_applicable_and_publishes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smi_format: str,
        printed: str) -> None:
    """SPEC D3: ``N/A`` / ``[N/A]`` / ``[Not Supported]`` on a GPU without ECC (a
    consumer card, ECC disabled, MIG mode's GPU-level counts) means "not applicable",
    not "cannot tell": no finding, no note, a healthy node (issue 35 item 2)."""
    from slurm_heal.checks import runner

    _nvidia_root(tmp_path, monkeypatch, printed)
    result, found, text = _run(tmp_path, smi_format)
    assert found == []
    assert runner.exit_code(result) == 0
    (status,) = [s for s in result.statuses if s.name == "nvidia"]
    assert (status.status, status.message) == ("ok", "")
    assert "ECC not readable" not in text and "gpu07: healthy" in text
