"""What `slurm-heal alerts` lists for one node (SPEC D5, D7, Q1, O6): the node checks'
alerts from its Extra, and what holds it out of service when no alert says so — a
request that does not parse (``request.malformed``), our marker or a request with no
alert in Extra (the marker's fault, or ``request``), someone else's DOWN or drain
(``slurm.node_down``/``slurm.node_drain``). One function, so that `alerts`, `status`
and the console's overview (its "N with alerts" and its Alerts column) count the same
(issue 36 item 11).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from slurm_heal import catalog, reasons
from slurm_heal.errors import HealError, ReasonError
from slurm_heal.extra import alerts_from_extra
from slurm_heal.types import Alert, NodeInfo, Severity


def node_alerts(n: NodeInfo, at: datetime,
                found: Sequence[Alert] | None = None) -> list[Alert]:
    """The alerts of node ``n`` at ``at``, as `alerts` lists them; ``found``: the alerts
    of its Extra when the caller has read them already (`extra.read_check_data` at
    ``at``)."""
    if found is None:
        found = alerts_from_extra(n.name, n.extra, at)
    out = list(found)
    if not (n.down or n.drained):
        return out
    problem = reasons.request_problem(n.reason)
    seen = n.reason_time or at
    state = "DOWN" if n.down else "drained"
    if problem:
        # SPEC Q1, O6: a malformed request holds the node and nothing acts on it:
        # an alert that says what is wrong in it, with or without alerts in Extra.
        fault = catalog.load().get("request.malformed")
        out.append(Alert(
            node=n.name, fault=fault.id, severity=fault.severity, detector="slurm",
            summary=f"{state} by a request that does not parse ({problem}): nothing is "
                    f"done; fix the detector, then scontrol update nodename={n.name} "
                    "state=resume",
            first_seen=seen, last_seen=seen))
        return out
    whose = reasons.owner(n.reason)
    if not found and whose in ("ours", "request"):
        # Issue 11: what drained the node is shown even when no alert says so (Extra
        # not writable, the alert cleared while our cordon stays, a detector's request)
        out.append(_drained_without_alert(n, seen, state))
    elif whose in ("slurm", "person"):
        fault = catalog.load().get("slurm.node_down" if n.down else "slurm.node_drain")
        out.append(Alert(
            node=n.name, fault=fault.id, severity=fault.severity, detector="slurm",
            summary=f"{state} by someone else: {n.reason}", first_seen=seen, last_seen=seen))
    return out


def _drained_without_alert(n: NodeInfo, seen: datetime, state: str) -> Alert:
    """A node out of service under our marker or a request, with no alert in Extra."""
    fault, severity = "request", Severity.WARNING
    if reasons.is_ours(n.reason):
        try:
            fault = reasons.parse_marker(n.reason).fault or fault
        except ReasonError:
            pass
    try:
        severity = catalog.load().get(fault).severity
    except HealError:
        pass
    return Alert(node=n.name, fault=fault, severity=severity, detector="slurm",
                 summary=f"{state} by {n.reason!r}: no node check reports a fault on it "
                         "(its Extra field holds no alert)",
                 first_seen=seen, last_seen=seen)
