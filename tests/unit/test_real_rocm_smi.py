"""rocm-smi JSON of MI100 nodes on ROCm 5.7.1 and 6.0.2 (Telegraf's test data, real
machines; tests/data/real/amd, origins in tests/data/real/SOURCES.md) through the amd
detector's parser. SPEC D3, D11."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from slurm_heal import extra
from slurm_heal.checks.detectors import amd, gpu

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "amd"
NOW = datetime(2026, 1, 5, tzinfo=timezone.utc)


def read(name: str) -> list[gpu.GpuReading]:
    return amd.parse_rocm_smi((REAL / name).read_text())


def test_d11_six_mi100s_printing_unique_id_n_a_stay_six_gpus() -> None:
    """SPEC D3, D11 on a real ROCm 5.7.1 node: six MI100s, each ``"Unique ID": "N/A"``
    and ``"Serial Number": "0"``. Before: every GPU's key was "N/A", so the six shared
    one PCIe replay counter (and thermal timer, and alert key). Now each is known by
    its PCI bus; the placeholder is no UUID in the evidence either."""
    gpus = read("rocm-smi-json-mi100x6-rocm-5.7.1.json")
    assert [g.pci for g in gpus] == ["0000:1e:00.0", "0000:22:00.0", "0000:3f:00.0",
                                     "0000:43:00.0", "0000:46:00.0", "0000:49:00.0"]
    assert [g.key for g in gpus] == [g.pci for g in gpus]
    assert all(g.uuid == "" and "gpu_uuid" not in g.ident() for g in gpus)
    assert all(g.pcie_replays == 0 and g.ecc_dbe_volatile is None for g in gpus)
    out = gpu.evaluate(gpus, {}, {}, NOW, gpu.Thresholds(), "gpu07", "amd", "rocm-smi")
    assert sorted(out.counters) == sorted(f"{g.pci}:pcie_replays" for g in gpus)
    serials = [g.serial for g in gpus]
    assert set(serials) == {"0"} and extra.is_placeholder_serial("0")
    assert extra.machine_identity(serials) == {"identity": "node_name",
                                               "placeholder_serials": ["0"]}


def test_d3_mi100s_on_rocm_6_0_keep_their_unique_ids() -> None:
    """The same GPU model on ROCm 6.0.2 prints a real Unique ID (and ``N/A`` serials):
    the ID is the key, as before."""
    gpus = read("rocm-smi-json-mi100x4-rocm-6.0.2.json")
    assert [g.uuid for g in gpus] == ["0x79ccd55167a2124a", "0x4edfb117a17a07d",
                                      "0xd4a9ec48d03d261d", "0x1b9dd972253c3736"]
    assert [g.key for g in gpus] == [g.uuid for g in gpus]
    assert {g.serial for g in gpus} == {"N/A"}
