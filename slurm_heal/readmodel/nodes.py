"""One node's status as `status --json` (``node_status``), the API and the console show
it (SPEC I4, D5): Slurm's state flags, the reason classified as ours (our cordon marker,
parsed), a request (``heal-request:``) or foreign, and the alerts the node side published
in ``Extra`` (and those a person's resume acknowledged, SPEC S8).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from slurm_heal import reasons
from slurm_heal.errors import ReasonError
from slurm_heal.extra import read_check_data
from slurm_heal.types import NodeInfo

# Slurm's base node states; flags (DRAIN, REBOOT_ISSUED, ...) are listed after them.
_BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).isoformat() if value else None


def _reason(node: NodeInfo) -> dict[str, Any] | None:
    if not node.reason:
        return None
    out: dict[str, Any] = {"text": node.reason, "user": node.reason_user or None,
                           "time": _iso(node.reason_time)}
    if reasons.is_ours(node.reason):
        out["kind"] = "ours"
        try:
            marker = reasons.parse_marker(node.reason)
        except ReasonError as exc:
            out["error"] = str(exc)
        else:
            out.update(fault=marker.fault, remediation=marker.remediation, by=marker.by)
    elif reasons.is_request(node.reason):
        out["kind"] = "request"
        try:
            request = reasons.parse_request(node.reason)
        except ReasonError as exc:
            out["error"] = str(exc)  # malformed requests are shown, not hidden
        else:
            out.update(action=request.action.value, detector=request.detector,
                       id=request.request_id)
    else:
        out["kind"] = "foreign"
    return out


def node_status(node: NodeInfo, now: datetime) -> dict[str, Any]:
    """One node's status as a JSON-able dict (the `--json` shape)."""
    check = read_check_data(node.name, node.extra, now)
    alerts = check.alerts
    return {
        "name": node.name,
        "states": sorted(node.states, key=lambda s: (s not in _BASE_STATES, s)),
        "reason": _reason(node),
        "alerts": [{"fault": a.fault, "severity": a.severity.value, "summary": a.summary,
                    "detector": a.detector, "first_seen": _iso(a.first_seen),
                    "last_seen": _iso(a.last_seen)} for a in alerts],
        # SPEC S8: faults a person's resume acknowledged (never acted on)
        "acknowledged": [{"fault": a.fault, "severity": a.severity.value,
                          "summary": a.summary, "first_seen": _iso(a.first_seen)}
                         for a in check.acknowledged],
        "extra_unparsed": node.extra is None,  # Extra holds someone's non-JSON text
        "partitions": list(node.partitions),
        "boot_time": _iso(node.boot_time),
    }
