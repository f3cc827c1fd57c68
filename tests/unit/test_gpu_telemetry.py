"""GPU telemetry parsers and the one evaluator, on golden files (SPEC D2, D3, D9).

The golden files in ``tests/data/nvidia`` and ``tests/data/amd`` are written from the
tools' documented formats (see tests/data/README.md); every source is turned into the
same readings and judged by `gpu.evaluate`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import catalog
from slurm_heal.checks.detectors import amd, gpu, nvidia
from slurm_heal.errors import CheckError
from slurm_heal.types import Finding, Severity

DATA = Path(__file__).resolve().parent.parent / "data"
NV = DATA / "nvidia"
AMD = DATA / "amd"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
TH = gpu.Thresholds(expected=8)


def xml(name: str) -> list[gpu.GpuReading]:
    return nvidia.parse_xml((NV / name).read_text())


def judge(readings: list[gpu.GpuReading], counters: dict[str, list[float]] | None = None,
          since: dict[str, float] | None = None, now: datetime = NOW,
          th: gpu.Thresholds = TH) -> gpu.Outcome:
    return gpu.evaluate(readings, counters or {}, since or {}, now, th, "gpu07", "nvidia", "t")


def faults(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return sorted((f.fault, f.evidence[0].data.get("gpu_index")) for f in findings)


def test_a_healthy_8_gpu_node_has_no_findings_from_any_nvidia_source() -> None:
    from_xml = xml("smi-q-x-healthy-8.xml")
    from_csv = nvidia.parse_csv((NV / "query-gpu-healthy-8.csv").read_text(),
                                (NV / "query-remapped-rows-healthy-8.csv").read_text())
    assert len(from_xml) == len(from_csv) == 8
    assert judge(from_xml).findings == [] and judge(from_csv).findings == []
    assert nvidia.parse_dcgm_health((NV / "dcgmi-health-healthy-8.json").read_text()) == {}


def test_xml_and_csv_give_the_same_readings_so_the_same_faults() -> None:
    """One evaluator for every source: the XML and CSV of the same faulty node agree."""
    from_xml = xml("smi-q-x-faults.xml")
    from_csv = nvidia.parse_csv((NV / "query-gpu-faults.csv").read_text(),
                                (NV / "query-remapped-rows-faults.csv").read_text())
    for a, b in zip(from_xml, from_csv, strict=True):
        assert (a.index, a.uuid, a.pci, a.serial, a.ecc_dbe_volatile, a.remap_pending,
                a.remap_failure, a.hw_thermal) == (b.index, b.uuid, b.pci, b.serial,
                                                   b.ecc_dbe_volatile, b.remap_pending,
                                                   b.remap_failure, b.hw_thermal)
    assert faults(judge(from_xml).findings) == faults(judge(from_csv).findings)


@pytest.mark.parametrize("name,expected", [
    ("smi-q-x-dbe.xml", [("gpu.ecc.dbe", 2)]),
    ("smi-q-x-remap-pending.xml", [("gpu.row_remap.pending", 3)]),
    ("smi-q-x-remap-failure.xml", [("gpu.row_remap.failure", 4)]),
])
def test_each_memory_fault_is_found_on_its_gpu_with_identity(
        name: str, expected: list[tuple[str, int]]) -> None:
    found = judge(xml(name)).findings
    assert faults(found) == expected
    data = found[0].evidence[0].data
    idx = expected[0][1]
    assert data["serial"] == f"165492200{1000 + idx}"
    assert data["gpu_uuid"].startswith("GPU-") and data["pci"].startswith("00000000:")
    assert found[0].severity is catalog.load().get(expected[0][0]).severity


def test_an_older_drivers_double_bit_total_counts_as_uncorrectable() -> None:
    assert faults(judge(xml("smi-q-x-old-driver-dbe.xml"), th=gpu.Thresholds()).findings) \
        == [("gpu.ecc.dbe", 0)]


def test_pcie_replays_are_judged_as_a_rate_never_the_lifetime_counter() -> None:
    """SPEC D3: 12 replays over the GPU's life is no fault; 900 more in 10 minutes is."""
    first = judge(xml("smi-q-x-healthy-8.xml"))
    assert first.findings == []  # first sample: a baseline, whatever its value
    later = NOW + timedelta(minutes=10)
    second = judge(xml("smi-q-x-replays-grown.xml"), first.counters, now=later)
    (f,) = second.findings
    assert f.fault == "gpu.pcie.replay_rate"
    assert f.evidence[0].data.items() >= {"gpu_index": 6, "counter": 912, "previous": 12,
                                          "per_minute": 90.0}.items()
    steady = judge(xml("smi-q-x-replays-grown.xml"), second.counters,
                   now=later + timedelta(minutes=10))
    assert steady.findings == []


def test_a_replay_counter_that_went_down_is_a_new_baseline() -> None:
    grown = judge(xml("smi-q-x-replays-grown.xml"))
    after_reset = judge(xml("smi-q-x-healthy-8.xml"), grown.counters,
                        now=NOW + timedelta(minutes=1))
    assert after_reset.findings == []


def test_thermal_slowdown_must_be_sustained() -> None:
    hot = xml("smi-q-x-thermal.xml")
    first = judge(hot)
    assert first.findings == [] and first.since  # seen, not yet sustained
    five_min = judge(hot, since=first.since, now=NOW + timedelta(seconds=300))
    assert faults(five_min.findings) == [("gpu.thermal", 5)]
    cooled = judge(xml("smi-q-x-healthy-8.xml"), since=five_min.since,
                   now=NOW + timedelta(seconds=360))
    assert cooled.findings == [] and cooled.since == {}


def test_an_inactive_nvlink_is_a_link_down() -> None:
    links = nvidia.parse_nvlink_status((NV / "nvlink-s-link-down.txt").read_text())
    readings = [replace(g, links=links[g.index]) for g in xml("smi-q-x-healthy-8.xml")]
    (f,) = judge(readings).findings
    assert (f.fault, f.evidence[0].data["gpu_index"], f.evidence[0].data["link"]) == \
        ("gpu.nvlink.down", 1, 7)


def test_nvlink_error_counters_growing_faster_than_the_threshold() -> None:
    base = xml("smi-q-x-healthy-8.xml")[0]
    before = [replace(base, links=(gpu.LinkReading(0, True, {"crc_flit": 100}),))]
    after = [replace(base, links=(gpu.LinkReading(0, True, {"crc_flit": 400}),))]
    first = judge(before, th=gpu.Thresholds())
    (f,) = judge(after, first.counters, now=NOW + timedelta(minutes=2),
                 th=gpu.Thresholds()).findings
    assert f.fault == "gpu.nvlink.errors"
    assert f.evidence[0].data.items() >= {"counter_name": "crc_flit", "previous": 100,
                                          "counter": 400, "per_minute": 150.0}.items()


def test_a_gpu_the_tool_calls_lost_is_off_the_bus_and_missing_from_the_count() -> None:
    """SPEC D2: "Unable to determine the device handle" / "GPU is lost"."""
    answering = xml("smi-q-x-healthy-8.xml")[:6]
    lost = nvidia.lost_gpus((NV / "smi-gpu-lost.txt").read_text(), len(answering))
    found = judge(answering + lost).findings
    off = [f for f in found if f.fault == "gpu.off_bus"]
    assert [f.evidence[0].data["pci"] for f in off] == ["0000:3a:00.0", "0000:5d:00.0"]
    assert "GPU is lost" in off[1].evidence[0].text


def test_fewer_gpus_than_configured_is_gpu_missing_with_the_serials_seen() -> None:
    found = judge(xml("smi-q-x-healthy-8.xml")[:7]).findings
    (f,) = found
    assert f.fault == "gpu.missing" and f.severity is Severity.CRITICAL
    assert f.evidence[0].data["visible"] == 7 and len(f.evidence[0].data["serials"]) == 7


def test_dcgm_health_incidents_map_to_our_faults_on_their_gpu() -> None:
    incidents = nvidia.parse_dcgm_health((NV / "dcgmi-health-faults.json").read_text())
    readings = nvidia.merge_incidents(xml("smi-q-x-healthy-8.xml"), incidents)
    found = judge(readings).findings
    assert faults(found) == [("gpu.ecc.dbe", 2), ("gpu.health", 7), ("gpu.nvlink.down", 1),
                             ("gpu.pcie.replay_rate", 6)]
    nvl = next(f for f in found if f.fault == "gpu.nvlink.down")
    assert "link 7 is currently down" in nvl.evidence[0].text
    assert nvl.evidence[0].data["system"] == "NVLink"


def test_tool_output_that_does_not_parse_is_a_clear_error() -> None:
    with pytest.raises(CheckError, match="does not parse"):
        nvidia.parse_xml("<nvidia_smi_log><gpu>")
    with pytest.raises(CheckError, match="does not parse"):
        nvidia.parse_dcgm_health("{not json")
    with pytest.raises(CheckError, match="does not parse"):
        amd.parse_amd_smi("[]", "{not json")


def test_not_available_values_are_unknown_never_a_fault() -> None:
    line = "0, GPU-x, 00000000:18:00.0, [N/A], NVIDIA A10, [N/A], [Not Supported], [N/A]"
    (g,) = nvidia.parse_csv(line)
    assert (g.ecc_dbe_volatile, g.hw_thermal, g.sw_thermal) == (None, None, None)
    assert judge([g], th=gpu.Thresholds()).findings == []


# ------------------------------------------------------------------ AMD (SPEC D9)

def test_a_healthy_amd_node_has_no_findings() -> None:
    readings = amd.parse_amd_smi((AMD / "amd-smi-list-8.json").read_text(),
                                 (AMD / "amd-smi-metric-healthy-8.json").read_text())
    assert len(readings) == 8 and readings[3].pci == "0000:65:00.0"
    assert judge(readings).findings == []


def test_amd_faults_use_the_same_fault_ids_as_nvidia() -> None:
    readings = amd.parse_amd_smi((AMD / "amd-smi-list-8.json").read_text(),
                                 (AMD / "amd-smi-metric-faults.json").read_text())
    first = judge(readings)
    assert faults(first.findings) == [("gpu.ecc.dbe", 1)]
    later = judge(readings, since=first.since, now=NOW + timedelta(minutes=6))
    assert faults(later.findings) == [("gpu.ecc.dbe", 1), ("gpu.thermal", 4)]


def test_rocm_smi_uncorrectable_ras_errors_are_gpu_ecc_dbe() -> None:
    readings = amd.parse_rocm_smi((AMD / "rocm-smi-8.json").read_text())
    found = judge(readings).findings
    assert faults(found) == [("gpu.ecc.dbe", 3)]
    assert found[0].evidence[0].data["serial"] == "692251000003"


# ------------------------------------------------------------------ NVML (no GPU here)

def _fake_nvml(monkeypatch: pytest.MonkeyPatch, readings: list[gpu.GpuReading],
               lost: int | None = None, link_down: tuple[int, int] | None = None,
               ecc_error: dict[int, int] | None = None) -> None:
    """NVIDIA's bindings answering from recorded readings, the way the library does
    (tuples, bitmasks, NVMLError subclasses), since no GPU machine runs the tests."""
    nv = pytest.importorskip("pynvml")

    class Handle:
        def __init__(self, g: gpu.GpuReading) -> None:
            self.g = g

    class Pci:
        def __init__(self, bus: str) -> None:
            self.busId = bus.upper().encode()

    def handle(i: int) -> Handle:
        if i == lost:
            raise nv.NVMLError(nv.NVML_ERROR_GPU_IS_LOST)
        return Handle(readings[i])

    def link_state(h: Handle, link: int) -> int:
        if link >= 18:
            raise nv.NVMLError(nv.NVML_ERROR_INVALID_ARGUMENT)
        return 0 if (h.g.index, link) == link_down else 1

    def ecc(h: Handle, kind: int, counter: int) -> int | None:
        if h.g.index in (ecc_error or {}):
            raise nv.NVMLError((ecc_error or {})[h.g.index])
        return h.g.ecc_dbe_volatile

    reasons = {True: 0x40, False: 0}
    fakes = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(readings),
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetUUID": lambda h: h.g.uuid,
        "nvmlDeviceGetSerial": lambda h: h.g.serial,
        "nvmlDeviceGetName": lambda h: h.g.name,
        "nvmlDeviceGetPciInfo": lambda h: Pci(h.g.pci),
        "nvmlDeviceGetTotalEccErrors": ecc,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, int(bool(h.g.remap_pending)),
                                                int(bool(h.g.remap_failure))),
        "nvmlDeviceGetPcieReplayCounter": lambda h: h.g.pcie_replays,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: reasons[bool(h.g.hw_thermal)] | 1,
        "nvmlDeviceGetNvLinkState": link_state,
        "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, counter: 0,
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(nv, name, fn)


def test_the_nvml_path_gives_the_same_readings_and_faults_as_nvidia_smi(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from_xml = xml("smi-q-x-faults.xml")
    _fake_nvml(monkeypatch, from_xml)
    from_nvml = nvidia.gather_nvml()
    for a, b in zip(from_xml, from_nvml, strict=True):
        assert (a.index, a.uuid, a.pci, a.serial, a.ecc_dbe_volatile, a.remap_pending,
                a.remap_failure, a.pcie_replays, a.hw_thermal) == \
            (b.index, b.uuid, b.pci, b.serial, b.ecc_dbe_volatile, b.remap_pending,
             b.remap_failure, b.pcie_replays, b.hw_thermal)
        assert len(b.links) == 18 and all(link.up for link in b.links)
    assert faults(judge(from_nvml).findings) == faults(judge(from_xml).findings)


def test_nvml_a_lost_gpu_and_a_down_link(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, xml("smi-q-x-healthy-8.xml"), lost=3, link_down=(5, 2))
    found = judge(nvidia.gather_nvml()).findings
    assert faults(found) == [("gpu.nvlink.down", 5), ("gpu.off_bus", 3)]
    assert "GPU is lost" in next(f for f in found if f.fault == "gpu.off_bus").evidence[0].text


def test_nvml_an_ecc_query_that_fails_is_cannot_tell_and_not_supported_is_silent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D3, O6 (issue 35 item 2): NVML's Unknown Error for GPU 2's ECC count is the
    record-only gpu.ecc.unreadable with NVML's words and the status note; Not Supported
    for GPU 4 (no ECC on it) is not applicable and says nothing."""
    nv = pytest.importorskip("pynvml")
    _fake_nvml(monkeypatch, xml("smi-q-x-healthy-8.xml"),
               ecc_error={2: nv.NVML_ERROR_UNKNOWN, 4: nv.NVML_ERROR_NOT_SUPPORTED})
    readings = nvidia.gather_nvml()
    assert readings[2].unreadable == ("nvmlDeviceGetTotalEccErrors: Unknown Error",)
    assert readings[4].unreadable == () and readings[4].ecc_dbe_volatile is None
    from slurm_heal.checks.config import CheckConfig

    found, update = nvidia.DETECTOR.evaluate(CheckConfig(), {}, "gpu07", NOW,
                                             (readings, "nvml", 8))
    assert [(f.fault, f.severity) for f in found] == [("gpu.ecc.unreadable", Severity.INFO)]
    assert found[0].evidence[0].data["gpus"] == [2]
    assert "Unknown Error" in found[0].summary
    assert update[gpu.NOTE].startswith("ECC not readable on GPU 2: nvml gave an NVML error")


def test_nvml_fabric_info_is_read_as_nvidia_smi_prints_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D12 (issue 37): NVML's nvmlDeviceGetGpuFabricInfo fills NVIDIA's own struct
    (c_nvmlGpuFabricInfo_t: clusterUuid bytes, status, cliqueId, state): the same words
    and domain as nvidia-smi -q -x gives for the same GPUs (tests/data/nvidia)."""
    nv = pytest.importorskip("pynvml")
    from_xml = xml("smi-q-x-fabric-failed.xml")
    _fake_nvml(monkeypatch, from_xml)
    uuid = bytes.fromhex("6a130f54faaa4b8f847fbe44ab70f917")

    def fabric(h: object, out: object) -> int:
        info = out._obj  # type: ignore[attr-defined]  # ctypes.byref's target
        info.clusterUuid[:] = list(uuid)
        info.cliqueId, info.state = 32766, 3  # NVML_GPU_FABRIC_STATE_COMPLETED
        info.status = 0 if h.g.index == 0 else nv.NVML_ERROR_INSUFFICIENT_RESOURCES  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(nv, "nvmlDeviceGetGpuFabricInfo", fabric)
    monkeypatch.setattr(nv, "nvmlErrorString", lambda code: b"Insufficient Resources")
    monkeypatch.setattr(nv, "nvmlSystemGetDriverVersion", lambda: b"570.124.06")
    monkeypatch.setattr(nv, "nvmlDeviceGetVbiosVersion", lambda h: "96.00.99.00.01")
    from_nvml = nvidia.gather_nvml()
    assert (from_nvml[0].fabric_state, from_nvml[0].fabric_status) == ("Completed", "Success")
    assert [(g.fabric_status, g.nvlink_domain) for g in from_nvml[1:]] == [
        (x.fabric_status, x.nvlink_domain) for x in from_xml[1:]]
    assert gpu.domains_of(from_nvml) == gpu.domains_of(from_xml) == {
        "nvlink": "6a130f54-faaa-4b8f-847f-be44ab70f917/32766", "driver": "570.124.06",
        "vbios": "96.00.99.00.01"}
    assert [f.fault for f in judge(from_nvml).findings] == ["gpu.fabric.failed"] * 7
