"""``nvidia-smi -q -x`` of six GPU generations and drivers 418 to 595 (Telegraf's and datakit's test
data, real machines), and a real ``nvidia-smi -q`` of an A100 with a row remap pending,
through the nvidia detector's parsers (tests/data/real/nvidia, origins in
tests/data/real/SOURCES.md). SPEC D3, D11."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.checks.detectors import gpu, nvidia

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "nvidia"
NOW = datetime(2026, 1, 5, tzinfo=timezone.utc)

# file -> (pci, product name, volatile uncorrectable ECC, remap pending and failure)
XML = {
    "smi-q-x-quadro-p400-418.43.xml":
        ("00000000:43:00.0", "Quadro P400", None, None),  # Pascal, single/double_bit
    "smi-q-x-tesla-t4-515.105.01.xml":
        ("00000000:00:1e.0", "Tesla T4", 0, None),  # Turing: retired pages, no remapper
    "smi-q-x-a10g-515.105.01.xml":
        ("00000000:00:1e.0", "NVIDIA A10G", 0, False),
    "smi-q-x-a100-sxm4-80gb-535.54.03.xml":
        ("00000000:01:00.0", "NVIDIA A100-SXM4-80GB", 0, None),  # remapped_rows N/A (VM)
    "smi-q-x-rtx-4000-sff-ada-595.84.xml":
        ("00000000:06:00.0", "NVIDIA RTX 4000 SFF Ada Generation", None, False),
}


def evaluate(readings: list[gpu.GpuReading]) -> list[str]:
    out = gpu.evaluate(readings, {}, {}, NOW, gpu.Thresholds(), "gpu07", "nvidia",
                       "nvidia-smi (xml)")
    return [f.fault for f in out.findings]


@pytest.mark.parametrize("name", sorted(XML))
def test_d3_smi_xml_of_every_generation_reads_a_healthy_gpu(name: str) -> None:
    """SPEC D3: each capture (schema v10-style ``single_bit/double_bit`` ECC of 418,
    v11's ``clocks_throttle_reasons``, v12/v13's ``clocks_event_reasons``) gives one GPU
    with its bus id, name and UUID; ECC 0 where the GPU counts it, unknown (None, not 0)
    where it prints N/A; no thermal slowdown; no replays; so no finding."""
    pci, product, dbe, pending = XML[name]
    (g,) = nvidia.parse_xml((REAL / name).read_text())
    assert (g.index, g.pci, g.name) == (0, pci, product)
    assert g.uuid.startswith("GPU-") and len(g.uuid) == 40
    assert g.ecc_dbe_volatile == dbe
    assert g.remap_pending is pending and g.remap_failure is pending
    assert g.hw_thermal is False and g.sw_thermal is False
    assert g.pcie_replays == 0
    assert evaluate([g]) == []


def test_d11_aws_t4_and_a10g_print_the_placeholder_serial_and_are_no_one_machine() -> None:
    """SPEC D11 on the real AWS captures: both GPUs print serial 0000000000000, a
    placeholder; two such nodes get no shared ``host``, while real serials (the A100's,
    the P400's) identify their machines."""
    serials = {}
    for name in XML:
        (g,) = nvidia.parse_xml((REAL / name).read_text())
        serials[name] = g.serial
    t4, a10g = (serials["smi-q-x-tesla-t4-515.105.01.xml"],
                serials["smi-q-x-a10g-515.105.01.xml"])
    assert t4 == a10g == "0000000000000"
    assert extra.is_placeholder_serial(t4)
    assert extra.machine_identity([t4]) == {"identity": "node_name",
                                            "placeholder_serials": ["0000000000000"]}
    a100 = extra.machine_identity([serials["smi-q-x-a100-sxm4-80gb-535.54.03.xml"]])
    p400 = extra.machine_identity([serials["smi-q-x-quadro-p400-418.43.xml"]])
    assert a100 is not None and p400 is not None
    assert a100["gpu_serials"] == ["1650522003820"] and a100["host"] != p400["host"]


def test_d3_a_real_a100_with_a_row_remap_pending_is_a_finding() -> None:
    """SPEC D3 on a real ``nvidia-smi -q`` of an A100-SXM4-80GB (driver 510.73.08) after
    Xid 63, quoted with its ``[...]`` elisions: 177 correctable DRAM errors (no
    uncorrectable: ECC 0), ``Remapped Rows / Pending: Yes``: the GPU needs a reset, a
    ``gpu.row_remap.pending`` finding naming the GPU by its bus id."""
    (g,) = nvidia.parse_text((REAL / "smi-q-a100-sxm4-remap-pending-510.73.08.txt").read_text())
    assert (g.pci, g.name) == ("00000000:10:1c.0", "NVIDIA A100-SXM4-80GB")
    assert g.ecc_dbe_volatile == 0
    assert g.remap_pending is True and g.remap_failure is False
    out = gpu.evaluate([g], {}, {}, NOW, gpu.Thresholds(), "gpu07", "nvidia", "nvidia-smi")
    (finding,) = out.findings
    assert finding.fault == "gpu.row_remap.pending"
    assert "00000000:10:1c.0" in finding.summary + str(finding.evidence)


def test_d3_an_eight_v100s_node_on_driver_460_reads_each_gpu() -> None:
    """SPEC D3, D11 on a real 8x Tesla V100S-PCIE-32GB node (driver 460.73.01, schema
    v11, ECC enabled): the volatile ECC is read from the old ``double_bit/total`` (0, a
    number, not unknown); each GPU has its own bus and serial, so the machine's identity
    is the hash of eight real serials; two GPUs are at their software power cap, which
    is no thermal slowdown, so no finding."""
    gpus = nvidia.parse_xml((REAL / "smi-q-x-tesla-v100s-x8-460.73.01.xml").read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert [g.pci for g in gpus] == [f"00000000:00:{b:02x}.0" for b in range(0x0d, 0x15)]
    assert {g.name for g in gpus} == {"Tesla V100S-PCIE-32GB"}
    assert all(g.ecc_dbe_volatile == 0 and g.pcie_replays == 0 for g in gpus)
    assert all(g.hw_thermal is False and g.sw_thermal is False for g in gpus)
    assert all(g.remap_pending is None for g in gpus)  # Volta: no row remapper
    serials = [g.serial for g in gpus]
    assert len(set(serials)) == 8 and not any(map(extra.is_placeholder_serial, serials))
    ident = extra.machine_identity(serials)
    assert ident is not None and ident["host"].startswith("gpus-")
    assert evaluate(gpus) == []
