"""``nvidia-smi -q`` text and ``--query-gpu`` CSV with its header, on real output of
drivers 590 and 595 (tests/data/real/nvidia, origins in tests/data/real/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.checks.detectors import nvidia

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
