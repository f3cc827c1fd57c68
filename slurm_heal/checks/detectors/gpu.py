"""Vendor-neutral GPU readings and the one evaluator (SPEC D2, D3, D9).

NVML, nvidia-smi (XML or CSV), DCGM, amd-smi and rocm-smi are all turned into the same
`GpuReading`s; `evaluate` turns readings (plus the counter samples kept on the node)
into faults. So every source is judged by the same rules, and the rules are tested
once on recorded readings.

Faults: ``gpu.ecc.dbe`` (volatile uncorrectable ECC errors), ``gpu.row_remap.failure``,
``gpu.row_remap.pending``, ``gpu.pcie.replay_rate`` (replays per minute between runs,
never the lifetime counter), ``gpu.thermal`` (HW/SW thermal slowdown held for at least
``thermal_for`` seconds), ``gpu.nvlink.down``, ``gpu.nvlink.errors`` (error counters
per minute), ``gpu.off_bus`` (the tool says the GPU is lost), ``gpu.missing`` (fewer GPUs
than configured), ``gpu.health`` (DCGM incidents with no more specific fault).

``gpu.ecc.unreadable`` is the "cannot tell" of a GPU's memory errors (SPEC D3, O6): the
detector's source printed an error in place of the ECC or row-remap counters (NVIDIA) or
gives no uncorrectable count at all (AMD). `ecc_unreadable` makes that one record-only
finding for every vendor, and `ecc_note` the words on the detector's status line; a
counter the GPU does not have (``N/A``, ``[Not Supported]``) is not applicable and says
nothing.
"""

from __future__ import annotations

from datetime import datetime

from slurm_heal.checks.state import rate_per_minute
from slurm_heal.frozen import dataclass, field
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True, slots=True)
class LinkReading:
    """One NVLink (or AMD XGMI) link of a GPU."""

    link: int
    up: bool | None = None
    errors: dict[str, int] = field(default_factory=dict)  # lifetime error counters


@dataclass(frozen=True, slots=True)
class Incident:
    """A health problem a monitoring service reports in its own words (DCGM)."""

    fault: str  # catalog id it maps to
    severity: Severity
    system: str  # e.g. "NVLink", "Memory"
    text: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What one source says about one GPU. ``None`` = the source does not say."""

    index: int
    uuid: str = ""
    pci: str = ""
    serial: str = ""
    name: str = ""
    ecc_dbe_volatile: int | None = None
    remap_failure: bool | None = None
    remap_pending: bool | None = None
    pcie_replays: int | None = None
    hw_thermal: bool | None = None
    sw_thermal: bool | None = None
    links: tuple[LinkReading, ...] = ()
    lost: bool = False  # "GPU is lost" / "Unable to determine the device handle"
    incidents: tuple[Incident, ...] = ()
    excerpt: str = ""  # the tool's own words about this GPU, for the evidence
    # the ECC / row-remap counters the source printed an error for, "<counter>: <words>"
    # (nvidia-smi's "[Unknown Error]"): cannot tell, never clean (gpu.ecc.unreadable)
    unreadable: tuple[str, ...] = ()
    # SPEC D12: the GPU's NVLink fabric (nvidia-smi -q "Fabric", NVML's fabric info):
    # State (Not Supported, Not Started, In Progress, Completed), Status (Success or
    # NVML's error words), CliqueId and ClusterUUID, the health's Bandwidth; None: not said.
    fabric_state: str | None = None
    fabric_status: str | None = None
    clique_id: str | None = None
    cluster_uuid: str | None = None
    fabric_bandwidth: str | None = None
    fabric_health: str | None = None  # the health's Summary (Healthy, Unhealthy)
    driver: str = ""  # the driver version the source reports (the node's cohort, S7)
    vbios: str = ""

    @property
    def nvlink_domain(self) -> str:
        """``ClusterUUID/CliqueId`` of a GPU registered in a multi-node NVLink domain, else
        "" (N/A, or the all-zero UUID an HGX board's local NVSwitch fabric reports)."""
        uuid, clique = (self.cluster_uuid or "").strip(), (self.clique_id or "").strip()
        if not uuid or not clique or uuid.upper().startswith("N/A") \
                or not uuid.replace("0", "").replace("-", ""):
            return ""
        return f"{uuid}/{clique}"

    @property
    def fabric_failed(self) -> bool:
        """SPEC D12: the fabric registration ended and did not succeed."""
        status = (self.fabric_status or "").strip()
        return (self.fabric_state or "").strip().lower() == "completed" and bool(status) \
            and status.lower() not in ("success", "n/a")

    def ident(self) -> dict[str, Any]:
        """Index, UUID, PCI bus id and serial, as far as they are known."""
        out: dict[str, Any] = {"gpu_index": self.index}
        for key, value in (("gpu_uuid", self.uuid), ("pci", self.pci),
                           ("serial", self.serial)):
            if value:
                out[key] = value
        return out

    @property
    def key(self) -> str:
        """What identifies this GPU across runs: its UUID, else its bus, else index."""
        return self.uuid or self.pci or f"index{self.index}"

    def describe(self) -> str:
        where = f" (PCI {self.pci})" if self.pci else ""
        return f"GPU {self.index}{where}"


# The key of a detector's update that is a note for its status line, not state.
NOTE = "_note"


def ecc_note(gpus: list[int], why: str) -> str:
    """The status line's words for GPUs whose ECC cannot be told (SPEC O6)."""
    return f"ECC not readable on GPU {', '.join(map(str, gpus))}: {why} (not reported as clean)"


def ecc_unreadable(readings: list[GpuReading], gpus: list[int], why: str, text: str,
                   node: str, detector: str, source: str, now: datetime,
                   **data: Any) -> Finding:
    """SPEC O6, D3: the GPUs whose uncorrectable memory errors the source cannot tell
    (``why``; ``text`` the tool's words), published like any finding (Extra, ``--json``,
    status, console) as the record-only ``gpu.ecc.unreadable``, never as clean."""
    by_index = {g.index: g for g in readings}
    return Finding(
        fault="gpu.ecc.unreadable", severity=Severity.INFO,
        summary=f"cannot tell ECC on GPU {', '.join(map(str, gpus))}: {why}",
        detector=detector, node=node,
        evidence=(Evidence(source=source, text=text[:400], at=now.isoformat(),
                           data={"ecc": "unknown", "gpus": gpus,
                                 "pci": [by_index[i].pci for i in gpus
                                         if i in by_index and by_index[i].pci], **data}),))


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The evaluator's knobs (from ``[nvidia]`` / ``[amd]`` in the check config)."""

    expected: int = 0  # GPUs the node must show; 0 = not checked
    pcie_replays_per_min: float = 10.0
    nvlink_errors_per_min: float = 10.0
    thermal_for: float = 300.0  # seconds a thermal slowdown must hold


@dataclass(slots=True)
class Outcome:
    findings: list[Finding]
    counters: dict[str, list[float]]
    since: dict[str, float]


def evaluate(readings: list[GpuReading], counters: dict[str, list[float]],
             since: dict[str, float], now: datetime, th: Thresholds, node: str,
             detector: str, source: str) -> Outcome:
    """Readings + the previous counter samples -> findings and the new samples (pure).

    ``counters`` maps ``<gpu key>:<counter>`` to ``[epoch, value]``; ``since`` maps
    ``<gpu key>:thermal`` to the epoch the slowdown was first seen in a row of runs.
    """
    t = now.timestamp()
    at = now.isoformat()
    out: list[Finding] = []
    new_counters: dict[str, list[float]] = {}
    new_since: dict[str, float] = {}

    def add(fault: str, severity: Severity, summary: str, g: GpuReading, text: str,
            **data: Any) -> None:
        out.append(Finding(fault=fault, severity=severity, summary=summary,
                           detector=detector, node=node,
                           evidence=(Evidence(source=source, text=text[:400], at=at,
                                              data={**g.ident(), **data}),)))

    def rate(g: GpuReading, name: str, value: int) -> tuple[float | None, list[float] | None]:
        k = f"{g.key}:{name}"
        prev = counters.get(k)
        new_counters[k] = [t, float(value)]
        return rate_per_minute(prev, float(value), t), prev

    for g in readings:
        if g.lost:
            add("gpu.off_bus", Severity.CRITICAL,
                f"{g.describe()} is lost: the driver cannot reach it", g,
                g.excerpt or "GPU is lost")
            continue
        if g.ecc_dbe_volatile:
            add("gpu.ecc.dbe", Severity.CRITICAL,
                f"{g.describe()} has {g.ecc_dbe_volatile} uncorrectable ECC error(s) "
                "since the last reset", g, g.excerpt or f"volatile DBE={g.ecc_dbe_volatile}",
                ecc_dbe_volatile=g.ecc_dbe_volatile)
        if g.remap_failure:
            add("gpu.row_remap.failure", Severity.CRITICAL,
                f"{g.describe()} failed to remap a memory row (out of spare rows)", g,
                g.excerpt or "row remapping failure", remap_failure=True)
        elif g.remap_pending:
            add("gpu.row_remap.pending", Severity.WARNING,
                f"{g.describe()} has memory row remaps pending a GPU reset", g,
                g.excerpt or "row remapping pending", remap_pending=True)
        if g.pcie_replays is not None:
            r, prev = rate(g, "pcie_replays", g.pcie_replays)
            if r is not None and prev is not None and r > th.pcie_replays_per_min:
                add("gpu.pcie.replay_rate", Severity.WARNING,
                    f"{g.describe()} PCIe link replayed {r:.1f} times a minute "
                    f"(threshold {th.pcie_replays_per_min:g})", g,
                    f"replay counter {int(prev[1])} -> {g.pcie_replays}",
                    counter=g.pcie_replays, previous=int(prev[1]),
                    previous_at=datetime.fromtimestamp(prev[0], now.tzinfo).isoformat(),
                    per_minute=round(r, 2))
        hot = [n for n, v in (("HW", g.hw_thermal), ("SW", g.sw_thermal)) if v]
        if hot:
            k = f"{g.key}:thermal"
            first = since.get(k, t)
            new_since[k] = first
            if t - first >= th.thermal_for:
                add("gpu.thermal", Severity.WARNING,
                    f"{g.describe()} clocks slowed by {'/'.join(hot)} thermal slowdown for "
                    f"{int((t - first) // 60)} min", g,
                    g.excerpt or f"{'/'.join(hot)} thermal slowdown active",
                    thermal=hot, held_s=int(t - first))
        for link in g.links:
            if link.up is False:
                add("gpu.nvlink.down", Severity.CRITICAL,
                    f"{g.describe()} NVLink {link.link} is down", g,
                    f"link {link.link}: inactive", link=link.link)
                continue
            for cname, value in sorted(link.errors.items()):
                r, prev = rate(g, f"link{link.link}:{cname}", value)
                if r is not None and prev is not None and r > th.nvlink_errors_per_min:
                    add("gpu.nvlink.errors", Severity.WARNING,
                        f"{g.describe()} NVLink {link.link} {cname} errors grow "
                        f"{r:.1f}/min (threshold {th.nvlink_errors_per_min:g})", g,
                        f"link {link.link} {cname} {int(prev[1])} -> {value}",
                        link=link.link, counter_name=cname, counter=value,
                        previous=int(prev[1]), per_minute=round(r, 2))
        for inc in g.incidents:
            add(inc.fault, inc.severity, f"{g.describe()}: {inc.system}: {inc.text[:160]}",
                g, inc.text, system=inc.system)
        if g.fabric_failed:  # SPEC D12: critical, naming the GPU and its NVLink domain
            domain = g.nvlink_domain or (f"{g.cluster_uuid}/{g.clique_id}"
                                         if g.cluster_uuid else "unknown")
            add("gpu.fabric.failed", Severity.CRITICAL,
                f"{g.describe()} NVLink fabric registration failed ({g.fabric_status}) in "
                f"NVLink domain {domain}", g,
                f"Fabric State {g.fabric_state}, Status {g.fabric_status}, CliqueId "
                f"{g.clique_id}, ClusterUUID {g.cluster_uuid}",
                fabric_state=g.fabric_state, fabric_status=g.fabric_status,
                nvlink_domain=domain)
        elif (g.fabric_bandwidth or "").strip().lower() == "degraded" \
                or (g.fabric_health or "").strip().lower() == "unhealthy":
            add("gpu.fabric.degraded", Severity.WARNING,
                f"{g.describe()} NVLink fabric health {g.fabric_health}, bandwidth "
                f"{g.fabric_bandwidth} in NVLink domain {g.nvlink_domain or 'unknown'}", g,
                f"Fabric Health Summary {g.fabric_health}, Bandwidth {g.fabric_bandwidth}",
                fabric_health=g.fabric_health, fabric_bandwidth=g.fabric_bandwidth,
                nvlink_domain=g.nvlink_domain)
    if th.expected > 0 and len(readings) < th.expected:
        seen = ", ".join(str(g.index) for g in readings) or "none"
        out.append(Finding(
            fault="gpu.missing", severity=Severity.CRITICAL,
            summary=f"{len(readings)} of {th.expected} GPUs answer ({source})",
            detector=detector, node=node,
            evidence=(Evidence(source=source, at=at,
                               text=f"visible={len(readings)} expected={th.expected}",
                               data={"visible": len(readings), "expected": th.expected,
                                     "indexes": seen,
                                     "serials": [g.serial for g in readings if g.serial]}),)))
    return Outcome(out, new_counters, new_since)


def domains_of(readings: list[GpuReading]) -> dict[str, str]:
    """SPEC S7, D12 (issue 37): the cause domains a node's GPUs say it is in, for the
    controller: its NVLink domain (the GPUs' ClusterUUID/CliqueId, when one), its driver
    version and VBIOS (its cohort; "mixed" VBIOS is no cohort of one)."""
    out: dict[str, str] = {}
    nvl = sorted({g.nvlink_domain for g in readings if g.nvlink_domain})
    if len(nvl) == 1:
        out["nvlink"] = nvl[0]
    for key, values in (("driver", {g.driver for g in readings if g.driver}),
                        ("vbios", {g.vbios for g in readings if g.vbios})):
        if len(values) == 1:
            out[key] = values.pop()[:120]
    return out
