"""What is worth telling people after a cycle (SPEC O3, D7, D8, P2, S5, O2): events
derived from the cycle's facts. Pure: no I/O here (the queue and delivery are in
`slurm_heal.notify`).

Kinds:

* ``alert``: an alert raised on a node (first seen by the controller), with its
  plain-language explanation and its evidence, unchanged (D7);
* ``approval``: a remediation waits for a person's approval, with the command that
  approves it (P2);
* ``outcome``: a remediation ended: done, failed, cancelled, withdrawn, denied;
* ``person``: a node is handed to a person (E1), or a notice the engine sends a person;
* ``support``: an alert whose fault has no action (D8), with its evidence;
* ``breaker``: the circuit breaker opened (S5);
* ``pause``: a person paused or unpaused automation (O2).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict

from slurm_heal.models import Effect, Phase, Plan, Record, Remediation, State
from slurm_heal.sections import EVENT_KINDS as EVENT_KINDS  # what a route may name: its home
from slurm_heal.sections import SEVERITIES as SEVERITIES  # lowest first (issue 21: its home)
from slurm_heal.sources import SITE_SOURCES
from slurm_heal.types import Alert, ClusterView

EventKind = Literal["alert", "approval", "outcome", "person", "support", "breaker", "pause",
                    "incident"]
EVIDENCE_MARK = "Evidence (JSON, as the node check published it):"
LINK_MARK = "Look and decide in the console:"
# SPEC O7: the kinds that need a person (approval, an incident, a lemon's or a hand-over's
# notice, the breaker): each carries a link to the console's page for it.
NEEDS_PERSON: tuple[str, ...] = ("approval", "person", "incident", "breaker")


class Event(Record):
    """One thing to tell people."""

    model_config = ConfigDict(frozen=True)

    id: str  # stable: the same event is queued once
    kind: EventKind
    severity: Literal["info", "warning", "critical"]
    at: datetime
    title: str
    text: str  # plain language
    node: str | None = None
    remediation: str | None = None
    fault: str | None = None
    evidence: tuple[dict[str, Any], ...] = ()  # the alert's evidence, unchanged (D7)
    # SPEC O7: the console's page for the decision this needs (a signed link, made when
    # the event is queued: `slurm_heal.notify.linking`); None without [api] public_url.
    link: str | None = None
    # SPEC O7: an approval's rule (P2) and which proposal it asks about
    # (`Remediation.generation`): a chat button decides that one only.
    rule: str | None = None
    generation: str | None = None

    def body(self) -> str:
        """The message body: the text, the link to decide it (O7), then the evidence as
        JSON (unchanged, D7)."""
        text = self.text
        if self.link:
            text += f"\n\n{LINK_MARK} {self.link}"
        if not self.evidence:
            return text
        return f"{text}\n\n{EVIDENCE_MARK}\n{json.dumps(list(self.evidence), indent=1)}"


def alert_key(alert: Alert) -> str:
    return f"{alert.node}|{alert.fault}|{alert.first_seen.isoformat()}"


def _explain(fault: str) -> str:
    from slurm_heal import catalog
    from slurm_heal.errors import HealError

    try:
        return catalog.load().get(fault).explanation
    except HealError:
        return ""


def alert_events(alerts: Mapping[str, Iterable[Alert]], seen: set[str],
                 now: datetime) -> tuple[list[Event], set[str]]:
    """Alerts not seen before (by node, fault and first seen); the keys active now."""
    from slurm_heal.extra import alert_to_json

    out: list[Event] = []
    active: set[str] = set()
    for node, node_alerts in alerts.items():
        for a in node_alerts:
            key = alert_key(a)
            active.add(key)
            if key in seen:
                continue
            doc = alert_to_json(a)
            explain = _explain(a.fault)
            out.append(Event(
                id=f"alert:{key}", kind="alert", severity=a.severity.value, at=now,
                title=f"{a.fault} on {node} ({a.severity.value}"
                      + (f", from {a.detector})" if a.detector in SITE_SOURCES else ")"),
                text=f"{node}: {a.summary}" + (f"\nWhat it means: {explain}" if explain else ""),
                node=node, fault=a.fault, evidence=tuple(doc.get("evidence") or ())))
    return out, active


def _evidence_of(alerts: Mapping[str, Iterable[Alert]], node: str,
                 fault: str) -> tuple[dict[str, Any], ...]:
    """The evidence of the node's alert for ``fault``, unchanged (D7); () when none."""
    from slurm_heal.extra import alert_to_json

    for a in alerts.get(node, ()):
        if a.fault == fault:
            return tuple(alert_to_json(a).get("evidence") or ())
    return ()


def _rems(state: State) -> dict[str, Remediation]:
    return {r.id: r for r in state.remediations}


def cycle_events(before: State, after: State, plan: Plan, executed: Iterable[Effect],
                 alerts: Mapping[str, Iterable[Alert]], now: datetime) -> list[Event]:
    """Approvals needed, outcomes, hand-offs, support notices, breaker, pause."""
    out: list[Event] = []
    old = _rems(before)
    for rem in plan.updates:
        prev = old.get(rem.id)
        if (rem.phase is Phase.PROPOSED and rem.data.approval_pending
                and (prev is None or not prev.data.approval_pending)):
            out.append(Event(
                id=f"approval:{rem.id}", kind="approval", severity="warning", at=now,
                title=f"approval needed: {rem.action.value} {rem.node} ({rem.fault}"
                      + (f", from {rem.detector})" if rem.detector in SITE_SOURCES else ")"),
                text=(f"{rem.node}: {rem.fault} -> {rem.action.value} waits for a person "
                      f"({rem.approval_rule}). Approve: slurm-heal approve {rem.id}  "
                      f"Deny: slurm-heal deny {rem.id}"),
                node=rem.node, remediation=rem.id, fault=rem.fault,
                evidence=_evidence_of(alerts, rem.node, rem.fault),
                rule=rem.data.approval_pending or rem.approval_rule,
                generation=rem.generation))
        if rem.phase.terminal and (prev is None or not prev.phase.terminal):
            why = rem.steps[-1].why if rem.steps else ""
            sev = "info" if rem.phase in (Phase.DONE, Phase.WITHDRAWN) else "warning"
            out.append(Event(
                id=f"outcome:{rem.id}:{rem.phase.value}", kind="outcome", severity=sev,
                at=now, title=f"{rem.action.value} of {rem.node} {rem.phase.value}",
                text=f"{rem.node}: {rem.action.value} for {rem.fault} {rem.phase.value}: {why}",
                node=rem.node, remediation=rem.id, fault=rem.fault))
    for eff in executed:
        if eff.kind != "notify":
            continue
        if eff.rule == "S7" and eff.reason.startswith("incident:"):
            out.append(_incident_event(eff, after, now))
            continue
        kind: EventKind = "support" if eff.rule == "D8" else "person"
        evidence: tuple[dict[str, Any], ...] = ()
        fault = None
        if kind == "support":
            from slurm_heal.extra import alert_to_json

            for a in alerts.get(eff.node, ()):
                if eff.reason.startswith(f"d8:{eff.node}:{a.fault}:"):
                    fault = a.fault
                    evidence = tuple(alert_to_json(a).get("evidence") or ())
        out.append(Event(
            # by the effect's key (what it is about), never its words (issue 21)
            id=f"{kind}:{eff.key or eff.reason or eff.node}", kind=kind,
            severity="warning", at=now,
            title=(f"support: {fault} on {eff.node}" if kind == "support"
                   else f"{eff.node} needs a person ({eff.rule})"),
            text=f"{eff.node}: {eff.why}", node=eff.node, remediation=eff.remediation,
            fault=fault, evidence=evidence))
    if plan.breaker is not None and plan.breaker.open and not before.breaker.open:
        out.append(Event(
            id=f"breaker:{now.isoformat()}", kind="breaker", severity="critical", at=now,
            title="circuit breaker OPEN: automatic remediation stopped",
            text=f"{plan.breaker.why}. Manual requests still run; reset with "
                 "`slurm-heal reset-breaker` once you have looked (SPEC S5)."))
    if plan.pause is not None:
        p = plan.pause
        word = "paused" if p.paused else "unpaused"
        out.append(Event(
            id=f"pause:{p.at.isoformat()}:{word}", kind="pause", severity="warning", at=now,
            title=f"slurm-heal {word} by {p.by}",
            text=f"{word} by {p.by}" + (f": {p.reason}" if p.reason else "")
                 + ("; nothing disruptive runs until `slurm-heal unpause`" if p.paused
                    else "; automation runs again")))
    return out


def _incident_event(eff: Effect, after: State, now: datetime) -> Event:
    """SPEC S7: one event per incident, for a person and the ticket routes (kind
    ``incident``), with every node's alert and evidence unchanged (D7)."""
    from slurm_heal.incidentstore import INCIDENTS_KEY, load

    iid = eff.reason.removeprefix("incident:")
    inc = load(after.data.get(INCIDENTS_KEY)).get(iid)
    evidence: tuple[dict[str, Any], ...] = ()
    title = f"incident {iid} needs a person (S7)"
    if inc is not None:
        title = (f"incident on {inc.kind} {inc.name}: {len(inc.nodes)} of {inc.size} nodes "
                 f"({', '.join(sorted({a.fault for a in inc.alerts}))})")
        evidence = tuple({"node": a.node, "fault": a.fault, "first_seen":
                          a.first_seen.isoformat(), "evidence": list(a.evidence)}
                         for a in inc.alerts)
    return Event(id=f"incident:{iid}", kind="incident", severity="critical", at=now,
                 title=title, text=eff.why, node=eff.node, evidence=evidence)


def view_alerts(view: ClusterView, now: datetime) -> dict[str, list[Alert]]:
    """The node checks' alerts in the snapshot, by node."""
    from slurm_heal.extra import alerts_from_extra

    return {n.name: alerts_from_extra(n.name, n.extra, now) for n in view.nodes}


def controller_problem(what: str, text: str, now: datetime) -> Event:
    """The controller runs, but a part of it does not (issue 34 item 4, SPEC O1): told to
    the support route once per occurrence, as the daemon logs it."""
    return Event(id=f"controller:{what}:{now.isoformat()}", kind="support",
                 severity="warning", at=now, title=f"slurm-heal controller: {what} unavailable",
                 text=text)
