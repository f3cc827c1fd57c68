"""Operator commands from the inbox and requests (a person's or a detector's reason
string), SPEC P2, P4, Q1-Q4, S5, O2."""

from __future__ import annotations

from datetime import datetime

import slurm_heal.policy.cordon as cordon
import slurm_heal.policy.endings as endings
import slurm_heal.policy.lifecycle as lifecycle
from slurm_heal import reasons
from slurm_heal.errors import ReasonError
from slurm_heal.models import (
    Breaker,
    Command,
    Pause,
    Phase,
    Remediation,
    remediation_id,
)
from slurm_heal.policy.escalation import migrate_refused
from slurm_heal.policy.facts import PRE_ACT
from slurm_heal.policy.gates import evidence_hold
from slurm_heal.policy.notices import notice
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import REQUESTABLE_ACTIONS, Action, NodeInfo, Severity


def target(led: Ledger, cmd: Command) -> Remediation | None:
    if cmd.remediation:
        return led.rems.get(cmd.remediation)
    if cmd.node:
        opened = led.open_on(cmd.node)
        return opened[0] if opened else None
    return None


def command(ws: WorkingSet, led: Ledger, cmd: Command) -> None:
    led.consumed.append(cmd.id)
    node = cmd.node or "-"
    if cmd.kind == "reset_breaker":
        led.breaker = Breaker(open=False, reset_by=cmd.by, reset_at=ws.now,
                              why=cmd.reason or "reset by a person")
        led.breaker_changed = True
        led.record(node, "approved", "S5", f"breaker reset by {cmd.by}: automatic "
                   "remediation may start again")
        return
    if cmd.kind in ("pause", "unpause"):
        led.paused = cmd.kind == "pause"
        led.paused_changed = True
        led.pause = Pause(paused=led.paused, by=cmd.by, at=ws.now, reason=cmd.reason)
        led.record(node, "blocked" if led.paused else "approved", "pause",
                   f"{cmd.kind}d by {cmd.by}" + (f" ({cmd.reason})" if cmd.reason else "")
                   + ": " + ("nothing disruptive starts" if led.paused
                              else "work resumes"))
        return
    if cmd.kind == "request":
        waits = request(ws, led, cmd.node or "", cmd.action or Action.NONE, cmd.detector,
                        cmd.request_id, by=cmd.by, person=True, since=cmd.at,
                        text=cmd.reason)
        if waits:  # L3: kept in the inbox until the open one ends (at most the inbox TTL)
            led.consumed.remove(cmd.id)
        return
    rem = target(led, cmd)
    if rem is None or rem.phase.terminal:
        led.record(node, "blocked", "P4", f"{cmd.kind} by {cmd.by} ignored: no open "
                   f"remediation {'for ' + cmd.node if cmd.node else cmd.remediation}")
        return
    who = f"{cmd.by}{cmd.via}"  # P4, O7: who and through which channel
    if cmd.kind in ("approve", "deny") and cmd.generation is not None \
            and cmd.generation != rem.generation:
        # O7: decided from a link or a chat message about another proposal than this
        led.record(rem.node, "blocked", "O7", f"{cmd.kind} by {who} ignored: {rem.id} "
                   "changed since the message it was decided from (another proposal "
                   f"now: {rem.action.value}, {rem.phase.value})", rem)
        return
    if cmd.kind == "approve":
        if rem.phase is not Phase.PROPOSED:
            led.record(rem.node, "blocked", "P2", f"approve by {who} ignored: "
                       f"{rem.id} is already {rem.phase.value}", rem)
            return
        led.step(rem, "approved", "P2:person", f"approved by {who}"
                 + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by,
                 approved_by=cmd.by, approval_rule="P2:person")
    elif cmd.kind == "deny":
        if rem.phase not in (Phase.PROPOSED, Phase.APPROVED):
            led.record(rem.node, "blocked", "P2", f"deny by {who} ignored: {rem.id} "
                       f"is already {rem.phase.value}; use cancel", rem)
            return
        endings.end_and_release(ws, led, rem, "denied", "P2:person", f"denied by {who}"
                                + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by,
                                approval_rule="P2:person")
    elif cmd.kind == "cancel":
        if rem.phase not in PRE_ACT:
            led.record(rem.node, "blocked", "L1", f"cancel by {who} refused: the "
                       f"{rem.action.value} already runs ({rem.phase.value})", rem)
            return
        endings.end_and_release(ws, led, rem, "cancelled", "P4", f"cancelled by {who}"
                                + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by)


def request(ws: WorkingSet, led: Ledger, node_name: str, action: Action, detector: str | None,
            request_id: str | None, *, by: str, person: bool, since: datetime,
            text: str = "") -> bool:
    """A request from a person (inbox) or a detector (reason string), SPEC Q1-Q4.
    True when it waits for the node's open remediation to end (L3)."""
    who = by if person else f"detector {detector or '?'}"
    node = ws.node(node_name)
    if node is None:
        if led.once(notice("req-nonode", node_name, action.value)):
            led.record(node_name, "denied", "Q1", f"request from {who}: no such node")
        return False
    if not person and cordon.unknown_marker(led, node) is not None:
        cordon.unrecorded(led, node)  # I5: a detector does not override a person's node
        return False
    if not person and endings.with_a_person(ws, led, node_name):
        return False  # E1: a detector's request does not override a node handed to a person
    if action not in REQUESTABLE_ACTIONS:
        # SPEC Q2: removal is only ever done by a person; slurm-heal never removes.
        if led.once(notice("q2", node_name, str(detector),
                                  str(request_id), action.value)):
            led.record(node_name, "denied", "Q2",
                       f"request for {action.value} from {who} refused: only reboot, "
                       "rebuild and migrate can be requested; removal is done by a person",
                       action=action)
        return False
    # Q3, L3: this request (its detector and id written as the key always had them)
    sig = (node_name, str(detector), str(request_id), action.value)
    if request_id is not None:
        # SPEC Q3: detector + id = one remediation, whenever it was.
        same = [r for r in led.of_node(node_name)
                if r.detector == detector and r.request_id == request_id]
        if same:
            if led.once(notice("q3", *sig), same[0].id):
                led.record(node_name, "blocked", "Q3", f"request for {action.value} from "
                           f"{who} (id={request_id}) dropped: {same[0].id} already handles "
                           "that detector and request id", action=action)
            return False
    opened = led.open_on(node_name)
    if opened:
        # Without an id, a request is a duplicate only of the open remediation it
        # made itself (same detector); anything else waits for the open one (L3).
        dup = request_id is None and opened[0].detector == detector \
            and opened[0].origin != "alert"
        if led.once(notice("l3", *sig), opened[0].id):
            led.record(node_name, "blocked", "Q3" if dup else "L3",
                       f"request for {action.value} from {who} "
                       + (f"dropped: it is the one {opened[0].id} already handles"
                           if dup else f"waits: {opened[0].id} is already open on this "
                           "node"), action=action)
        return not dup  # L3: a request that waits stays in the inbox until the open one ends
    rid = remediation_id(node_name, "request", detector, request_id, since)
    if rid in led.rems:
        if led.once(notice("q3", *sig), rid):
            led.record(node_name, "blocked", "Q3", f"request for {action.value} from {who} "
                       f"dropped: {rid} already handled this very request "
                       f"({led.rems[rid].phase.value})", action=action)
        return False
    host = ws.ctx(node_name).host
    chosen, rule, why = action, "Q1", f"{action.value} requested by {who}"
    if text:
        why += f" ({text})"
    ev = ws.evidence(node_name)
    if chosen is Action.MIGRATE:
        refused = migrate_refused(ws, led, node_name, host)
        if refused is not None:
            chosen, rule, why = Action.REBUILD, "E3", f"{why}; {refused.why}"
    rem = Remediation(
        id=rid, node=node_name, host=host, pool=ws.pool(node_name), fault="request",
        severity=ev.severity if ev else Severity.WARNING, action=chosen,
        origin="operator" if person else "request", automatic=not person,
        requested_by=by, detector=detector, request_id=request_id, action_rule=rule,
        escalated_from=action if chosen is not action else None,
        alert_first_seen=ev.first_seen if ev else None, created=ws.now, updated=ws.now)
    waits = evidence_hold(ws, led, rem)
    if waits is not None:  # O6: said when the request is taken, not found out later
        why += f"; {waits.why}"
    led.put(rem)
    rem = led.step(rem, "proposed", rule, why)
    if chosen is not action:
        rem = led.step(rem, "escalated", "E3", "migrate needs evidence: rebuild instead")
    lifecycle.advance(ws, led, rem)
    return False


def create_from_reason(ws: WorkingSet, led: Ledger, node: NodeInfo) -> None:
    if not reasons.is_request(node.reason):
        return
    try:
        req = reasons.parse_request(node.reason)
    except ReasonError as exc:
        if led.once(notice("malformed", node.name), node.reason):
            # SPEC O6: the node is held and nothing acts on it: said and notified once.
            led.record(node.name, "alert", "Q1", f"request.malformed: {exc}; the node is "
                       "left as it is")
            led.effect("notify", node.name, None, "notify", topic=node.reason, rule="Q1",
                       reason=f"malformed:{node.name}",
                       why=f"request.malformed: {node.name} is drained by a heal "
                       f"request that does not parse ({exc}): nothing is done and "
                       "the node stays out of service; fix the detector that wrote "
                       f"{node.reason!r}, then scontrol update "
                       f"nodename={node.name} state=resume")
        return
    request(ws, led, node.name, req.action, req.detector, req.request_id,
            by=f"detector:{req.detector or '?'}", person=False,
            since=node.reason_time or ws.now, text=req.text)
