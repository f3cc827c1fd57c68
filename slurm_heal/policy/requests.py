"""Operator commands from the inbox and requests (a person's or a detector's reason
string), SPEC P2, P4, Q1-Q4, S5, O2."""

from __future__ import annotations

from datetime import datetime

from slurm_heal import reasons
from slurm_heal.config import format_duration
from slurm_heal.errors import ReasonError
from slurm_heal.models import (
    Breaker,
    Command,
    Pause,
    Phase,
    Remediation,
    idempotency_key,
    remediation_id,
)
from slurm_heal.policy.escalation import migrate_refused
from slurm_heal.policy.facts import PRE_ACT
from slurm_heal.policy.gates import evidence_hold
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.lifecycle import Lifecycle
from slurm_heal.types import REQUESTABLE_ACTIONS, Action, NodeInfo, Severity


class Requests(Lifecycle):
    """Commands and requests."""

    def target(self, cmd: Command) -> Remediation | None:
        if cmd.remediation:
            return self.rems.get(cmd.remediation)
        if cmd.node:
            opened = self.open_on(cmd.node)
            return opened[0] if opened else None
        return None

    def command(self, cmd: Command) -> None:
        self.consumed.append(cmd.id)
        node = cmd.node or "-"
        if cmd.kind == "reset_breaker":
            self.breaker = Breaker(open=False, reset_by=cmd.by, reset_at=self.now,
                                   why=cmd.reason or "reset by a person")
            self.breaker_changed = True
            self.record(node, "approved", "S5", f"breaker reset by {cmd.by}: automatic "
                        "remediation may start again")
            return
        if cmd.kind in ("pause", "unpause"):
            self.paused = cmd.kind == "pause"
            self.paused_changed = True
            self.pause = Pause(paused=self.paused, by=cmd.by, at=self.now, reason=cmd.reason)
            self.record(node, "blocked" if self.paused else "approved", "pause",
                        f"{cmd.kind}d by {cmd.by}" + (f" ({cmd.reason})" if cmd.reason else "")
                        + ": " + ("nothing disruptive starts" if self.paused
                                  else "work resumes"))
            return
        if cmd.kind == "request":
            waits = self.request(cmd.node or "", cmd.action or Action.NONE, cmd.detector,
                                 cmd.request_id, by=cmd.by, person=True, since=cmd.at,
                                 text=cmd.reason)
            if waits:  # L3: kept in the inbox until the open one ends (at most the inbox TTL)
                self.consumed.remove(cmd.id)
            return
        rem = self.target(cmd)
        if rem is None or rem.phase.terminal:
            self.record(node, "blocked", "P4", f"{cmd.kind} by {cmd.by} ignored: no open "
                        f"remediation {'for ' + cmd.node if cmd.node else cmd.remediation}")
            return
        if cmd.kind == "approve":
            if rem.phase is not Phase.PROPOSED:
                self.record(rem.node, "blocked", "P2", f"approve by {cmd.by} ignored: "
                            f"{rem.id} is already {rem.phase.value}", rem)
                return
            self.step(rem, "approved", "P2:person", f"approved by {cmd.by}"
                      + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by,
                      approved_by=cmd.by, approval_rule="P2:person")
        elif cmd.kind == "deny":
            if rem.phase not in (Phase.PROPOSED, Phase.APPROVED):
                self.record(rem.node, "blocked", "P2", f"deny by {cmd.by} ignored: {rem.id} "
                            f"is already {rem.phase.value}; use cancel", rem)
                return
            rem = self.step(rem, "denied", "P2:person", f"denied by {cmd.by}"
                            + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by,
                            approval_rule="P2:person")
            self.release(rem, "denied")
        elif cmd.kind == "cancel":
            if rem.phase not in PRE_ACT:
                self.record(rem.node, "blocked", "L1", f"cancel by {cmd.by} refused: the "
                            f"{rem.action.value} already runs ({rem.phase.value})", rem)
                return
            rem = self.step(rem, "cancelled", "P4", f"cancelled by {cmd.by}"
                            + (f": {cmd.reason}" if cmd.reason else ""), by=cmd.by)
            self.release(rem, "cancelled")

    def request(self, node_name: str, action: Action, detector: str | None,
                request_id: str | None, *, by: str, person: bool, since: datetime,
                text: str = "") -> bool:
        """A request from a person (inbox) or a detector (reason string), SPEC Q1-Q4.
        True when it waits for the node's open remediation to end (L3)."""
        who = by if person else f"detector {detector or '?'}"
        node = self.node(node_name)
        if node is None:
            if self.once(f"req-nonode:{node_name}:{action.value}"):
                self.record(node_name, "denied", "Q1", f"request from {who}: no such node")
            return False
        if not person and self.unknown_marker(node) is not None:
            self.unrecorded(node)  # I5: a detector does not override a person's node
            return False
        if not person and self.with_a_person(node_name):
            return False  # E1: a detector's request does not override a node handed to a person
        if action not in REQUESTABLE_ACTIONS:
            # SPEC Q2: removal is only ever done by a person; slurm-heal never removes.
            if self.once(f"q2:{node_name}:{detector}:{request_id}:{action.value}"):
                self.record(node_name, "denied", "Q2",
                            f"request for {action.value} from {who} refused: only reboot, "
                            "rebuild and migrate can be requested; removal is done by a person",
                            action=action)
            return False
        sig = f"{node_name}:{detector}:{request_id}:{action.value}"
        if request_id is not None:
            # SPEC Q3: detector + id = one remediation, whenever it was.
            same = [r for r in self.of_node(node_name)
                    if r.detector == detector and r.request_id == request_id]
            if same:
                if self.once(f"q3:{sig}", same[0].id):
                    self.record(node_name, "blocked", "Q3", f"request for {action.value} from "
                                f"{who} (id={request_id}) dropped: {same[0].id} already handles "
                                "that detector and request id", action=action)
                return False
        opened = self.open_on(node_name)
        if opened:
            # Without an id, a request is a duplicate only of the open remediation it
            # made itself (same detector); anything else waits for the open one (L3).
            dup = request_id is None and opened[0].detector == detector \
                and opened[0].origin != "alert"
            if self.once(f"l3:{sig}", opened[0].id):
                self.record(node_name, "blocked", "Q3" if dup else "L3",
                            f"request for {action.value} from {who} "
                            + (f"dropped: it is the one {opened[0].id} already handles"
                               if dup else f"waits: {opened[0].id} is already open on this "
                               "node"), action=action)
            return not dup  # L3: a request that waits stays in the inbox until the open one ends
        rid = remediation_id(node_name, "request", detector, request_id, since)
        if rid in self.rems:
            if self.once(f"q3:{sig}", rid):
                self.record(node_name, "blocked", "Q3", f"request for {action.value} from {who} "
                            f"dropped: {rid} already handled this very request "
                            f"({self.rems[rid].phase.value})", action=action)
            return False
        host = self.ctx(node_name).host
        chosen, rule, why = action, "Q1", f"{action.value} requested by {who}"
        if text:
            why += f" ({text})"
        ev = self.evidence(node_name)
        if chosen is Action.MIGRATE:
            refused = migrate_refused(self, node_name, host)
            if refused is not None:
                chosen, rule, why = Action.REBUILD, "E3", f"{why}; {refused.why}"
        rem = Remediation(
            id=rid, node=node_name, host=host, pool=self.pool(node_name), fault="request",
            severity=ev.severity if ev else Severity.WARNING, action=chosen,
            origin="operator" if person else "request", automatic=not person,
            requested_by=by, detector=detector, request_id=request_id, action_rule=rule,
            escalated_from=action if chosen is not action else None,
            alert_first_seen=ev.first_seen if ev else None, created=self.now, updated=self.now)
        waits = evidence_hold(self, rem)
        if waits is not None:  # O6: said when the request is taken, not found out later
            why += f"; {waits.why}"
        self.put(rem)
        rem = self.step(rem, "proposed", rule, why)
        if chosen is not action:
            rem = self.step(rem, "escalated", "E3", "migrate needs evidence: rebuild instead")
        self.advance(rem)
        return False

    def advance(self, rem: Remediation) -> None:
        """SPEC P1/Q4, O6: a request held for want of evidence waits for it before it is
        put to anyone's approval (a person is not asked to approve what cannot run), is
        recorded and notified once, and waits at most ``requests.evidence_wait``. The
        evidence is asked directly (issue 32 item 5): a pause, someone else's drain, an
        incident, the breaker or a cooldown holding the request too never hide it, nor
        stop the wait's bound."""
        if rem.origin != "alert" and rem.phase in (Phase.PROPOSED, Phase.APPROVED) \
                and self.node(rem.node) is not None:
            hold = evidence_hold(self, rem)
            if hold is not None:
                self.wait_for_evidence(rem, hold)
                return
        super().advance(rem)

    def wait_for_evidence(self, rem: Remediation, hold: Hold) -> None:
        wait = self.policy.requests.evidence_wait
        deadline = rem.created + wait
        if self.now >= deadline:
            rem = self.step(rem, "withdrawn", "P1", f"no confirmed alert on {rem.node} within "
                            f"{format_duration(wait)} (requests.evidence_wait): the "
                            f"{rem.action.value} request is withdrawn")
            self.release(rem, "withdrawn")
            return
        if rem.data.blocked != "P1":
            # Once per remediation: a person's approve while it waits unblocks it, and the
            # next look (in this call or a later one) holds it again without a second notice
            # under the same key (S6).
            told = idempotency_key(rem.id, "notify-evidence", 0)
            if not any(a.key == told for a in rem.attempts) \
                    and not any(e.key == told for e in self.effects):
                who = rem.requested_by if rem.origin == "operator" else \
                    f"detector {rem.detector}"
                self.effect("notify", rem.node, rem, "notify-evidence", rule="P1",
                            why=f"{rem.action.value} of {rem.node} requested by {who} "
                            f"{hold.why}")
        self.blocked(rem, hold)
        self.wake(deadline)

    def create_from_reason(self, node: NodeInfo) -> None:
        if not reasons.is_request(node.reason):
            return
        try:
            req = reasons.parse_request(node.reason)
        except ReasonError as exc:
            if self.once(f"malformed:{node.name}", node.reason):
                # SPEC O6: the node is held and nothing acts on it: said and notified once.
                self.record(node.name, "alert", "Q1", f"request.malformed: {exc}; the node is "
                            "left as it is")
                self.effect("notify", node.name, None, "notify", topic=node.reason, rule="Q1",
                            reason=f"malformed:{node.name}",
                            why=f"request.malformed: {node.name} is drained by a heal "
                                f"request that does not parse ({exc}): nothing is done and "
                                "the node stays out of service; fix the detector that wrote "
                                f"{node.reason!r}, then scontrol update "
                                f"nodename={node.name} state=resume")
            return
        self.request(node.name, req.action, req.detector, req.request_id,
                     by=f"detector:{req.detector or '?'}", person=False,
                     since=node.reason_time or self.now, text=req.text)
