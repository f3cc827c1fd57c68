"""`slurm-heal status [--json]`: the nodes as slurm-heal sees them (SPEC I4, I2, D5).

For each node: Slurm's state flags; the reason, classified as ours (our cordon marker,
parsed), a request (``heal-request:``), or foreign (someone else's, shown as such); and
the active alerts the node side published in ``Extra``. With no cluster reachable the
Slurm adapter raises SlurmUnreachable and `slurm_heal.cli` prints one line and exits 3.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from slurm_heal import reasons
from slurm_heal.errors import ReasonError
from slurm_heal.extra import alerts_from_extra
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
    alerts = alerts_from_extra(node.name, node.extra, now)
    return {
        "name": node.name,
        "states": sorted(node.states, key=lambda s: (s not in _BASE_STATES, s)),
        "reason": _reason(node),
        "alerts": [{"fault": a.fault, "severity": a.severity.value, "summary": a.summary,
                    "detector": a.detector, "first_seen": _iso(a.first_seen),
                    "last_seen": _iso(a.last_seen)} for a in alerts],
        "extra_unparsed": node.extra is None,  # Extra holds someone's non-JSON text
        "partitions": list(node.partitions),
        "boot_time": _iso(node.boot_time),
    }


def _line(entry: dict[str, Any]) -> str:
    text = f"{entry['name']:<12} {'+'.join(entry['states']):<28}"
    reason = entry["reason"]
    if reason:
        label = {"ours": "heal", "request": "request", "foreign": "foreign"}[reason["kind"]]
        text += f" [{label}] {reason['text']}"
        if reason.get("user"):
            text += f" ({reason['user']})"
    for alert in entry["alerts"]:
        text += f"\n{'':<12} alert {alert['severity']} {alert['fault']}: {alert['summary']}"
    return text


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              envvar="SLURM_CONF", help="The cluster's slurm.conf (default: $SLURM_CONF).")
@click.option("--backend", type=click.Choice(["auto", "cli", "pyslurm", "rest"]),
              default="auto", show_default=True,
              help="How to talk to Slurm (SPEC I3); rest reads SLURM_HEAL_REST_URL and "
                   "SLURM_HEAL_REST_TOKEN_FILE.")
@click.option("--timeout", type=float, default=20.0, show_default=True,
              help="Seconds to wait for Slurm.")
def status(as_json: bool, slurm_conf: str | None, backend: str, timeout: float) -> None:
    """Show the nodes as slurm-heal sees them: state, our reason, alerts."""
    from slurm_heal.slurm import make_client

    client = make_client(backend=backend, slurm_conf=slurm_conf, timeout=timeout)
    now = datetime.now(timezone.utc)
    entries = [node_status(n, now) for n in sorted(client.nodes(), key=lambda n: n.name)]
    if as_json:
        click.echo(json.dumps({"nodes": entries}, indent=2))
        return
    for entry in entries:
        click.echo(_line(entry))
