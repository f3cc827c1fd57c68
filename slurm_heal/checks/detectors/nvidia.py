"""NVIDIA GPU telemetry (SPEC D2, D3): NVML, nvidia-smi and DCGM -> `gpu.GpuReading`.

Sources, in order of preference:

* NVML through NVIDIA's own bindings (``nvidia-ml-py``, module ``pynvml``; the optional
  extra ``slurm-heal[nvidia]``): a few milliseconds, no process. Imported only when the
  detector runs, so a node without GPUs never pays for it. Never used under a replay
  root (it would read the live hardware).
* ``nvidia-smi -q -x`` (XML; default) or ``--query-gpu ... --format=csv,noheader,nounits``
  plus ``--query-remapped-rows`` (CSV; the CSV has no PCIe replay counter), or the plain
  ``nvidia-smi -q`` text (``smi_format = "text"``, what some sites collect).
* DCGM's health watches, ``dcgmi health -g GROUP -c -j``, where DCGM runs: its incidents
  are added to the readings of the GPU they name.

"Unable to determine the device handle for GPU ...: GPU is lost" (the tool's words for a
GPU that fell off the bus) becomes a lost reading, i.e. ``gpu.off_bus``. An NVML error
printed in place of an ECC or row-remap counter (``[Unknown Error]``, ``[GPU requires
reset]``, ``ERR!``, ``N/A (GPU is lost)``) is "cannot tell": the record-only
``gpu.ecc.unreadable`` and a note on the status line (SPEC D3, O6), never clean; ``N/A``
and ``[Not Supported]`` (no ECC on the GPU) are not applicable and say nothing. A tool that
does not answer within its timeout is killed with its process group and reported as
``gpu.tool.hung``: a hung nvidia-smi is itself a symptom.

The parsers are pure and tested on golden files in ``tests/data/nvidia/``.
"""

from __future__ import annotations

import json
import os
import re

from slurm_heal.checks import paths, proc, state
from slurm_heal.checks.config import NvidiaConfig
from slurm_heal.checks.detectors.gpu import (
    NOTE,
    GpuReading,
    Incident,
    LinkReading,
    Thresholds,
    domains_of,
    ecc_note,
    ecc_unreadable,
)
from slurm_heal.checks.detectors.gpu import evaluate as evaluate_readings
from slurm_heal.checks.detectors.host import expected_gpus
from slurm_heal.checks.node import Unsupported
from slurm_heal.errors import CheckError
from slurm_heal.frozen import replace
from slurm_heal.nvml import nvml_error
from slurm_heal.types import Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime
    from typing import Any
    from xml.etree.ElementTree import Element

    from slurm_heal.checks.config import CheckConfig
    from slurm_heal.types import Finding

# --query-gpu fields, in this order. clocks_throttle_reasons.* is the name every driver
# since R450 accepts (R535+ also call them clocks_event_reasons.*).
CSV_FIELDS = ("index", "uuid", "pci.bus_id", "serial", "name",
              "ecc.errors.uncorrected.volatile.total",
              "clocks_throttle_reasons.hw_thermal_slowdown",
              "clocks_throttle_reasons.sw_thermal_slowdown")
REMAP_FIELDS = ("gpu_uuid", "remapped_rows.pending", "remapped_rows.failure")

_LOST = re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*"
                   r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)?[^\n]*")


def _int(text: str | None) -> int | None:
    """A counter as nvidia-smi prints it; None for N/A, [Not Supported], blanks."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _flag(text: str | None) -> bool | None:
    """Active / Not Active, Yes / No, 1 / 0; None when the tool does not say."""
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("active", "yes", "1", "true"):
        return True
    if low in ("not active", "no", "0", "false"):
        return False
    return None


def _errors(fields: Iterable[tuple[str, str | None]]) -> tuple[str, ...]:
    """The counters of ``fields`` (name, as printed) the tool printed an NVML error for,
    as ``"<name>: <its words>"`` (`GpuReading.unreadable`)."""
    return tuple(f"{name}: {err}" for name, value in fields
                 if (err := nvml_error(value)) is not None)


def lost_gpus(text: str, first_index: int) -> list[GpuReading]:
    """Lost GPUs the tool names in its output (stdout or stderr)."""
    out = []
    for n, m in enumerate(_LOST.finditer(text)):
        out.append(GpuReading(index=first_index + n, pci=(m.group(1) or "").lower(),
                              lost=True, excerpt=m.group(0).strip()))
    return out


# ------------------------------------------------------------------ nvidia-smi -q -x

def _text(el: Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    return found.text if found is not None and found.text is not None else None


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# The volatile uncorrectable counts under ecc_errors/volatile (today's SRAM/DRAM names and
# older drivers' double_bit), and the memory elements a whole-section error replaces.
_XML_UNCORRECTABLE = ("dram_uncorrectable", "sram_uncorrectable", "sram_uncorrectable_parity",
                      "sram_uncorrectable_secded", "double_bit/total")
_XML_MEMORY = ("ecc_errors", "ecc_errors/volatile", "remapped_rows",
               "remapped_rows/remapped_row_pending", "remapped_rows/remapped_row_failure")


def parse_xml(text: str) -> list[GpuReading]:
    """``nvidia-smi -q -x`` -> readings, in the tool's order (= nvidia-smi's index)."""
    from xml.etree import ElementTree

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise CheckError(f"nvidia-smi -q -x printed XML that does not parse: {exc}") from None
    out = []
    driver = (_text(root, "driver_version") or "").strip()
    for index, gpu in enumerate(root.findall("gpu")):
        vol = gpu.find("ecc_errors/volatile")
        dbe = _sum([_int(_text(vol, k)) for k in _XML_UNCORRECTABLE])
        mig = [el for el in gpu.findall(
            "mig_devices/mig_device/ecc_error_count/volatile_count/*")
            if "uncorrectable" in el.tag]
        if dbe is None:
            # MIG mode: the GPU's own volatile counts are N/A, each instance keeps its
            # own (mig_devices/mig_device/ecc_error_count/volatile_count).
            dbe = _sum([_int(el.text) for el in mig])
        unreadable = _errors(
            [(p, _text(gpu, p)) for p in _XML_MEMORY]
            + [(f"ecc_errors/volatile/{k}", _text(vol, k)) for k in _XML_UNCORRECTABLE]
            + [(f"mig_device/volatile_count/{el.tag}", el.text) for el in mig])
        reasons = gpu.find("clocks_event_reasons")
        prefix = "clocks_event_reason_"
        if reasons is None:
            reasons, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
        pci = (_text(gpu, "pci/pci_bus_id") or gpu.get("id") or "").lower()
        reading = GpuReading(
            index=index, uuid=_text(gpu, "uuid") or "", pci=pci,
            serial=(_text(gpu, "serial") or "").strip(),
            name=_text(gpu, "product_name") or "",
            ecc_dbe_volatile=dbe,
            remap_failure=_flag(_text(gpu, "remapped_rows/remapped_row_failure")),
            remap_pending=_flag(_text(gpu, "remapped_rows/remapped_row_pending")),
            pcie_replays=_int(_text(gpu, "pci/replay_counter")),
            hw_thermal=_flag(_text(reasons, prefix + "hw_thermal_slowdown")),
            sw_thermal=_flag(_text(reasons, prefix + "sw_thermal_slowdown")),
            unreadable=unreadable,
            fabric_state=_text(gpu, "fabric/state"), fabric_status=_text(gpu, "fabric/status"),
            clique_id=_text(gpu, "fabric/cliqueId"),
            cluster_uuid=_text(gpu, "fabric/clusterUuid"),
            fabric_bandwidth=_text(gpu, "fabric/health/bandwidth"),
            fabric_health=_text(gpu, "fabric/health/summary"), driver=driver,
            vbios=(_text(gpu, "vbios_version") or "").strip())
        out.append(_with_excerpt(reading))
    return out


def _with_excerpt(g: GpuReading) -> GpuReading:
    parts = [f"gpu {g.index} {g.pci} {g.uuid} serial={g.serial}",
             f"volatile_dbe={g.ecc_dbe_volatile}", f"remap_pending={g.remap_pending}",
             f"remap_failure={g.remap_failure}", f"pcie_replays={g.pcie_replays}",
             f"hw_thermal={g.hw_thermal}", f"sw_thermal={g.sw_thermal}"]
    parts += [f"unreadable {u}" for u in g.unreadable]
    return replace(g, excerpt=" ".join(parts))


# ------------------------------------------------------------------ nvidia-smi -q (text)

def _text_tree(text: str) -> list[tuple[str, dict[str, str]]]:
    """``nvidia-smi -q`` -> per GPU (its ``GPU <bus id>`` header) the values by path,
    ``"ECC Errors/Volatile/DRAM Uncorrectable": "0"``: sections are the indented lines
    without a value, four spaces a level."""
    gpus: list[tuple[str, dict[str, str]]] = []
    stack: list[tuple[int, str]] = []
    values: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("GPU ") and not line[4:5].isspace():
            values = {}
            gpus.append((line[4:].strip(), values))
            stack = []
            continue
        if values is None or not line.strip():
            continue
        depth = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(" : ") if " : " in line else \
            (line.strip().rstrip(":").strip(), "", "")
        if not sep and line.rstrip().endswith(":"):
            key, sep, value = line.strip()[:-1].strip(), ":", ""
        while stack and stack[-1][0] >= depth:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key.strip()])
        if sep and value.strip():
            values[path] = value.strip()
        else:
            stack.append((depth, key.strip()))
    return gpus


def parse_text(text: str) -> list[GpuReading]:
    """``nvidia-smi -q`` (the text some sites collect instead of ``-x``) -> readings, in
    the tool's order. Older drivers' ``Double Bit`` ECC and ``Clocks Throttle Reasons``
    are read as well as today's names."""
    found = re.search(r"^Driver Version\s*: *(\S+)", text, re.MULTILINE)
    driver = found.group(1) if found else ""
    return [_text_reading(index, bus, v, driver)
            for index, (bus, v) in enumerate(_text_tree(text))]


def _text_reading(index: int, bus: str, v: dict[str, str], driver: str = "") -> GpuReading:
    def one(*paths: str) -> str | None:
        return next((v[p] for p in paths if p in v), None)

    counts = [(path, val) for path, val in v.items()
              if path.startswith("ECC Errors/Volatile/")
              and ("Uncorrectable" in path or path.endswith("Double Bit/Total"))]
    dbe = _sum([_int(val) for _, val in counts])
    reasons = next((r for r in ("Clocks Event Reasons", "Clocks Throttle Reasons")
                    if any(p.startswith(r + "/") for p in v)), "Clocks Event Reasons")

    def thermal(kind: str) -> bool | None:
        return _flag(next((val for path, val in v.items()
                           if path.startswith(reasons + "/")
                           and path.endswith(f"{kind} Thermal Slowdown")), None))

    return _with_excerpt(GpuReading(
        index=index, uuid=one("GPU UUID") or "", pci=(one("PCI/Bus Id") or bus).lower(),
        serial=(one("Serial Number") or "").strip(), name=one("Product Name") or "",
        ecc_dbe_volatile=dbe,
        remap_failure=_flag(one("Remapped Rows/Remapping Failure Occurred")),
        remap_pending=_flag(one("Remapped Rows/Pending")),
        pcie_replays=_int(one("PCI/Replays Since Reset", "PCI/Replays since reset")),
        hw_thermal=thermal("HW"), sw_thermal=thermal("SW"),
        unreadable=_errors([*((p, v.get(p)) for p in _TEXT_MEMORY), *counts]),
        fabric_state=one("Fabric/State"), fabric_status=one("Fabric/Status"),
        clique_id=one("Fabric/CliqueId"), cluster_uuid=one("Fabric/ClusterUUID"),
        fabric_bandwidth=one("Fabric/Health/Bandwidth"),
        fabric_health=one("Fabric/Health/Summary"), driver=driver,
        vbios=(one("VBIOS Version") or "").strip()))


# The memory sections and flags a whole-value error replaces in ``nvidia-smi -q``.
_TEXT_MEMORY = ("ECC Errors", "ECC Errors/Volatile", "Remapped Rows", "Remapped Rows/Pending",
                "Remapped Rows/Remapping Failure Occurred")


# ------------------------------------------------------------------ nvidia-smi CSV

def parse_csv(query_gpu: str, remapped: str = "") -> list[GpuReading]:
    """``--query-gpu=<CSV_FIELDS> --format=csv,noheader,nounits`` (and optionally
    ``--query-remapped-rows=<REMAP_FIELDS> --format=csv,noheader``) -> readings.

    With a header line (``--format=csv``) the columns are read by name, in any order
    and among any others; a serial such as ``[N/A]`` is kept as printed (SPEC D11 sets
    placeholders aside when the machine identity is made)."""
    import csv

    remaps: dict[str, tuple[bool | None, bool | None]] = {}
    remap_errors: dict[str, tuple[str, ...]] = {}
    for row in csv.reader(remapped.splitlines(), skipinitialspace=True):
        if len(row) >= 3:
            remaps[row[0].strip()] = (_flag(row[1]), _flag(row[2]))
            remap_errors[row[0].strip()] = _errors(list(zip(REMAP_FIELDS[1:], row[1:3],
                                                            strict=True)))
    out: list[GpuReading] = []
    columns: dict[str, int] | None = None  # a header line's names -> positions
    for line in query_gpu.splitlines():
        row = next(csv.reader([line], skipinitialspace=True), [])
        names = [c.strip().split(" [", 1)[0] for c in row]  # "memory.used [MiB]"
        if "uuid" in names and "pci.bus_id" in names:
            # ``--format=csv`` with its header, in any column order (what exporters
            # and people collect): read the fields by name; a missing one is unknown.
            columns = {n: i for i, n in enumerate(names)}
            continue
        if columns is not None:
            v: dict[str, str] = {}
            for f in CSV_FIELDS:
                # R535+ headers say clocks_event_reasons.* for clocks_throttle_reasons.*
                name = f if f in columns else f.replace("clocks_throttle_", "clocks_event_")
                pos = columns.get(name)
                v[f] = row[pos].strip() if pos is not None and pos < len(row) else ""
            v["index"] = v["index"] or str(len(out))
        elif len(row) < len(CSV_FIELDS):
            continue
        else:
            v = dict(zip(CSV_FIELDS, (c.strip() for c in row[:len(CSV_FIELDS)]),
                         strict=True))
        index = _int(v["index"])
        if index is None:
            continue
        pending, failure = remaps.get(v["uuid"], (None, None))
        out.append(GpuReading(
            index=index, uuid=v["uuid"], pci=v["pci.bus_id"].lower(), serial=v["serial"],
            name=v["name"], ecc_dbe_volatile=_int(v["ecc.errors.uncorrected.volatile.total"]),
            remap_pending=pending, remap_failure=failure,
            hw_thermal=_flag(v["clocks_throttle_reasons.hw_thermal_slowdown"]),
            sw_thermal=_flag(v["clocks_throttle_reasons.sw_thermal_slowdown"]),
            excerpt=line.strip()[:400],
            unreadable=_errors([("ecc.errors.uncorrected.volatile.total",
                                 v["ecc.errors.uncorrected.volatile.total"])])
            + remap_errors.get(v["uuid"], ())))
    return out


# ------------------------------------------------------------------ DCGM health

_DCGM_FAULTS = {  # DCGM health system -> (fault on Warning, fault on Failure)
    "memory": ("gpu.health", "gpu.ecc.dbe"),
    "pcie": ("gpu.pcie.replay_rate", "gpu.pcie.replay_rate"),
    "nvlink": ("gpu.nvlink.errors", "gpu.nvlink.down"),
    "thermal": ("gpu.thermal", "gpu.thermal"),
}


def _texts(node: Any) -> list[str]:
    """Every "value" string under a DCGM JSON tree node, depth first."""
    if not isinstance(node, dict):
        return []
    out = []
    for child in (node.get("children") or {}).values():
        if isinstance(child, dict):
            if isinstance(child.get("value"), str):
                out.append(child["value"])
            out.extend(_texts(child))
    return out


def parse_dcgm_health(text: str) -> dict[int, list[Incident]]:
    """``dcgmi health -g G -c -j`` -> GPU id -> incidents (Warning / Failure systems).

    dcgmi's JSON is a tree of ``{"value": ..., "children": {...}}`` nodes under
    ``body``: ``GPU`` -> ``<gpu id>`` -> ``<system>`` (e.g. "Memory system") whose
    children hold the incident texts. Systems reported Healthy are skipped.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CheckError(f"dcgmi health printed JSON that does not parse: {exc}") from None
    gpus = (((doc.get("body") or {}).get("GPU") or {}).get("children") or {}) \
        if isinstance(doc, dict) else {}
    out: dict[int, list[Incident]] = {}
    for gid, node in gpus.items():
        if not str(gid).isdigit() or not isinstance(node, dict):
            continue
        for system, sub in (node.get("children") or {}).items():
            if not isinstance(sub, dict) or system.lower() in ("health", "overall health"):
                continue
            status = str(sub.get("value", "")).strip().lower()
            if status not in ("warning", "failure"):
                continue
            name = re.sub(r"\s*system$", "", system, flags=re.IGNORECASE).strip()
            on_warn, on_fail = _DCGM_FAULTS.get(name.lower(), ("gpu.health", "gpu.health"))
            fault = on_fail if status == "failure" else on_warn
            severity = Severity.CRITICAL if status == "failure" and fault != "gpu.health" \
                else Severity.WARNING
            words = "; ".join(_texts(sub)) or f"{name} {status}"
            out.setdefault(int(gid), []).append(Incident(fault, severity, name, words))
    return out


def merge_incidents(readings: list[GpuReading],
                    incidents: dict[int, list[Incident]]) -> list[GpuReading]:
    """Add DCGM's incidents to the readings of the GPUs they name (by index)."""
    out = []
    for g in readings:
        extra = incidents.get(g.index)
        out.append(replace(g, incidents=g.incidents + tuple(extra)) if extra else g)
    known = {g.index for g in readings}
    for gid, incs in sorted(incidents.items()):
        if gid not in known:
            out.append(GpuReading(index=gid, incidents=tuple(incs)))
    return out


# ------------------------------------------------------------------ NVML (I/O)

def gather_nvml() -> list[GpuReading]:
    """Readings through NVML. Raises ImportError without nvidia-ml-py and CheckError
    when NVML cannot start (no driver): the caller then falls back to nvidia-smi."""
    import pynvml as nv  # the optional extra; a few ms, only on GPU nodes

    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise CheckError(f"NVML did not start: {exc}") from None
    try:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as exc:
                out.append(GpuReading(index=i, lost=True,
                                      excerpt=f"nvmlDeviceGetHandleByIndex({i}): {exc}"))
                continue
            out.append(_with_excerpt(_nvml_reading(nv, i, h)))
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _call(nv: Any, fn: Any, *args: Any) -> Any:
    """An NVML query, or None where this GPU does not support it."""
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _read(nv: Any, what: str, fn: Any, *args: Any) -> tuple[Any, tuple[str, ...]]:
    """A memory counter's NVML query: (its value, ()); (None, ()) where the GPU has no
    such counter (NVML_ERROR_NOT_SUPPORTED: not applicable); (None, ("<what>: <NVML's
    words>",)) for any other error: cannot tell (SPEC D3, O6)."""
    try:
        return fn(*args), ()
    except nv.NVMLError as exc:
        if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
            return None, ()
        return None, (f"{what}: {exc}",)


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def _nvml_reading(nv: Any, i: int, h: Any) -> GpuReading:
    pci = _call(nv, nv.nvmlDeviceGetPciInfo, h)
    remap, remap_error = _read(nv, "nvmlDeviceGetRemappedRows", nv.nvmlDeviceGetRemappedRows, h)
    dbe, dbe_error = _read(nv, "nvmlDeviceGetTotalEccErrors", nv.nvmlDeviceGetTotalEccErrors,
                           h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    reasons = _call(nv, reasons_fn, h)
    links = []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _call(nv, nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue  # not a link of this GPU
        errors = {}
        for name, const in (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
                            ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                            ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
                            ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA")):
            if hasattr(nv, const):
                value = _call(nv, nv.nvmlDeviceGetNvLinkErrorCounter, h, link,
                              getattr(nv, const))
                if value is not None:
                    errors[name] = int(value)
        links.append(LinkReading(link=link, up=bool(state), errors=errors))
    fabric = _nvml_fabric(nv, h)
    return GpuReading(
        index=i, uuid=_str(_call(nv, nv.nvmlDeviceGetUUID, h)),
        pci=_str(pci.busId).lower() if pci is not None else "",
        serial=_str(_call(nv, nv.nvmlDeviceGetSerial, h)),
        name=_str(_call(nv, nv.nvmlDeviceGetName, h)),
        ecc_dbe_volatile=dbe,
        remap_pending=bool(remap[2]) if remap is not None else None,
        remap_failure=bool(remap[3]) if remap is not None else None,
        pcie_replays=_call(nv, nv.nvmlDeviceGetPcieReplayCounter, h),
        hw_thermal=bool(reasons & 0x40) if reasons is not None else None,  # HwThermalSlowdown
        sw_thermal=bool(reasons & 0x20) if reasons is not None else None,  # SwThermalSlowdown
        links=tuple(links), unreadable=dbe_error + remap_error, **fabric,
        driver=_str(_call(nv, nv.nvmlSystemGetDriverVersion)),
        vbios=_str(_call(nv, nv.nvmlDeviceGetVbiosVersion, h)))


# NVML's nvmlGpuFabricState_t, in nvidia-smi's words (SPEC D12).
_FABRIC_STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}


def _nvml_fabric(nv: Any, h: Any) -> dict[str, Any]:
    """SPEC D12: NVML's fabric info of a GPU (nvmlDeviceGetGpuFabricInfo), in the words
    nvidia-smi -q prints; {} where this NVML or GPU has none."""
    fn = getattr(nv, "nvmlDeviceGetGpuFabricInfo", None)
    kind = getattr(nv, "c_nvmlGpuFabricInfo_t", None)
    if fn is None or kind is None:
        return {}  # an NVML binding older than the fabric (R535)
    import ctypes  # pynvml's own dependency: already loaded on this path

    info = kind()
    try:
        fn(h, ctypes.byref(info))
    except (nv.NVMLError, TypeError, ctypes.ArgumentError):
        return {}  # no fabric on this GPU (NVML_ERROR_NOT_SUPPORTED) or no NVML at all
    state = int(getattr(info, "state", 0))
    status = int(getattr(info, "status", 0))
    raw = bytes(getattr(info, "clusterUuid", b"") or b"")
    uuid = raw.hex() if raw else ""
    if len(uuid) == 32:
        uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
    words = "Success" if status == 0 else _str(_call(nv, nv.nvmlErrorString, status)) \
        or f"NVML error {status}"
    if state != 3:
        words = "N/A"
    return {"fabric_state": _FABRIC_STATES.get(state, str(state)), "fabric_status": words,
            "clique_id": str(getattr(info, "cliqueId", "")), "cluster_uuid": uuid}


# ------------------------------------------------------------------ nvidia-smi nvlink -s

_NVL_GPU = re.compile(r"^GPU (\d{1,3}):")
_NVL_LINK = re.compile(r"^\s*Link (\d{1,3}): (.*)$")


def parse_nvlink_status(text: str) -> dict[int, tuple[LinkReading, ...]]:
    """``nvidia-smi nvlink -s`` -> GPU index -> links (``<inactive>`` = down)."""
    out: dict[int, list[LinkReading]] = {}
    current: int | None = None
    for line in text.splitlines():
        m = _NVL_GPU.match(line)
        if m:
            current = int(m.group(1))
            out.setdefault(current, [])
            continue
        m = _NVL_LINK.match(line)
        if m and current is not None:
            out[current].append(LinkReading(link=int(m.group(1)),
                                            up="inactive" not in m.group(2).lower()))
    return {k: tuple(v) for k, v in out.items()}


# ------------------------------------------------------------------ nvidia-smi / dcgmi (I/O)

def gather_smi(fmt: str, timeout: float, nvlink: bool) -> list[GpuReading]:
    """Readings through nvidia-smi (``fmt`` "xml" or "csv"). A tool that hangs raises
    `proc.ToolTimeout`; one that fails without naming a lost GPU raises CheckError."""
    if fmt == "text":
        res = proc.run(["nvidia-smi", "-q"], timeout)
        readings = parse_text(res.stdout)
    elif fmt == "csv":
        res = proc.run(["nvidia-smi", "--query-gpu=" + ",".join(CSV_FIELDS),
                        "--format=csv,noheader,nounits"], timeout)
        remap = proc.run(["nvidia-smi", "--query-remapped-rows=" + ",".join(REMAP_FIELDS),
                          "--format=csv,noheader"], timeout)
        readings = parse_csv(res.stdout, remap.stdout if remap.returncode == 0 else "")
    else:
        res = proc.run(["nvidia-smi", "-q", "-x"], timeout)
        readings = parse_xml(res.stdout) if res.stdout.lstrip().startswith("<") else []
    lost = lost_gpus(res.stdout + "\n" + res.stderr, len(readings))
    if res.returncode != 0 and not readings and not lost:
        raise CheckError(f"nvidia-smi failed (exit {res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()[:200]}")
    if nvlink and readings:
        st = proc.run(["nvidia-smi", "nvlink", "-s"], timeout)
        links = parse_nvlink_status(st.stdout) if st.returncode == 0 else {}
        readings = [replace(g, links=links.get(g.index, ())) for g in readings]
    return readings + lost


def gather_dcgm(group: int, timeout: float) -> dict[int, list[Incident]]:
    """DCGM's health watches for ``group`` (set up by the site: ``dcgmi health -g G -s
    a``). CheckError when dcgmi fails (e.g. no nv-hostengine)."""
    res = proc.run(["dcgmi", "health", "-g", str(group), "-c", "-j"], timeout)
    if res.returncode != 0 and not res.stdout.lstrip().startswith("{"):
        raise CheckError(f"dcgmi health failed (exit {res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()[:200]}")
    return parse_dcgm_health(res.stdout)


# ------------------------------------------------------------------ the detector

class Nvidia:
    """SPEC D2, D3: NVML (else nvidia-smi), plus DCGM's incidents, judged by
    `gpu.evaluate`. Unsupported on a node with neither the driver nor nvidia-smi (the
    runner asks `slurm_heal.checks.present.nvidia` before importing this module)."""

    name = "nvidia"
    settings = NvidiaConfig
    modes = NvidiaConfig().modes
    tool_hang_is_finding = True  # a hung nvidia-smi or dcgmi is gpu.tool.hung (D3)

    def gather(self, cfg: CheckConfig, st: dict[str, Any], name: str,
               now: datetime) -> tuple[list[GpuReading], str, int]:
        """(readings, their source, the GPUs expected)."""
        nc = cfg.nvidia
        readings: list[GpuReading] | None = None
        source = ""
        # NVML reads the live hardware: never under a replay root.
        if nc.source in ("auto", "nvml") and not paths.root():
            try:
                readings, source = gather_nvml(), "nvml"
            except ImportError:
                if nc.source == "nvml":
                    raise CheckError("nvidia.source = nvml but nvidia-ml-py is not installed "
                                     "(pip install 'slurm-heal[nvidia]')") from None
            except CheckError:
                if nc.source == "nvml":
                    raise
        if readings is None:
            if proc.which("nvidia-smi") is None:
                if not os.path.isdir(paths.host_path("/proc/driver/nvidia")):
                    raise Unsupported("no NVIDIA driver and no nvidia-smi on this node")
                raise CheckError("the NVIDIA driver is loaded but nvidia-smi is not on PATH")
            readings = gather_smi(nc.smi_format, nc.tool_timeout, nc.nvlink)
            source = f"nvidia-smi ({nc.smi_format})"
        if nc.dcgm == "on" or (nc.dcgm == "auto" and proc.which("dcgmi") is not None):
            try:
                readings = merge_incidents(readings, gather_dcgm(nc.dcgm_group,
                                                                 nc.tool_timeout))
                source += " + dcgmi health"
            except proc.ToolTimeout:
                raise
            except CheckError:
                if nc.dcgm == "on":
                    raise  # "auto": dcgmi without a running host engine is not a fault
        return readings, source, nc.expected or expected_gpus(cfg, name)

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], name: str, now: datetime,
                 seen: tuple[list[GpuReading], str, int]) -> tuple[list[Finding],
                                                                   dict[str, Any]]:
        readings, source, expected = seen
        nc = cfg.nvidia
        counters, since = state.detector_state(st, "nvidia_state")
        th = Thresholds(expected=expected, pcie_replays_per_min=nc.pcie_replays_per_min,
                            nvlink_errors_per_min=nc.nvlink_errors_per_min,
                            thermal_for=nc.thermal_for)
        out = evaluate_readings(readings, counters, since, now, th, name, "nvidia", source)
        serials = sorted({g.serial for g in readings if g.serial})
        update: dict[str, Any] = {"nvidia_state": {"counters": out.counters, "since": out.since,
                                                   "serials": serials,
                                                   "domains": domains_of(readings)}}
        findings = list(out.findings)
        blind = [g for g in readings if g.unreadable and not g.lost]
        if blind:
            # SPEC O6, D3: an NVML error in place of a memory counter: cannot tell, never
            # clean (the same finding and note as AMD's)
            gpus = [g.index for g in blind]
            words = sorted({u.rpartition(": ")[2] for g in blind for u in g.unreadable})
            why = (f"{source} gave an NVML error in place of its ECC or row-remap "
                   f"counters ({', '.join(words)})")
            update[NOTE] = ecc_note(gpus, why)
            findings.append(ecc_unreadable(
                readings, gpus, why,
                "; ".join(f"gpu {g.index} {g.pci} {u}" for g in blind for u in g.unreadable),
                name, "nvidia", source, now,
                printed={str(g.index): list(g.unreadable) for g in blind}))
        return findings, update


DETECTOR = Nvidia()


def detect(cfg: CheckConfig, st: dict[str, Any], name: str,
           now: datetime) -> tuple[list[Finding], dict[str, Any]]:
    """One run of the detector (gather, then evaluate)."""
    return DETECTOR.evaluate(cfg, st, name, now, DETECTOR.gather(cfg, st, name, now))
