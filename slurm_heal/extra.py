"""The node's ``Extra`` field as the evidence channel (SPEC I2, D7).

Slurm's ``Extra`` holds arbitrary text; slurm-heal keeps a JSON object there and owns
exactly one key of it, ``slurm_heal``. Other keys (a site's own tooling) are kept as
they are. Layout of our key::

    {"slurm_heal": {"v": 1, "checked_at": "2026-01-05T00:00:00+00:00",
                    "alerts": [{"fault": "gpu.xid.79", "severity": "critical",
                                "summary": "...", "detector": "kernel_log",
                                "first_seen": "...", "last_seen": "...",
                                "evidence": [{"source": "kmsg", "text": "...", "at": "..."}]}],
                    "host": "gpus-0123456789abcdef",      # when the GPU serials are known
                    "machine": {"gpu_serials": ["1654922001234", ...]}}}

Evidence is trimmed (text length, count per alert) so the field stays small; the full
record stays in the node check's own state file.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from slurm_heal.errors import SlurmError
from slurm_heal.types import Alert, Evidence, Severity

KEY = "slurm_heal"
# The machine identity under the node: written by whatever moves a node to other
# hardware (a migrate), as {"host": "...", "previous": "..."}. A key of its own, because
# the node check rewrites KEY on every run and must not lose it.
HOST_KEY = "slurm_heal_host"
VERSION = 1
MAX_EVIDENCE = 3
MAX_TEXT = 400


def parse_extra(raw: str) -> dict[str, Any] | None:
    """Return Extra as a dict when it is a JSON object, else None."""
    raw = (raw or "").strip()
    if not raw or raw in ("(null)", "none", "None"):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _ts(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat()


def _parse_ts(value: Any, fallback: datetime) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return fallback
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return fallback


def alert_to_json(alert: Alert) -> dict[str, Any]:
    ev = []
    for e in alert.evidence[:MAX_EVIDENCE]:
        j = e.to_json()
        j["text"] = j["text"][:MAX_TEXT]
        ev.append(j)
    return {
        "fault": alert.fault,
        "severity": alert.severity.value,
        "summary": alert.summary,
        "detector": alert.detector,
        "first_seen": _ts(alert.first_seen),
        "last_seen": _ts(alert.last_seen),
        "evidence": ev,
    }


def machine_identity(gpu_serials: list[str], instance_id: str = "") -> dict[str, Any] | None:
    """What identifies the hardware under a node for escalation (SPEC E1, E3), so a node
    re-imaged onto the same bad machine is still recognised: ``host`` is derived from
    the GPU serials (the hardware) when known, else Slurm's ``InstanceId`` (23.11+).
    None when neither is known (the node name stays the identity)."""
    import hashlib

    serials = sorted({s.strip() for s in gpu_serials if s.strip()})
    out: dict[str, Any] = {}
    if serials:
        digest = hashlib.sha256(",".join(serials).encode()).hexdigest()[:16]
        out = {"host": f"gpus-{digest}", "gpu_serials": serials}
    if instance_id:
        out.setdefault("host", f"instance-{instance_id}")
        out["instance_id"] = instance_id
    return out or None


def our_section(alerts: list[Alert], checked_at: datetime,
                machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """Our key's value for a set of active alerts. ``machine`` (`machine_identity`) adds
    ``host`` (read by the controller as the machine identity) and ``machine``."""
    out: dict[str, Any] = {"v": VERSION, "checked_at": _ts(checked_at),
                           "alerts": [alert_to_json(a) for a in alerts]}
    if machine:
        out["host"] = machine["host"]
        out["machine"] = {k: v for k, v in machine.items() if k != "host"}
    return out


def alerts_from_extra(node: str, extra: dict[str, Any] | None, now: datetime) -> list[Alert]:
    """The active alerts the node side published in Extra. Malformed entries are skipped."""
    if not extra:
        return []
    ours = extra.get(KEY)
    if not isinstance(ours, dict):
        return []
    out: list[Alert] = []
    for raw in ours.get("alerts") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("fault"), str):
            continue
        try:
            severity = Severity(raw.get("severity", "warning"))
        except ValueError:
            severity = Severity.WARNING
        first = _parse_ts(raw.get("first_seen"), now)
        out.append(Alert(
            node=node,
            fault=raw["fault"],
            severity=severity,
            summary=str(raw.get("summary", "")),
            detector=str(raw.get("detector", "")),
            first_seen=first,
            last_seen=_parse_ts(raw.get("last_seen"), first),
            evidence=tuple(Evidence.from_json(e) for e in raw.get("evidence") or []
                           if isinstance(e, dict)),
        ))
    return out


def with_key(current_raw: str, key: str, value: Any | None) -> str:
    """The new Extra text: ``current_raw`` with top-level ``key`` set to ``value`` (or
    removed when None), every other key kept. Used by the Slurm backends' set_extra.

    Non-JSON text in Extra belongs to someone else and is never overwritten: SlurmError.
    """
    current = parse_extra(current_raw)
    if current is None:
        raise SlurmError(
            "node Extra holds non-JSON text that slurm-heal does not own; "
            f"refusing to overwrite it: {current_raw[:80]!r}"
        )
    new = dict(current)
    if value is None:
        new.pop(key, None)
    else:
        new[key] = value
    return json.dumps(new, separators=(",", ":"), sort_keys=True) if new else ""
