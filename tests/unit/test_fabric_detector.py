"""SPEC D12 (issue 37): each GPU's NVLink fabric state from nvidia-smi -q (text and XML),
read from real captures (tests/data/real/SOURCES.md): a failed registration is a critical
alert naming the GPU and its domain; the node's NVLink domain and driver cohort are what
the node check publishes for S7."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from slurm_heal.checks.detectors.gpu import GpuReading, Thresholds, domains_of, evaluate
from slurm_heal.checks.detectors.nvidia import parse_text, parse_xml
from slurm_heal.types import Finding, Severity

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "nvidia"
NOW = datetime(2026, 1, 5, tzinfo=timezone.utc)
# The thread's excerpt is one GPU's Fabric block: read under that GPU's header.
HEADER = "Driver Version                            : 570.148.08\n\nGPU 00000000:19:00.0\n"


def _judge(readings: list[GpuReading]) -> list[Finding]:
    return evaluate(readings, {}, {}, NOW, Thresholds(), "gb01", "nvidia", "nvidia-smi").findings


def test_a_failed_fabric_registration_is_critical_and_names_the_gpu() -> None:
    text = HEADER + (REAL / "smi-q-fabric-insufficient-resources.txt").read_text()
    [g] = parse_text(text)
    assert (g.fabric_state, g.fabric_status, g.clique_id) == (
        "Completed", "Insufficient Resources", "0")
    assert g.fabric_failed and g.nvlink_domain == ""  # the zero UUID is no domain
    [f] = _judge([g])
    assert (f.fault, f.severity) == ("gpu.fabric.failed", Severity.CRITICAL)
    assert "GPU 0 (PCI 00000000:19:00.0) NVLink fabric registration failed " \
        "(Insufficient Resources)" in f.summary
    assert f.evidence[0].data["fabric_status"] == "Insufficient Resources"
    assert domains_of([g]) == {"driver": "570.148.08"}


def test_a_registered_gb200_gpu_publishes_its_nvlink_domain_and_an_unhealthy_summary_warns(
        ) -> None:
    text = HEADER + (REAL / "smi-q-fabric-gb200-health-unhealthy.txt").read_text()
    [g] = parse_text(text)
    assert not g.fabric_failed
    assert g.nvlink_domain == "dc6e40c4-d722-4357-9ba6-5291dd461278/2"
    [f] = _judge([g])
    assert (f.fault, f.severity) == ("gpu.fabric.degraded", Severity.WARNING)
    assert "dc6e40c4-d722-4357-9ba6-5291dd461278/2" in f.summary
    assert domains_of([g])["nvlink"] == "dc6e40c4-d722-4357-9ba6-5291dd461278/2"


def test_an_hgx_local_fabric_and_a_gpu_without_one_are_healthy_and_no_domain() -> None:
    h200 = parse_text((REAL / "smi-q-h200-590.48.01.txt").read_text())
    assert h200 and all(g.fabric_state == "Completed" and g.fabric_status == "Success"
                        for g in h200)
    assert not [f for f in _judge(h200) if f.fault.startswith("gpu.fabric")]
    said = domains_of(h200)
    assert "nvlink" not in said and said["driver"] == "590.48.01"
    ada = parse_xml((REAL / "smi-q-x-rtx-4000-sff-ada-595.84.xml").read_text())
    assert ada[0].fabric_state == "N/A" and ada[0].cluster_uuid == "N/A"
    assert not [f for f in _judge(ada) if f.fault.startswith("gpu.fabric")]
    assert "nvlink" not in domains_of(ada) and domains_of(ada)["driver"] == "595.84"
