"""AMD GPU telemetry (SPEC D3, D9): ``amd-smi`` or ``rocm-smi`` JSON -> `gpu.GpuReading`.

The same readings as NVIDIA's, judged by the same evaluator (`gpu.evaluate`), so the
faults and the remediation flow do not depend on the vendor.

* ``amd-smi list --json`` (index, BDF, UUID) and ``amd-smi metric --json`` (ECC counts,
  PCIe replay counter, throttle status). amd-smi before ROCm 6.4 prints a list of
  per-GPU objects; later versions wrap it as ``{"gpu_data": [...]}``: both are read.
* ``rocm-smi --showserial --showbus --showuniqueid --showrasinfo all --json``: older
  nodes without amd-smi; it prints ``{"card0": {...}}`` with the keys ``Serial Number``,
  ``PCI Bus``, ``Unique ID`` and, per RAS block, ``... Uncorrectable ...`` counts.

Values the tool reports as ``"N/A"`` are unknown (``None``), never zero faults.

rocm-smi's JSON carries no RAS counts on real nodes (``--showrasinfo`` prints nothing
under ``--json``: "WARNING: No JSON data to report"). Where a tool gives no ECC count the
kernel's own counters are read, ``/sys/class/drm/card<N>/device/ras/<block>_err_count``
(``ue: <n>`` / ``ce: <n>`` [/ ``de: <n>``], what amd-smi itself reads); where neither
says, the GPU's ECC is a "cannot tell" state: the record-only finding
``gpu.ecc.unreadable`` (Extra, ``--json``, status, console; SPEC O6) and a note on the
detector's status line, never clean.
"""

from __future__ import annotations

import json
import os

from slurm_heal.checks import paths, proc, state
from slurm_heal.checks.config import AmdConfig
from slurm_heal.checks.detectors import gpu
from slurm_heal.checks.detectors.gpu import GpuReading
from slurm_heal.checks.node import Unsupported
from slurm_heal.errors import CheckError
from slurm_heal.frozen import replace

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

    from slurm_heal.checks.config import CheckConfig
    from slurm_heal.types import Finding


NOTE = gpu.NOTE  # the key of a detector's update that is its status line's note


def _num(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 20:
        return int(value.strip())
    if isinstance(value, dict) and "value" in value:  # {"value": 3, "unit": ...}
        return _num(value["value"])
    return None


def _active(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("active", "yes", "true", "on"):
            return True
        if low in ("not active", "inactive", "no", "false", "off"):
            return False
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _gpus(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if isinstance(doc, dict):
        doc = [doc]
    return [g for g in doc if isinstance(g, dict)] if isinstance(doc, list) else []


def _load(text: str, tool: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CheckError(f"{tool} printed JSON that does not parse: {exc}") from None


def parse_amd_smi(list_json: str, metric_json: str) -> list[GpuReading]:
    """``amd-smi list --json`` + ``amd-smi metric --json`` -> readings."""
    ids: dict[int, dict[str, Any]] = {}
    for g in _gpus(_load(list_json, "amd-smi list")):
        idx = _num(g.get("gpu"))
        if idx is not None:
            ids[idx] = g
    out = []
    for g in _gpus(_load(metric_json, "amd-smi metric")):
        idx = _num(g.get("gpu"))
        if idx is None:
            continue
        ecc, pcie, throttle = (_dict(g.get(k)) for k in ("ecc", "pcie", "throttle"))
        thermal = [_active(v) for k, v in throttle.items() if "thermal" in k.lower()]
        known = [t for t in thermal if t is not None]
        ident = ids.get(idx, {})
        dbe = _num(ecc.get("total_uncorrectable_count", ecc.get("uncorrectable_count")))
        replays = _num(pcie.get("replay_count", pcie.get("pcie_replay_count")))
        out.append(GpuReading(
            index=idx, uuid=str(ident.get("uuid", "")), pci=str(ident.get("bdf", "")).lower(),
            serial=str(ident.get("serial", "") or ""), ecc_dbe_volatile=dbe,
            pcie_replays=replays, hw_thermal=any(known) if known else None,
            excerpt=f"gpu {idx} {ident.get('bdf', '')} ecc_uncorrectable={dbe} "
                    f"pcie_replays={replays} thermal_throttle={any(known) if known else None}"))
    return out


def parse_rocm_smi(text: str) -> list[GpuReading]:
    """``rocm-smi ... --json`` -> readings (cards in the order of their number).

    rocm-smi prints ``"Unique ID": "N/A"`` where the GPU reports none (every card of an
    MI100 node on ROCm 5.7): a placeholder is no UUID, so such a GPU is known by its PCI
    bus (`GpuReading.key`), not by one "N/A" shared with its neighbours (SPEC D11)."""
    from slurm_heal.extra import is_placeholder_serial

    doc = _load(text, "rocm-smi")
    if not isinstance(doc, dict):
        raise CheckError("rocm-smi --json did not print an object of cards")
    cards = sorted((k for k in doc if k.startswith("card") and k[4:].isdigit()),
                   key=lambda k: int(k[4:]))
    out = []
    for name in cards:
        card = doc[name] if isinstance(doc[name], dict) else {}
        unc = [_num(v) for k, v in card.items() if "uncorrectable" in k.lower()]
        dbe = sum(v for v in unc if v is not None) if any(v is not None for v in unc) else None
        replays = next((_num(v) for k, v in card.items() if "replay" in k.lower()), None)
        uuid = str(card.get("Unique ID", "")).strip()
        out.append(GpuReading(
            index=int(name[4:]), uuid="" if is_placeholder_serial(uuid) else uuid,
            pci=str(card.get("PCI Bus", "")).lower(),
            serial=str(card.get("Serial Number", "")), ecc_dbe_volatile=dbe,
            pcie_replays=replays,
            excerpt=f"{name} {card.get('PCI Bus', '')} uncorrectable={dbe} replays={replays}"))
    return out


def parse_ras_counts(files: dict[str, str]) -> dict[str, int]:
    """``{block_err_count file name: its text}`` -> block -> uncorrectable (``ue``) count.
    A file without a readable ``ue:`` line is left out."""
    out: dict[str, int] = {}
    for fname, text in files.items():
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "ue" and _num(value.strip()) is not None:
                out[fname.removesuffix("_err_count")] = int(value.strip())
                break
    return out


def sysfs_ras(card: int, host_path: Any) -> dict[str, int] | None:
    """The amdgpu RAS uncorrectable counts of ``card`` from sysfs (under the replay root
    through ``host_path``); None when the card has no readable RAS counters."""
    import glob
    import os

    base = host_path(f"/sys/class/drm/card{card}/device/ras")
    files: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(base), "*_err_count"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                files[os.path.basename(path)] = fh.read(4096)
        except OSError:
            continue
    counts = parse_ras_counts(files)
    return counts or None


def with_sysfs_ecc(readings: list[GpuReading], host_path: Any
                   ) -> tuple[list[GpuReading], list[int]]:
    """Fill in the ECC count the tool did not give from sysfs; also return the GPUs
    whose ECC count neither says (their ECC is not readable: never "clean")."""
    out: list[GpuReading] = []
    unreadable: list[int] = []
    for g in readings:
        if g.ecc_dbe_volatile is None and not g.lost:
            counts = sysfs_ras(g.index, host_path)
            if counts is None:
                unreadable.append(g.index)
            else:
                total = sum(counts.values())
                blocks = " ".join(f"{b}={n}" for b, n in sorted(counts.items()))
                g = replace(g, ecc_dbe_volatile=total,
                            excerpt=f"{g.excerpt} sysfs ras ue: {blocks}".strip())
        out.append(g)
    return out, unreadable


def gather(timeout: float) -> list[GpuReading]:
    """Readings from amd-smi, else rocm-smi. `proc.ToolTimeout` when a tool hangs."""
    if proc.which("amd-smi") is not None:
        listed = proc.run(["amd-smi", "list", "--json"], timeout)
        metric = proc.run(["amd-smi", "metric", "--json"], timeout)
        if metric.returncode != 0:
            raise CheckError(f"amd-smi metric failed (exit {metric.returncode}): "
                             f"{(metric.stderr or metric.stdout).strip()[:200]}")
        return parse_amd_smi(listed.stdout if listed.returncode == 0 else "[]", metric.stdout)
    res = proc.run(["rocm-smi", "--showserial", "--showbus", "--showuniqueid",
                    "--showrasinfo", "all", "--json"], timeout)
    if res.returncode != 0:
        raise CheckError(f"rocm-smi failed (exit {res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()[:200]}")
    return parse_rocm_smi(res.stdout)


class Amd:
    """SPEC D3, D9: amd-smi (else rocm-smi) judged by the same evaluator as NVIDIA's.
    Unsupported on a node with neither the amdgpu driver nor either tool (the runner asks
    `slurm_heal.checks.present.amd` before importing this module)."""

    name = "amd"
    settings = AmdConfig
    modes = AmdConfig().modes
    tool_hang_is_finding = True  # a hung amd-smi/rocm-smi is gpu.tool.hung (D3)

    def gather(self, cfg: CheckConfig, st: dict[str, Any], name: str,
               now: datetime) -> tuple[list[GpuReading], list[int], str]:
        """(readings, the GPUs whose ECC is not readable, the tool)."""
        if proc.which("amd-smi") is None and proc.which("rocm-smi") is None:
            if not os.path.isdir(paths.host_path("/sys/module/amdgpu")):
                raise Unsupported("no amdgpu driver and no amd-smi/rocm-smi on this node")
            raise CheckError("the amdgpu driver is loaded but neither amd-smi nor rocm-smi "
                             "is on PATH")
        readings, unreadable = with_sysfs_ecc(gather(cfg.amd.tool_timeout), paths.host_path)
        tool = "amd-smi" if proc.which("amd-smi") is not None else "rocm-smi"
        return readings, unreadable, tool

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], name: str, now: datetime,
                 seen: tuple[list[GpuReading], list[int], str]
                 ) -> tuple[list[Finding], dict[str, Any]]:
        readings, unreadable, tool = seen
        ac = cfg.amd
        counters, since = state.detector_state(st, "amd_state")
        th = gpu.Thresholds(expected=ac.expected, pcie_replays_per_min=ac.pcie_replays_per_min,
                            thermal_for=ac.thermal_for)
        out = gpu.evaluate(readings, counters, since, now, th, name, "amd", tool)
        serials = sorted({g.serial for g in readings if g.serial})
        update: dict[str, Any] = {"amd_state": {"counters": out.counters, "since": out.since,
                                                "serials": serials}}
        findings = list(out.findings)
        if unreadable:
            # SPEC O6, D3: neither the tool nor the kernel says: cannot tell, never clean
            why = (f"{tool} gives no uncorrectable count and the kernel's RAS counters "
                   f"(/sys/class/drm/card<N>/device/ras) have none")
            update[NOTE] = gpu.ecc_note(unreadable, why)
            findings.append(gpu.ecc_unreadable(
                readings, unreadable, why,
                f"no uncorrectable ECC count for GPU {', '.join(map(str, unreadable))}",
                name, "amd", tool, now))
        return findings, update


DETECTOR = Amd()


def detect(cfg: CheckConfig, st: dict[str, Any], name: str,
           now: datetime) -> tuple[list[Finding], dict[str, Any]]:
    """One run of the detector (gather, then evaluate)."""
    return DETECTOR.evaluate(cfg, st, name, now, DETECTOR.gather(cfg, st, name, now))
