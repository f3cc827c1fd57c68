"""The fault catalog: one data table (`catalog.toml`) read by code, docs and tests.

Deliberately free of pydantic: the node check reads it on every run.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_heal.errors import CatalogError
from slurm_heal.types import Action, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CATALOG_FILE = Path(__file__).with_name("catalog.toml")
_XID_ID = re.compile(r"^gpu\.xid\.(\d+)$")

# NVIDIA's resolution buckets (immediate action) as the Xid catalog names them; UNSPECIFIED
# where the catalog gives guidance text only (Xid 162-172).
BUCKETS = frozenset({
    "IGNORE", "RESTART_APP", "CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW",
    "RESET_GPU", "RESTART_VM", "RESTART_BM", "CHECK_UVM", "XID_154", "WORKFLOW_XID_45",
    "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR", "UNSPECIFIED",
})


@dataclass(frozen=True, slots=True)
class Fault:
    """One kind of failure: id, severity, plain-language explanation, default action."""

    id: str
    severity: Severity
    action: Action
    explanation: str
    cordon: bool = False  # drain as soon as the node check sees it
    record_only: bool = False  # never leads to a disruptive action (D8)
    power_cut: bool = False  # needs the GPU's power cut (E4)
    recovery_action: bool = False  # Xid 154: the driver names the action
    known: bool = True  # False for an Xid the catalog does not list
    # NVIDIA's own words for an Xid, kept next to ours so an operator sees both:
    mnemonic: str = ""
    bucket: str = ""  # resolution bucket, immediate action (e.g. RESET_GPU)
    investigatory: str = ""  # resolution bucket, investigatory action
    nvlink5: bool = False  # Xid 144-150: the message's sub-code decides

    @property
    def gpu_reset(self) -> bool:
        """SPEC E6: NVIDIA's own resolution is a GPU reset (bucket RESET_GPU): with
        ``escalation.gpu_reset`` on, the ladder starts with ``reset_gpu``."""
        return self.bucket == "RESET_GPU"

    @property
    def xid(self) -> int | None:
        m = _XID_ID.match(self.id)
        return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class Catalog:
    faults: dict[str, Fault]
    driver_branch: str
    xid154_recovery: dict[str, Action]

    def get(self, fault_id: str) -> Fault:
        """Return the fault for ``fault_id``.

        An Xid the catalog does not list is a warning with no action: recorded, never
        dropped. Any other unknown id is an error (ids come from our own detectors).
        """
        fault = self.faults.get(fault_id)
        if fault is not None:
            return fault
        m = _XID_ID.match(fault_id)
        if m:
            base = self.faults["gpu.xid.unknown"]
            return Fault(
                id=fault_id,
                severity=base.severity,
                action=base.action,
                explanation=f"Xid {m.group(1)}: " + base.explanation,
                known=False,
            )
        raise CatalogError(f"unknown fault id {fault_id!r} (not in {CATALOG_FILE.name})")

    def __contains__(self, fault_id: object) -> bool:
        return isinstance(fault_id, str) and (
            fault_id in self.faults or bool(_XID_ID.match(fault_id))
        )

    def recovery_action(self, text: str) -> Action | None:
        """Map the recovery action an Xid 154 message names to our action."""
        low = text.strip().lower()
        for name, action in self.xid154_recovery.items():
            if name.lower() == low:
                return action
        return None


def _fault(fid: str, raw: dict[str, Any]) -> Fault:
    try:
        return Fault(
            id=fid,
            severity=Severity(raw["severity"]),
            action=Action(raw.get("action", "none")),
            explanation=str(raw["explanation"]),
            cordon=bool(raw.get("cordon", False)),
            record_only=bool(raw.get("record_only", False)),
            power_cut=bool(raw.get("power_cut", False)),
            recovery_action=bool(raw.get("recovery_action", False)),
            mnemonic=str(raw.get("mnemonic", "")),
            bucket=str(raw.get("bucket", "")),
            investigatory=str(raw.get("investigatory", "")),
            nvlink5=bool(raw.get("nvlink5", False)),
        )
    except (KeyError, ValueError) as exc:
        raise CatalogError(f"{CATALOG_FILE.name}: fault {fid!r}: bad or missing {exc}") from exc


def parse_catalog(data: dict[str, Any]) -> Catalog:
    """Build a Catalog from the parsed TOML document, validating it."""
    faults: dict[str, Fault] = {}
    for fid, raw in data.get("faults", {}).items():
        faults[fid] = _fault(fid, raw)
    for code, raw in data.get("xid", {}).items():
        if not str(code).isdigit():
            raise CatalogError(f"{CATALOG_FILE.name}: xid key {code!r} is not a number")
        fid = f"gpu.xid.{int(code)}"
        if fid in faults:
            raise CatalogError(f"{CATALOG_FILE.name}: duplicate fault id {fid}")
        fault = _fault(fid, raw)
        if fault.bucket not in BUCKETS:
            raise CatalogError(f"{CATALOG_FILE.name}: {fid}: NVIDIA resolution bucket "
                               f"{fault.bucket!r} is missing or unknown (known: "
                               f"{', '.join(sorted(BUCKETS))})")
        faults[fid] = fault
    for f in faults.values():
        if f.record_only and f.action is not Action.NONE:
            raise CatalogError(f"{CATALOG_FILE.name}: {f.id} is record_only but has an action")
        if f.action is Action.REMOVE:
            raise CatalogError(f"{CATALOG_FILE.name}: {f.id}: remove is never automatic (Q2)")
    if "gpu.xid.unknown" not in faults:
        raise CatalogError(f"{CATALOG_FILE.name}: gpu.xid.unknown is required")
    recovery = {str(k): Action(v) for k, v in data.get("xid154_recovery", {}).items()}
    meta = data.get("meta", {})
    return Catalog(faults=faults, driver_branch=str(meta.get("driver_branch", "")),
                   xid154_recovery=recovery)


@functools.lru_cache(maxsize=1)
def load() -> Catalog:
    """The catalog shipped with slurm-heal (parsed once per process)."""
    with CATALOG_FILE.open("rb") as fh:
        return parse_catalog(tomllib.load(fh))
