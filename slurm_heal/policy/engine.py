"""The pure decision core: ``decide(view, state, now, policy) -> Plan`` (ARCHITECTURE).

No I/O, no clock, no randomness: everything comes in as arguments, everything goes out
in the Plan. Same input, same plan, same remediation ids and idempotency keys (SPEC S6),
so two controller replicas deciding on the same snapshot produce one remediation.

One call does, in order:

1. operator commands from ``state.inbox`` (approve, deny, cancel, request,
   reset_breaker, pause, unpause), all consumed;
2. record-only observations: D5 (nodes DOWN/DRAIN for reasons not ours), D8 (alerts
   with no action: recorded and routed to support), malformed request reasons (Q1);
3. every open remediation moves along its life cycle (SPEC L1) as far as the snapshot
   allows: proposed -> approved/denied -> cordoned -> waiting -> draining -> acting ->
   returning -> done, or failed / cancelled / withdrawn (L4);
4. new remediations from alerts (after S1 persistence) and from request reason strings
   (Q1-Q4), with the action chosen by the catalog, E1 escalation and E3 evidence.

Safety gates held before a remediation starts (cordon): recommend-only mode, the global
pause, the breaker (S5, automatic remediations only), the cooldown (S2),
evidence for requests (P1/Q4), reserved migrate spares (E5), the concurrency limit (S3),
one per pool (S4) and pool capacity (Q4). Recommend-only and pause also hold the action
of a started one; the breaker does not (it stops new automatic work, and a half-done
remediation held back would only keep its node drained). A held remediation gets one
``blocked`` record naming the limit, not one per cycle.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from slurm_heal import catalog as catalog_mod
from slurm_heal import extra as extra_mod
from slurm_heal import reasons
from slurm_heal.config import Policy, format_duration
from slurm_heal.errors import CatalogError, ReasonError
from slurm_heal.models import (
    DISRUPTIVE_PHASES,
    NOT_SENT,
    TERMINAL_PHASES,
    Attempt,
    Breaker,
    Command,
    Decision,
    Effect,
    EffectKind,
    Pause,
    Phase,
    Plan,
    Remediation,
    State,
    Step,
    Work,
    idempotency_key,
    remediation_id,
)
from slurm_heal.types import (
    REQUESTABLE_ACTIONS,
    Action,
    Alert,
    ClusterView,
    JobInfo,
    NodeInfo,
    Severity,
)

# How soon to look again while an action runs (the daemon's own interval may be shorter).
POLL_EVERY = timedelta(minutes=1)
# SPEC L1: how many times a failed cordon is sent (one per cycle) before a person looks.
CORDON_TRIES = 3
# L1 (issue 8): how many times a step with no outcome after safety.step_timeout is sent
# again under the same key before it is failed (and, for a cordon, handed to a person).
RESEND_TRIES = 2
PRE_ACT = frozenset({Phase.PROPOSED, Phase.APPROVED, Phase.CORDONED, Phase.WAITING,
                     Phase.DRAINING})
STARTED = frozenset({Phase.CORDONED, Phase.WAITING, Phase.DRAINING})
# Job states that still occupy the node (PENDING jobs do not).
BUSY_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED",
                             "RESIZING", "SIGNALING", "STAGE_OUT"})
# Faults that describe Slurm's own state or the request channel: never evidence (P1).
NOT_EVIDENCE = frozenset({"slurm.node_down", "slurm.node_drain", "request", "request.malformed"})


NO_CHECK_DATA = extra_mod.CheckData()


def _iso(t: datetime) -> str:
    return t.isoformat()


def _parse(t: Any) -> datetime | None:
    if isinstance(t, datetime):
        return t
    if isinstance(t, str):
        try:
            return datetime.fromisoformat(t)
        except ValueError:
            return None
    return None


def host_of(node: NodeInfo | None, name: str) -> str:
    """Machine identity for E1/E3: Extra ``slurm_heal_host.host`` (set by a migrate), else
    ``slurm_heal.host``, else the node name."""
    if node is not None and isinstance(node.extra, dict):
        moved = node.extra.get(extra_mod.HOST_KEY)
        if isinstance(moved, dict) and isinstance(moved.get("host"), str) and moved["host"]:
            return str(moved["host"])
        ours = node.extra.get(extra_mod.KEY)
        if isinstance(ours, dict) and isinstance(ours.get("host"), str) and ours["host"]:
            return str(ours["host"])
    return name


def is_automatic(rem: Remediation) -> bool:
    """S5: automatic = not requested by a person and not approved by a person."""
    return rem.automatic and rem.approved_by is None


def _act_attempts(rem: Remediation) -> list[Attempt]:
    """Acts that were sent (one the controller did not send at all is no attempt, E1/S2)."""
    return [a for a in rem.attempts if a.effect == "act" and not a.detail.startswith(NOT_SENT)]


def _acted_at(rem: Remediation) -> datetime | None:
    acts = _act_attempts(rem)
    return acts[0].started if acts else None


def _ended_at(rem: Remediation) -> datetime | None:
    return rem.phase_times.get(rem.phase.value) if rem.phase.terminal else None


class _Decider:
    """One decide() call's working set. Private; the public surface is `decide`."""

    def __init__(self, view: ClusterView, state: State, now: datetime, policy: Policy,
                 alerts: Mapping[str, Sequence[Alert]] | None,
                 catalog: catalog_mod.Catalog | None = None,
                 checks: Mapping[str, extra_mod.CheckData] | None = None) -> None:
        self.view = view
        self.state = state
        self.now = now
        self.policy = policy
        self.catalog = catalog if catalog is not None else catalog_mod.load()
        self.rems: dict[str, Remediation] = {}
        self.order: list[str] = []
        # The working set, indexed once per call (issue 13): rules look up a node's or a
        # machine's remediations instead of scanning the whole store, so a cycle's work
        # grows with the cluster and the open work, not with closed history.
        self.pos: dict[str, int] = {}
        self.by_node: dict[str, list[str]] = {}
        self.by_host: dict[str, list[str]] = {}
        self.open_by_node: dict[str, dict[str, None]] = {}
        self.started_since = now - policy.safety.breaker_window
        self.recent_starts: dict[str, None] = {}  # automatic, cordoned within the S5 window
        self.started_ids: dict[str, None] = {}  # open, in a disruptive phase (S3, S4, E5)
        self.touched = 0  # remediations the rules looked at (exposed for tests: `decide_counted`)
        unsettled: list[str] = []
        # `index` inlined for the store's records: this one pass is the only work of a
        # call that is linear in the store (docs/store.md bounds the store).
        rems, pos, order, by_node, by_host = (self.rems, self.pos, self.order, self.by_node,
                                              self.by_host)
        since = self.started_since
        for r in state.remediations:
            rid = r.id
            if rid in rems:  # a duplicate id: the general path keeps the last record
                self.index(r)
                continue
            rems[rid] = r
            pos[rid] = len(order)
            order.append(rid)
            by_node.setdefault(r.node, []).append(rid)
            if r.host is not None:
                by_host.setdefault(r.host, []).append(rid)
            if r.phase not in TERMINAL_PHASES:
                self.open_by_node.setdefault(r.node, {})[rid] = None
                if r.phase in DISRUPTIVE_PHASES:
                    self.started_ids[rid] = None
            t = r.phase_times.get("cordoned")
            if t is not None and t >= since and is_automatic(r):
                self.recent_starts[rid] = None
            for a in r.attempts:
                if a.outcome is None:
                    unsettled.append(rid)
                    break
        self.unsettled = tuple(unsettled)
        self.nodes_by_name = {n.name: n for n in view.nodes}
        self.jobs_by_node: dict[str, list[JobInfo]] = {}
        for j in view.jobs:
            for name in j.nodes:
                self.jobs_by_node.setdefault(name, []).append(j)
        self._pools: dict[str, list[NodeInfo]] | None = None
        self.changed: dict[str, None] = {}  # ids changed in this call, in order (a set's speed)
        self.effects: list[Effect] = []
        self.records: list[Decision] = []
        self.consumed: list[str] = []
        self.breaker = state.breaker
        self.breaker_changed = False
        self.paused = state.paused
        self.paused_changed = False
        self.pause: Pause | None = None  # O2: who paused/unpaused, when, why
        self.known = frozenset(r.id for r in state.remediations)  # on record before this call
        self.old_noted: dict[str, Any] = dict(state.data.get("noted") or {})
        self.noted: dict[str, Any] = {}
        self.wakes: list[datetime] = []
        self.alerts: dict[str, list[Alert]] = {}
        # SPEC I2: each node's Extra is validated once here (extra.read_check_data never
        # raises); a node with bad data has none, and a problem that names the field.
        # Issue 20: the caller passes ``checks`` validated once per change of a node's
        # Extra (extra.CheckCache); without it every node's Extra is validated here.
        if checks is None:
            checks = {n.name: extra_mod.read_check_data(n.name, n.extra, now)
                      for n in view.nodes}
        self.check_data: Mapping[str, extra_mod.CheckData] = checks
        if alerts is None:
            alerts = {name: data.alerts for name, data in checks.items() if data.alerts}
        for name, raw in alerts.items():
            if raw and name in self.nodes_by_name:  # only the nodes that have any
                self.alerts[name] = sorted((a for a in raw if a.active),
                                           key=lambda a: (a.fault, a.first_seen))

    # ---------------------------------------------------------------- bookkeeping
    def index(self, rem: Remediation) -> None:
        """Keep the working set's indexes true for ``rem`` (new or updated)."""
        if rem.id not in self.rems:
            self.pos[rem.id] = len(self.order)
            self.order.append(rem.id)
            self.by_node.setdefault(rem.node, []).append(rem.id)
            if rem.host is not None:
                self.by_host.setdefault(rem.host, []).append(rem.id)
        self.rems[rem.id] = rem
        opened = self.open_by_node.setdefault(rem.node, {})
        if rem.phase.terminal:
            opened.pop(rem.id, None)
        else:
            opened[rem.id] = None
        if rem.phase in DISRUPTIVE_PHASES:
            self.started_ids[rem.id] = None
        else:
            self.started_ids.pop(rem.id, None)
        t = rem.phase_times.get("cordoned")
        if is_automatic(rem) and t is not None and t >= self.started_since:
            self.recent_starts[rem.id] = None
        else:
            self.recent_starts.pop(rem.id, None)

    def put(self, rem: Remediation) -> Remediation:
        self.index(rem)
        self.changed.setdefault(rem.id, None)
        return rem

    def of_node(self, name: str) -> list[Remediation]:
        """Every remediation of a node on record (open and closed), oldest first."""
        ids = self.by_node.get(name, ())
        self.touched += len(ids)
        return [self.rems[i] for i in ids]

    def of_host(self, host: str) -> list[Remediation]:
        """Every remediation of a machine on record (E1, E3), oldest first."""
        ids = self.by_host.get(host, ())
        self.touched += len(ids)
        return [self.rems[i] for i in ids]

    def open_on(self, name: str) -> list[Remediation]:
        """The node's open remediations, in store order."""
        ids = sorted(self.open_by_node.get(name, ()), key=self.pos.__getitem__)
        self.touched += len(ids)
        return [self.rems[i] for i in ids]

    def record(self, node: str, phase: str, rule: str, why: str,
               rem: Remediation | None = None, action: Action | None = None) -> None:
        self.records.append(Decision(
            at=self.now, node=node, remediation=rem.id if rem else None,
            action=action if action is not None else (rem.action if rem else Action.NONE),
            phase=phase, rule=rule, why=why))

    def step(self, rem: Remediation, phase: str, rule: str, why: str,
             by: str | None = None, **changes: Any) -> Remediation:
        """Append an audit step (P4), move the phase when ``phase`` is one, and record it."""
        times = dict(rem.phase_times)
        work = rem.data
        update: dict[str, Any] = dict(changes)
        if phase in Phase._value2member_map_:
            update["phase"] = Phase(phase)
            times.setdefault(phase, self.now)
            work = work.but(blocked=None)
        if "data" in update:
            work = work.but(**update.pop("data"))
        update.update(phase_times=times, data=work, updated=self.now,
                      steps=rem.steps + (Step(at=self.now, phase=phase, rule=rule, why=why,
                                                by=by),))
        new = rem.model_copy(update=update)
        self.record(rem.node, phase, rule, why, new)
        return self.put(new)

    def once(self, key: str, value: Any = True) -> bool:
        """True the first time a condition is seen (kept while it holds); once per call too."""
        if key in self.noted and self.noted[key] == value:
            return False
        self.noted[key] = value
        return bool(self.old_noted.get(key) != value)

    def effect(self, kind: EffectKind, node: str, rem: Remediation | None, step: str, n: int = 0,
               same: str | None = None, **fields: Any) -> None:
        """Plan an effect; ``same`` sends an unfinished attempt again under its own key."""
        base = rem.id if rem else "n-" + hashlib.sha256(
            f"{node}|{fields.get('why', '')}".encode()).hexdigest()[:12]
        self.effects.append(Effect(kind=kind, node=node, remediation=rem.id if rem else None,
                                   action=rem.action if rem else Action.NONE,
                                   key=same or idempotency_key(base, step, n),
                                   resend=same is not None, **fields))

    def wake(self, t: datetime) -> None:
        self.wakes.append(t)

    # ---------------------------------------------------------------- views of the world
    def check_of(self, name: str) -> extra_mod.CheckData:
        return self.check_data.get(name, NO_CHECK_DATA)

    def node(self, name: str) -> NodeInfo | None:
        return self.nodes_by_name.get(name)

    def pool_members(self, pool: str) -> list[NodeInfo]:
        """The nodes of a pool (computed once per call, on first use)."""
        if self._pools is None:
            self._pools = {}
            for n in self.view.nodes:
                self._pools.setdefault(self.policy.pool_of(n.partitions, n.features),
                                       []).append(n)
        return self._pools.get(pool, [])

    def pool(self, name: str) -> str:
        n = self.node(name)
        return self.policy.pool_of(n.partitions, n.features) if n else "default"

    def active(self, node: str, fault: str | None = None) -> list[Alert]:
        out = self.alerts.get(node, [])
        return [a for a in out if fault is None or a.fault == fault]

    def fault_action(self, alert: Alert) -> Action:
        """The catalog's action for an alert (Xid 154 names its own; E4 power cut)."""
        try:
            fault = self.catalog.get(alert.fault)
        except CatalogError:
            return Action.NONE
        if fault.record_only:
            return Action.NONE
        action = fault.action
        if fault.recovery_action:
            for ev in alert.evidence:
                named = ev.data.get("recovery_action") if ev.data else None
                if isinstance(named, str):
                    action = self.catalog.recovery_action(named) or action
        if fault.power_cut and self.policy.escalation.power_cycle:
            action = Action.POWER_CYCLE  # SPEC E4 (preview, enabled by policy)
        return action

    def evidence(self, node: str) -> Alert | None:
        """P1: the worst active alert on the node that counts as a confirmed failure: not
        Slurm's own state or the request channel (NOT_EVIDENCE), not a record-only fault
        (D8: low disk space never causes a reboot), and at least a warning."""
        cands = [a for a in self.active(node) if a.fault not in NOT_EVIDENCE
                 and a.severity.rank >= Severity.WARNING.rank and not self.record_only(a.fault)]
        if not cands:
            return None
        return sorted(cands, key=lambda a: (-a.severity.rank, a.fault))[0]

    def record_only(self, fault: str) -> bool:
        try:
            return self.catalog.get(fault).record_only
        except CatalogError:
            return False  # a site's own fault: its severity decides

    def healthy_but_for_us(self, node: str) -> bool:
        """No active alert that would itself keep the node out of service."""
        for a in self.active(node):
            try:
                f = self.catalog.get(a.fault)
            except CatalogError:
                continue
            if f.cordon or a.severity is Severity.CRITICAL:
                return False
        return True

    def foreign(self, node: NodeInfo) -> bool:
        """House style 2 / D5: DOWN or DRAIN for a reason that is neither ours nor a
        request: a person (or Slurm) owns the node, and we never cordon or resume it."""
        return bool((node.down or node.drained) and node.reason
                    and not reasons.is_ours(node.reason)
                    and not reasons.is_request(node.reason))

    def jobs(self, node: str) -> list[int]:
        return sorted(j.job_id for j in self.jobs_by_node.get(node, ())
                      if j.state.upper() in BUSY_JOB_STATES)

    def open_rems(self) -> list[Remediation]:
        ids = sorted((i for opened in self.open_by_node.values() for i in opened),
                     key=self.pos.__getitem__)
        self.touched += len(ids)
        return [self.rems[i] for i in ids]

    # ---------------------------------------------------------------- commands
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

    # ---------------------------------------------------------------- creation
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
        host = host_of(node, node_name)
        chosen, rule, why = action, "Q1", f"{action.value} requested by {who}"
        if text:
            why += f" ({text})"
        ev = self.evidence(node_name)
        if chosen is Action.MIGRATE:
            chosen, rule, why = self.e3(node_name, host, chosen, rule, why)
        rem = Remediation(
            id=rid, node=node_name, host=host, pool=self.pool(node_name), fault="request",
            severity=ev.severity if ev else Severity.WARNING, action=chosen,
            origin="operator" if person else "request", automatic=not person,
            requested_by=by, detector=detector, request_id=request_id, action_rule=rule,
            escalated_from=action if chosen is not action else None,
            alert_first_seen=ev.first_seen if ev else None, created=self.now, updated=self.now)
        self.put(rem)
        rem = self.step(rem, "proposed", rule, why)
        if chosen is not action:
            rem = self.step(rem, "escalated", "E3", "migrate needs evidence: rebuild instead")
        self.advance(rem)
        return False

    def e1(self, host: str, fault: str, action: Action) -> tuple[Action | None, list[str]]:
        """SPEC E1/E2: climb the ladder while the same action already failed to hold.

        Returns the action (None = past the end of the ladder) and the why of each climb.
        """
        esc = self.policy.escalation
        whys: list[str] = []
        while True:
            since = self.now - esc.window
            count = 0
            for r in self.of_host(host):
                acted = _acted_at(r)
                # E2: only executed attempts in the window; cancelled/withdrawn/denied
                # (incl. faults that cleared on their own) never reach an act.
                if (r.host == host and r.fault == fault and r.action is action
                        and r.phase in (Phase.DONE, Phase.FAILED) and acted and acted >= since):
                    count += 1
            if count < esc.repeats:
                return action, whys
            # An action off the ladder (power_cycle, E4; reboot with a ladder that starts
            # at rebuild) has no next step: repeating it ends the ladder too, never a loop.
            i = esc.ladder.index(action) if action in esc.ladder else len(esc.ladder)
            nxt = esc.ladder[i + 1] if i + 1 < len(esc.ladder) else None
            whys.append(f"{fault} came back on {host} after {count} {action.value}s within "
                        f"{format_duration(esc.window)}: "
                        + (f"{nxt.value} instead" if nxt else "the ladder has ended"))
            if nxt is None:
                return None, whys
            action = nxt

    def e3(self, node: str, host: str, action: Action, rule: str,
           why: str) -> tuple[Action, str, str]:
        """SPEC E3: migrate needs a critical alert now or on this machine within 10 days."""
        if any(a.severity is Severity.CRITICAL for a in self.active(node)):
            return action, rule, why
        since = self.now - self.policy.escalation.migrate_evidence_window
        for r in self.of_host(host):
            if r.severity is Severity.CRITICAL and r.created >= since:
                return action, rule, why
        return Action.REBUILD, "E3", (
            f"{why}; migrate needs evidence (a critical alert now or on {host} in the last "
            f"{format_duration(self.policy.escalation.migrate_evidence_window)}) and there is "
            "none: rebuild instead")

    def create_from_alerts(self, node: NodeInfo) -> None:
        name = node.name
        if self.open_by_node.get(name):
            return  # SPEC L3: one remediation at a time per node
        if self.unknown_marker(node) is not None:
            self.unrecorded(node)  # I5: ours, but with no record: a person's to look at
            return
        cands: list[tuple[Alert, Action]] = []
        for a in self.active(name):
            act = self.fault_action(a)
            if act is Action.NONE:
                continue
            hold = self.policy.safety.persistence_for(a.fault, a.severity)
            if self.now - a.first_seen < hold:  # SPEC S1
                until = a.first_seen + hold
                self.wake(until)
                if self.once(f"s1:{name}:{a.fault}:{_iso(a.first_seen)}"):
                    self.record(name, "blocked", "S1", f"{a.fault} must persist "
                                f"{format_duration(hold)} before action (until {_iso(until)})",
                                action=act)
                continue
            cands.append((a, act))
        if not cands:
            return
        ladder = self.policy.escalation.ladder
        alert, action = sorted(cands, key=lambda c: (
            -c[0].severity.rank, -(ladder.index(c[1]) if c[1] in ladder else -1),
            c[0].fault))[0]
        host = host_of(node, name)
        if self.with_a_person(name):
            return
        rid = self.new_id(name, alert)
        if rid is None:
            return
        chosen, whys = self.e1(host, alert.fault, action)
        rule = "P1"
        why = (f"{alert.fault} ({alert.severity.value}) on {name} since "
               f"{_iso(alert.first_seen)}: {alert.summary or self.explain(alert.fault)}; "
               f"catalog action {action.value}")
        if chosen is None:
            if self.once(f"ladder-end:{name}:{alert.fault}"):
                self.record(name, "escalated", "E1", "; ".join(whys) + f"; {name} is handed to "
                            "a person with a removal recommendation (SPEC Q2)", action=Action.REMOVE)
                self.effect("notify", name, None, "notify", why="; ".join(whys), rule="E1")
            return
        e3_why = ""
        if chosen is Action.MIGRATE:
            c2, r2, w2 = self.e3(name, host, chosen, rule, why)
            if c2 is not chosen:
                e3_why = w2.split("; ", 1)[-1] if "; " in w2 else w2
                chosen = c2
        rem = Remediation(
            id=rid, node=name, host=host, pool=self.pool(name), fault=alert.fault,
            severity=alert.severity, action=chosen, origin="alert", automatic=True,
            detector=alert.detector or None, action_rule="E3" if e3_why else (
                "E1" if whys else f"catalog:{alert.fault}"),
            escalated_from=action if chosen is not action else None,
            alert_first_seen=alert.first_seen, created=self.now, updated=self.now,
            data=Work(evidence_fault=alert.fault))
        self.put(rem)
        rem = self.step(rem, "proposed", rule, why)
        for w in whys:
            rem = self.step(rem, "escalated", "E1", w)
        if e3_why:
            rem = self.step(rem, "escalated", "E3", e3_why)
        self.advance(rem)

    def with_a_person(self, name: str) -> bool:
        """SPEC E1: the node's latest remediation handed it to a person: nothing automatic
        (an alert or a detector's request) starts on it until a person acts. Recorded
        once while it holds."""
        past = [r for r in self.of_node(name) if r.phase.terminal]
        last = max(past, key=lambda r: (_ended_at(r) or r.updated, r.id), default=None)
        if last is None or not last.data.handed_to_person:
            return False
        if self.once(f"person:{name}", last.id):
            self.record(name, "blocked", "E1", f"{name} was handed to a person after "
                        f"{last.id}; nothing automatic until a person acts", last)
        return True

    def explain(self, fault: str) -> str:
        try:
            return self.catalog.get(fault).explanation
        except CatalogError:
            return fault

    def new_id(self, name: str, alert: Alert) -> str | None:
        """A deterministic id for a new remediation of this alert, or None when this alert
        instance was already handled (denied, cancelled, or done and not seen since)."""
        since = alert.first_seen
        for _ in range(50):
            rid = remediation_id(name, alert.fault, alert.detector or None, None, since)
            old = self.rems.get(rid)
            if old is None:
                return rid
            end = _ended_at(old) or old.updated
            if old.phase is Phase.FAILED:
                since = end  # L5: the next recommendation follows E1
            elif old.phase in (Phase.DONE, Phase.WITHDRAWN) and alert.last_seen > end:
                since = end  # seen again after it ended: a recurrence
            else:
                return None
        return None

    def create_from_reason(self, node: NodeInfo) -> None:
        if not reasons.is_request(node.reason):
            return
        try:
            req = reasons.parse_request(node.reason)
        except ReasonError as exc:
            if self.once(f"malformed:{node.name}", node.reason):
                self.record(node.name, "alert", "Q1", f"request.malformed: {exc}; the node is "
                            "left as it is")
            return
        self.request(node.name, req.action, req.detector, req.request_id,
                     by=f"detector:{req.detector or '?'}", person=False,
                     since=node.reason_time or self.now, text=req.text)

    # ---------------------------------------------------------------- observations
    def observe(self, node: NodeInfo) -> None:
        name = node.name
        ours_rebooting = reasons.is_slurm_reboot(node.reason) and any(
            r.phase in (Phase.ACTING, Phase.RETURNING)
            for r in self.of_node(name))  # Slurm's reason for the reboot we caused
        if self.foreign(node) and not ours_rebooting:
            fault = "slurm.node_down" if node.down else "slurm.node_drain"
            if self.once(f"d5:{name}", f"{fault}:{node.reason}"):
                self.record(name, "alert", "D5", f"{fault}: {name} is "
                            f"{'DOWN' if node.down else 'drained'} by someone else "
                            f"({node.reason!r}); recorded, never touched by slurm-heal")
        problem = self.check_of(name).problem
        if problem and self.once(f"unreadable:{name}", problem):
            self.record(name, "alert", "I2", f"{extra_mod.UNREADABLE}: the check data in "
                        f"{name}'s Extra cannot be read ({problem}); recorded, and the node "
                        "is treated as having no check data until its check writes it again")
        self.orphan_marker(node)
        for a in self.active(name):
            if a.fault in NOT_EVIDENCE or self.fault_action(a) is not Action.NONE:
                continue
            key = f"d8:{name}:{a.fault}:{_iso(a.first_seen)}"
            if self.once(key):
                why = (f"{a.fault} ({a.severity.value}): {a.summary or self.explain(a.fault)}; "
                       "no action is mapped: recorded and sent to support")
                self.record(name, "notified", "D8", why)
                self.effect("notify", name, None, "notify", why=why, rule="D8",
                            reason=key)

    def orphan_marker(self, node: NodeInfo) -> None:
        """House style 2 / L1: our controller's cordon with no open remediation behind it
        (release() skipped it while a fault was active, or its resume failed). Undo it
        once the node is healthy but for us; until then a person is told, once. A node
        handed to a person (E1) stays as it is: that is theirs to decide."""
        if not node.drained or not reasons.is_ours(node.reason):
            return
        try:
            marker = reasons.parse_marker(node.reason)
        except ReasonError:
            return
        if marker.by != "controller":
            return  # the node check's own drain clears itself (checks/)
        name = node.name
        if self.open_by_node.get(name):
            return
        if any(e.node == name and e.kind in ("release", "resume") for e in self.effects):
            return  # released by a command in this very call
        if self.unknown_marker(node) is not None:
            self.unrecorded(node)
            return
        owner = self.rems.get(marker.remediation or "")
        if owner is not None and (owner.data.handed_to_person or owner.id in self.changed):
            return  # a person's node now, or it ended in this call (release() decided)
        ref = marker.remediation or "?"
        if self.healthy_but_for_us(name):
            self.effect("release", name, None, "release", reason=node.reason, rule="L1",
                        why=f"{name} is still cordoned for {ref}, which is over: undo the "
                        "cordon")
            if self.once(f"orphan:{name}", ref):
                self.record(name, "released", "L1", f"{name} is still cordoned for {ref}, "
                            "which is no longer open, and nothing keeps it out of service: "
                            "the cordon is undone")
        elif self.once(f"orphan:{name}", ref):
            self.record(name, "blocked", "L1", f"{name} is still cordoned for {ref}, which is "
                        "no longer open, and a fault that keeps it out of service is active: "
                        "it stays drained until the fault clears or a person resumes it")

    def unknown_marker(self, node: NodeInfo) -> str | None:
        """SPEC I5 / L5 (issue 8): the remediation named by our controller's marker on a
        node that is out of service, when the store has no record of it (a store set
        aside or started afresh, or a marker without ``rem=``): we do not know what we
        were doing to that node (it may be mid-rebuild), so it is a person's to look at,
        never ours to resume or act on again. None when the marker is on record or the
        node carries no controller marker."""
        if not (node.drained or node.down) or not reasons.is_ours(node.reason):
            return None
        try:
            marker = reasons.parse_marker(node.reason)
        except ReasonError:
            return "?"
        if marker.by != "controller":
            return None
        if marker.remediation and marker.remediation in self.known:
            return None
        return marker.remediation or "?"

    def unrecorded(self, node: NodeInfo) -> None:
        """Hand a node with an unrecorded marker of ours to a person: recorded and
        notified once, nothing released, resumed or started on it until a person acts."""
        ref = self.unknown_marker(node) or "?"
        if self.once(f"unrecorded:{node.name}", ref):
            why = (f"{node.name} is {'DOWN and ' if node.down else ''}drained with our marker "
                   f"for {ref}, but the store has no record of it (set aside or started "
                   "afresh): what slurm-heal was doing to it is unknown, so it is handed to a "
                   "person; nothing is resumed, released or started on it until a person "
                   "resumes the node or asks for an action")
            self.record(node.name, "blocked", "I5", why)
            self.effect("notify", node.name, None, "notify", why=why, rule="I5")

    # ---------------------------------------------------------------- the life cycle
    def release(self, rem: Remediation, what: str) -> None:
        """Undo our cordon (never a reason that is not ours, house style 2)."""
        node = self.node(rem.node)
        if node is not None and node.drained and reasons.is_request(node.reason):
            # The detector's own drain is not ours to undo (house style 2): say who must.
            self.step(rem, rem.phase.value, "Q1", f"{what}: {rem.node} stays drained by the "
                      f"detector's request ({node.reason!r}); a person resumes it: "
                      f"scontrol update nodename={rem.node} state=resume")
            return
        if node is None or not node.drained or not reasons.is_ours(node.reason):
            return
        if not self.healthy_but_for_us(rem.node):
            self.record(rem.node, rem.phase.value, "L1", f"{what}, but {rem.node} stays drained: "
                        "a fault that keeps it out of service is still active", rem)
            return
        self.effect("release", rem.node, rem, "release", reason=node.reason,
                    why=f"{what}: undo the cordon", rule="L4" if what == "withdrawn" else "P4")

    def blocked(self, rem: Remediation, rule: str, why: str) -> Remediation:
        if rem.data.blocked == rule:
            return rem
        rem = self.step(rem, "blocked", rule, why)
        return self.put(rem.model_copy(update={"data": rem.data.but(blocked=rule)}))

    def hold(self, rem: Remediation, rule: str, why: str) -> bool:
        """Record (once) that a limit holds ``rem`` back; always True."""
        self.blocked(rem, rule, why)
        return True

    def gate(self, rem: Remediation, starting: bool) -> bool:
        """The first limit that holds ``rem`` back from its next disruptive step, or None."""
        pol = self.policy
        if pol.mode == "recommend_only":
            return self.hold(rem, "recommend_only", f"recommend-only mode: would "
                                f"{'cordon ' + rem.node + ' and ' if starting else ''}"
                                f"{rem.action.value} now; nothing is executed")
        if self.paused:
            return self.hold(rem, "pause", "slurm-heal is paused: nothing disruptive "
                                "starts until a person unpauses it")
        if not starting:
            # Started remediations finish: the breaker stops new automatic work (S5);
            # holding a half-done one would only keep its node drained longer.
            return False
        node = self.node(rem.node)
        if node is not None and self.foreign(node):
            # SPEC D5 / house style 2: cordoning would replace someone else's reason with
            # our marker, and the resume at the end would undo their drain. Hold until
            # they resume the node (or turn their reason into a heal-request).
            return self.hold(rem, "D5", f"{rem.node} is {'DOWN' if node.down else 'drained'} "
                                f"by someone else ({node.reason!r}): slurm-heal does not "
                                "cordon over it; it waits until that person resumes the node")
        if is_automatic(rem) and self.breaker_gate(rem):
            return True
        ends = [t for r in self.of_node(rem.node) if r.phase.terminal
                and _act_attempts(r) and (t := _ended_at(r)) is not None]
        last_end = max(ends, default=None)
        if last_end is not None and self.now < last_end + pol.safety.cooldown:
            self.wake(last_end + pol.safety.cooldown)
            return self.hold(rem, "S2", f"cooldown: the last remediation on {rem.node} "
                                f"ended at {_iso(last_end)}; the next may start "
                                f"{format_duration(pol.safety.cooldown)} later")
        if rem.origin != "alert":
            enough = (pol.requests.operator_is_evidence if rem.origin == "operator"
                      else pol.requests.detector_is_evidence)
            ev = self.evidence(rem.node)
            if ev is None and not enough:
                return self.hold(rem, "P1", f"no confirmed alert on {rem.node}: a request "
                                    "needs evidence (SPEC P1/Q4); it waits for one")
            if ev is not None and rem.data.evidence_fault is None and not enough:
                rem = self.put(rem.model_copy(update={
                    "data": rem.data.but(evidence_fault=ev.fault)}))
        started = [self.rems[i] for i in sorted(self.started_ids, key=self.pos.__getitem__)
                   if i != rem.id]
        self.touched += len(started)
        spares = pol.escalation.migrate_spares
        if rem.action is Action.MIGRATE and spares is not None:
            moving = sum(1 for r in started if r.action is Action.MIGRATE)
            if moving >= spares:
                return self.hold(rem, "E5", f"all {spares} reserved spare host(s) are in "
                                    "use by other migrations")
        limit = pol.safety.concurrency_limit(len(self.view.nodes))
        if len(started) >= limit:
            return self.hold(rem, "S3", f"{len(started)} remediation(s) already run; the "
                                f"limit for {len(self.view.nodes)} nodes is {limit}")
        pool = self.pool(rem.node)
        if pol.safety.one_per_pool:
            same = [r for r in started if self.pool(r.node) == pool]
            if same:
                return self.hold(rem, "S4", f"pool {pool} already has {same[0].id} on "
                                    f"{same[0].node}: one at a time per pool")
        members = [n for n in self.pool_members(pool) if n.name != rem.node]
        if members:
            busy = {r.node for r in started}
            up = [n for n in members if not (n.down or n.drained) and n.name not in busy]
            need = int(len(members) * pol.capacity.min_available_percent // 100)
            if len(up) < need:
                return self.hold(rem, "Q4", f"pool {pool}: only {len(up)} of {len(members)} "
                                    f"other nodes in service, {need} must stay")
        return False

    def breaker_gate(self, rem: Remediation) -> bool:
        """SPEC S5: N automatic starts within the window open the breaker."""
        pol = self.policy.safety
        if not self.breaker.open:
            since = self.now - pol.breaker_window
            if self.breaker.reset_at and self.breaker.reset_at > since:
                since = self.breaker.reset_at  # a reset starts a fresh count
            self.touched += len(self.recent_starts)
            starts = sum(1 for i in self.recent_starts if i != rem.id
                         and (t := self.rems[i].phase_times.get("cordoned")) is not None
                         and t >= since)
            if starts >= pol.breaker_threshold:
                why = (f"{starts} automatic remediations started within "
                       f"{format_duration(pol.breaker_window)} (threshold "
                       f"{pol.breaker_threshold}): the breaker opens; automatic remediation "
                       "stops until a person resets it")
                # Keep reset_by/reset_at: the count restarts from the last reset.
                self.breaker = self.breaker.model_copy(update={
                    "open": True, "opened_at": self.now, "why": why})
                self.breaker_changed = True
                return self.hold(rem, "S5", why)
        if self.breaker.open:
            return self.hold(rem, "S5", "the breaker is open: automatic remediation waits "
                                "for a person (slurm-heal breaker reset)")
        return False

    def approve(self, rem: Remediation) -> Remediation:
        """SPEC P2: the most specific matching rule decides; the rule is recorded."""
        if rem.origin == "operator":
            return self.step(rem, "approved", "P2:person", f"requested by {rem.requested_by}, "
                             "a person", approved_by=rem.requested_by, approval_rule="P2:person")
        ap = self.policy.approvals
        pool = self.pool(rem.node)
        fault = (rem.data.evidence_fault or rem.fault) if rem.origin == "alert" else rem.fault
        matching = [(i, r) for i, r in enumerate(ap.rules)
                    if r.matches(fault, rem.action, rem.node, pool)]
        strict = {"deny": 2, "manual": 1, "auto": 0}
        if matching:
            # Most specific first; a tie goes to the more cautious mode, then file order.
            i, rule = sorted(matching, key=lambda m: (
                tuple(-x for x in m[1].specificity()), -strict[m[1].mode], m[0]))[0]
            mode, rid = rule.mode, f"P2:approvals[{i}]"
        else:
            mode, rid = ap.default, "P2:default"
        if rem.data.approval_pending == rid and mode == "manual":
            return rem
        if mode == "auto":
            return self.step(rem, "approved", rid, f"auto-approved by {rid} for "
                             f"{fault} / {rem.action.value} on {rem.node}", approval_rule=rid)
        if mode == "deny":
            rem = self.step(rem, "denied", rid, f"{rid} denies {rem.action.value} for {fault} "
                            f"on {rem.node}", approval_rule=rid)
            self.release(rem, "denied")
            return rem
        rem = self.step(rem, "proposed", rid, f"waits for a person: slurm-heal approve "
                        f"{rem.node} (or deny)", approval_rule=rid)
        return self.put(rem.model_copy(update={"data": rem.data.but(approval_pending=rid)}))

    def advance(self, rem: Remediation) -> None:
        """Move one remediation as far as this snapshot allows."""
        node = self.node(rem.node)
        if node is None:
            if rem.phase in PRE_ACT:
                self.step(rem, "cancelled", "L3", f"{rem.node} is no longer in Slurm")
            return
        ev = rem.data.evidence_fault
        # Check data that cannot be read is no news, not a cleared alert (SPEC I2, L4).
        unreadable = self.check_of(rem.node).problem
        if rem.phase in PRE_ACT and ev and not self.active(rem.node, ev) and not unreadable:
            rem = self.step(rem, "withdrawn", "L4", f"{ev} cleared on {rem.node} before the "
                            f"{rem.action.value} ran: the recommendation is withdrawn")
            self.release(rem, "withdrawn")
            return
        if rem.phase is Phase.PROPOSED:
            rem = self.approve(rem)
            if rem.phase is not Phase.APPROVED:
                return
        if rem.phase is Phase.APPROVED:
            if self.gate(rem, starting=True):
                return
            rem = self.rems[rem.id]
            self.effect("cordon", rem.node, rem, "cordon", why="no new jobs", rule="L1",
                        reason=reasons.format_marker(rem.fault, rem.id, "controller",
                                                     f"for {rem.action.value}"))
            self.step(rem, "cordoned", "L1", f"drain {rem.node} (no new jobs) before the "
                      f"{rem.action.value}")
            return  # the next cycle sees the drain take effect
        if rem.phase in STARTED:
            self.wait_and_drain(rem, node)
            return
        if rem.phase is Phase.ACTING:
            self.acting(rem)
            return
        if rem.phase is Phase.RETURNING:
            self.returning(rem, node)

    def wait_and_drain(self, rem: Remediation, node: NodeInfo) -> None:
        """SPEC P3 + L1: wait for jobs (at most max_wait), evict at the limit, then act."""
        if not node.drained:
            self.cordon_again(rem)
            return
        if self.taken_over(rem, node):
            return
        jobs = self.jobs(rem.node)
        w = self.policy.waiting
        start = rem.phase_times.get("cordoned", self.now)
        limit = start + w.max_wait if w.max_wait is not None else None
        if jobs:
            ids = ", ".join(str(j) for j in jobs)
            if rem.phase is Phase.CORDONED:
                rem = self.step(rem, "waiting", "P3", f"{len(jobs)} job(s) still run on "
                                f"{rem.node} ({ids}); waiting "
                                + (f"until {_iso(limit)} at most" if limit else
                                   "for them to end (never interrupted)"))
            if limit is None:
                return
            signal_due = bool(w.signal) and not rem.data.signalled \
                and self.now >= limit - w.signal_lead
            last_evict = rem.data.evict_at
            evict_due = self.now >= limit and (
                not rem.data.evict_n
                or (last_evict is not None and self.now >= last_evict + w.evict_every))
            # O2 / house style 8 (issue 8): pause and recommend-only hold signalling and
            # eviction too, not only the start and the act.
            if (signal_due or evict_due) and self.gate(rem, starting=False):
                self.wake(self.now + POLL_EVERY)
                return
            rem = self.rems[rem.id]
            if w.signal and not rem.data.signalled and self.now >= limit - w.signal_lead:
                self.effect("signal_jobs", rem.node, rem, "signal", signal=w.signal, rule="P3",
                            why=f"checkpoint before the wait limit at {_iso(limit)}")
                rem = self.step(rem, "waiting", "P3", f"sent {w.signal} to job(s) {ids} so they "
                                f"can checkpoint before {_iso(limit)}", data={"signalled": True})
            elif w.signal and not rem.data.signalled:
                self.wake(limit - w.signal_lead)
            if self.now < limit:
                self.wake(limit)
                return
            n = rem.data.evict_n
            last = rem.data.evict_at
            if n == 0 or (last is not None and self.now >= last + w.evict_every):
                self.evict(rem, ids, n)
            self.wake(self.now + w.evict_every)
            return
        if self.gate(rem, starting=False):
            return
        rem = self.rems[rem.id]
        if any(a.key == idempotency_key(rem.id, "act", 0) for a in rem.attempts):
            return  # SPEC S6: never twice
        self.effect("act", rem.node, rem, "act", 0, rule="L1",
                    why=f"{rem.action.value} {rem.node}")
        self.step(rem, "acting", "L1", f"no jobs left on {rem.node}: {rem.action.value} it")
        self.wake(self.now + POLL_EVERY)

    def evict(self, rem: Remediation, ids: str, n: int) -> None:
        """SPEC P3 (issue 8, defect 5): eviction try ``n`` (0-based) at the wait limit,
        bounded: ``evict_tries`` requeues (or cancels), then as many cancels when policy
        allows (``cancel_when_stuck``); jobs still there after that end the remediation
        failed with a person (the node stays cordoned, the S3/S4 slot is freed)."""
        w = self.policy.waiting
        tries = w.evict_tries
        then_cancel = w.at_limit == "requeue" and w.cancel_when_stuck
        total = tries * (2 if then_cancel else 1)
        evictions = [a for a in rem.attempts if a.effect in ("requeue_jobs", "cancel_jobs")]
        failed = [a for a in evictions if a.outcome == "failed"]
        note = (f"; the last {failed[-1].effect.split('_')[0]} failed: {failed[-1].detail}"
                if failed and failed[-1].detail else "")
        if n >= total:
            rem = self.step(rem, "failed", "P3", f"job(s) {ids} still run on {rem.node} after "
                            f"{n} eviction tries{note}; {rem.node} stays cordoned",
                            data={"handed_to_person": True})
            self.hand_to_person(rem, "P3", f"job(s) {ids} on {rem.node} could not be evicted "
                                f"({n} tries{note}): a person decides (requeue or cancel "
                                f"them, or cancel {rem.id}); {rem.node} stays cordoned")
            return
        how = "cancel" if w.at_limit == "cancel" or n >= tries else "requeue"
        kind: EffectKind = "cancel_jobs" if how == "cancel" else "requeue_jobs"
        self.effect(kind, rem.node, rem, how, n, rule="P3",
                    why=f"wait limit {format_duration(w.max_wait or timedelta())} passed")
        self.step(rem, "draining", "P3", f"the wait limit passed: {how} job(s) {ids} (try "
                  f"{n + 1} of {total}){note}",
                  data={"evict_n": n + 1, "evict_at": self.now})

    def taken_over(self, rem: Remediation, node: NodeInfo) -> bool:
        """House style 2 / D5 (issue 8): someone else drained (or downed) the node with a
        reason of their own after our cordon and before the act. Nothing disruptive runs
        on it (no signal, no eviction, no act): the remediation is held, recorded once
        and a person is told once. It goes on when our marker is back; when that person
        resumes the node, cordon_again() cancels it (the node is theirs)."""
        if not self.foreign(node):
            return False
        if rem.data.blocked != "D5":
            why = (f"{rem.node} was {'set DOWN' if node.down else 'drained'} by someone else "
                   f"({node.reason!r}) before the {rem.action.value} ran: nothing disruptive "
                   f"runs on it; {rem.id} is held until that person resumes the node "
                   "(the remediation is then cancelled) or cancels it")
            self.blocked(rem, "D5", why)
            n = sum(1 for a in rem.attempts if a.key.startswith(f"{rem.id}:notify-held:"))
            self.effect("notify", rem.node, rem, "notify-held", n, why=why, rule="D5")
        self.wake(self.now + POLL_EVERY)
        return True

    def cordon_again(self, rem: Remediation) -> None:
        """SPEC L1: the node is not drained although the remediation started. Our cordon
        is in flight (wait), failed (send it again, at most CORDON_TRIES in all), or was
        applied and a person resumed the node since (cancel: it is theirs now). Never a
        remediation that waits forever holding its S3/S4 slot."""
        cordons = [a for a in rem.attempts if a.effect == "cordon"]
        last = cordons[-1] if cordons else None
        sent_now = any(e.kind == "cordon" and e.remediation == rem.id for e in self.effects)
        if sent_now:
            pass  # cordoned in this very decide() call (a command or a new request)
        elif last is None or last.outcome == "failed":
            n = len(cordons)
            if n < CORDON_TRIES and self.gate(rem, starting=False):
                self.wake(self.now + POLL_EVERY)
                return  # O2: a paused controller sends no cordon either
            if n >= CORDON_TRIES:
                rem = self.step(rem, "failed", "L1", f"{rem.node} could not be drained after "
                                f"{n} tries" + (f" ({last.detail})" if last and last.detail
                                                 else ""), data={"handed_to_person": True})
                self.hand_to_person(rem, "L1", f"slurm-heal could not drain {rem.node}: a "
                                    "person must look; nothing automatic on it until then")
                return
            self.effect("cordon", rem.node, rem, "cordon", n, rule="L1",
                        why="no new jobs" + (" (again: the last cordon failed)" if n else ""),
                        reason=reasons.format_marker(rem.fault, rem.id, "controller",
                                                     f"for {rem.action.value}"))
            if n:
                self.record(rem.node, rem.phase.value, "L1", f"cordon of {rem.node} failed"
                            + (f" ({last.detail})" if last and last.detail else "")
                            + f": try {n + 1} of {CORDON_TRIES}", rem)
        elif last.outcome is None and self.now >= last.started + self.policy.safety.step_timeout:
            # L1 (issue 8): recorded, but the controller stopped before it ran (or before
            # it recorded the outcome). A drain with our marker is safe to send again under
            # the same key; at most RESEND_TRIES times, then a person looks.
            tmo = format_duration(self.policy.safety.step_timeout)
            if last.resent >= RESEND_TRIES:
                rem = self.step(rem, "failed", "L1", f"the cordon of {rem.node} was recorded "
                                f"but never reported an outcome ({last.resent + 1} sends, "
                                f"{tmo} each)", data={"handed_to_person": True})
                self.hand_to_person(rem, "L1", f"slurm-heal could not drain {rem.node} (its "
                                    "cordon never reported an outcome): a person must look; "
                                    "nothing automatic on it until then")
                return
            if self.gate(rem, starting=False):
                self.wake(self.now + POLL_EVERY)
                return
            self.effect("cordon", rem.node, rem, "cordon", same=last.key, rule="L1",
                        why="no new jobs (again, same key: the last cordon never reported an "
                        "outcome)", reason=reasons.format_marker(
                            rem.fault, rem.id, "controller", f"for {rem.action.value}"))
            self.record(rem.node, rem.phase.value, "L1", f"the cordon of {rem.node} has had no "
                        f"outcome for {tmo} (the controller stopped before it ran?): sent again "
                        f"with the same key ({last.resent + 2} of {RESEND_TRIES + 1})", rem)
        elif last.outcome == "ok":
            # Our drain took effect and the node is in service again: someone resumed it.
            self.step(rem, "cancelled", "L1", f"{rem.node} was resumed by someone else after "
                      "our cordon: the remediation is cancelled (the node is theirs now)")
            return
        self.wake(self.now + POLL_EVERY)  # in flight: the next snapshot shows the drain

    def settle(self, rem: Remediation) -> None:
        """L1 / house style (issue 8): every attempt recorded before it ran gets an outcome
        within a bound. An attempt still without one ``safety.step_timeout`` after it was
        recorded means the controller stopped between recording and acting (SIGTERM,
        kill -9, OOM, an exception). What happens depends on the step:

        * ``act``: polled by its key while the remediation is open (acting(): the
          provider is asked first and the act is re-sent under the same key only when it
          never saw it); left on a finished remediation, it is marked failed (unknown).
        * ``cordon``: sent again under the same key while the node is not drained
          (cordon_again()); otherwise settled from the node: drained with our marker for
          this remediation = ok, else failed.
        * ``notify``: sent again under the same key (at most RESEND_TRIES times).
        * ``signal_jobs`` / ``requeue_jobs`` / ``cancel_jobs``: failed, never re-sent
          blindly; eviction is tried again (new key, bounded) while jobs remain.
        * ``resume`` / ``release``: failed, never re-sent: the node's reason may have
          changed since; the cordon sweep (orphan_marker) or a person takes it from there.
        """
        tmo = self.policy.safety.step_timeout
        node = self.node(rem.node)
        settled: dict[str, tuple[str, str]] = {}
        for a in rem.attempts:
            if a.outcome is not None or a.effect == "poll":
                continue
            due = a.started + tmo
            if self.now < due:
                self.wake(due)
                continue
            why = f"no outcome {format_duration(tmo)} after it was recorded"
            if a.effect == "act":
                if not rem.phase.terminal:
                    continue  # acting() polls it by its key
                settled[a.key] = ("failed", f"{why}; the remediation is over: outcome unknown")
            elif a.effect == "cordon":
                if rem.phase in STARTED and node is not None and not node.drained:
                    continue  # cordon_again() sends it again under the same key
                mine = (node is not None and node.drained and reasons.is_ours(node.reason)
                        and f"rem={rem.id}" in node.reason)
                settled[a.key] = ("ok", f"{why}; {rem.node} is drained with our marker") \
                    if mine else ("failed", f"{why}; not sent again: the remediation went on")
            elif a.effect == "notify":
                if a.resent < RESEND_TRIES:
                    last = rem.steps[-1].why if rem.steps else rem.id
                    self.effect("notify", rem.node, rem, "notify", same=a.key, rule="L1",
                                why=f"(sent again: the notice was recorded but never sent) "
                                f"{last}")
                    continue
                settled[a.key] = ("failed", f"{why}; sent {a.resent + 1} times")
            else:
                settled[a.key] = ("failed", f"{why} (the controller stopped before it ran?); "
                                  f"{a.effect} is not sent again blindly")
        if not settled:
            return
        attempts = tuple(a.model_copy(update={"outcome": settled[a.key][0],
                                              "finished": self.now,
                                              "detail": settled[a.key][1]})
                         if a.key in settled else a for a in rem.attempts)
        self.put(rem.model_copy(update={"attempts": attempts}))
        for key, (outcome, detail) in settled.items():
            self.record(rem.node, rem.phase.value, "L1", f"step {key} settled as {outcome}: "
                        f"{detail}", rem)

    def acting(self, rem: Remediation) -> None:
        act_key = idempotency_key(rem.id, "act", 0)
        seen = [a for a in rem.attempts if a.effect in ("act", "poll")]
        if not any(a.key == act_key for a in seen):
            node = self.node(rem.node)
            if node is not None and self.taken_over(rem, node):
                return
            if self.gate(rem, starting=False):
                self.wake(self.now + POLL_EVERY)
                return  # O2: paused: the act is not sent (again) either
            # Recorded before it runs: no Attempt means it never ran; ask again, same key.
            self.effect("act", rem.node, rem, "act", 0, rule="L1",
                        why=f"{rem.action.value} {rem.node}")
            self.wake(self.now + POLL_EVERY)
            return
        # The daemon writes a poll's answer onto the act Attempt itself; a store that
        # records polls as Attempts of their own works too: the last final answer counts.
        finals = [a for a in seen if a.outcome in ("ok", "failed")]
        if not finals:
            started = rem.phase_times.get("acting") or _acted_at(rem) or self.now
            limit = started + self.policy.safety.act_timeout
            if self.now >= limit:
                # SPEC L5: the outcome is unknown, so it is neither retried nor escalated
                # to another automatic action: the node stays cordoned, a person decides.
                tmo = format_duration(self.policy.safety.act_timeout)
                rem = self.step(rem, "failed", "L5", f"the {rem.action.value} of {rem.node} "
                                f"did not finish within {tmo} (safety.act_timeout); its "
                                f"outcome is unknown; {rem.node} stays cordoned",
                                data={"handed_to_person": True})
                self.hand_to_person(rem, "L5", f"the {rem.action.value} of {rem.node} did not "
                                    f"finish within {tmo}: its outcome is unknown; {rem.node} "
                                    "stays cordoned and is handed to a person (never retried "
                                    "automatically)")
                return
            self.wake(limit)
            polls = sum(1 for a in rem.attempts if a.effect == "poll")
            self.effect("poll", rem.node, rem, "poll", polls, ref=act_key, rule="S6",
                        why=f"is the {rem.action.value} of {rem.node} finished?")
            self.wake(self.now + POLL_EVERY)
            return
        latest = finals[-1]
        if latest.outcome == "ok":
            done = latest.finished or self.now
            self.step(rem, "returning", "L5", f"the {rem.action.value} finished; waiting for "
                      f"{rem.node} to come back and pass its health check",
                      data={"act_done": done})
            self.wake(self.now + POLL_EVERY)
            return
        if latest.detail.startswith(NOT_SENT):
            # House style 2 (issue 8, defect 11): someone else took the node over between
            # our snapshot and the act; nothing ran. Not an E1 failure: a person decides.
            why = latest.detail[len(NOT_SENT):]
            rem = self.step(rem, "failed", "D5", f"the {rem.action.value} of {rem.node} was not "
                            f"sent: {why}", data={"handed_to_person": True})
            self.hand_to_person(rem, "D5", f"the {rem.action.value} of {rem.node} was not sent "
                                f"({why}): the node is with that person now; nothing "
                                "automatic on it until a person acts")
            return
        self.fail(rem, "L5", f"the {rem.action.value} failed"
                  + (f": {latest.detail}" if latest.detail else ""))

    def returning(self, rem: Remediation, node: NodeInfo) -> None:
        done = rem.data.act_done or rem.updated
        acted = _acted_at(rem) or done
        rebooting = node.down or reasons.slurm_rebooting(node.states)
        back = (node.boot_time is not None and node.boot_time > acted) or not rebooting
        checked = self.check_of(node.name).checked_at
        # The check that counts is one that ran on the node as it is now: after the boot
        # our action caused (the check at boot often runs before the provider reports
        # the operation finished), else after the action started.
        since = node.boot_time if node.boot_time is not None and node.boot_time > acted \
            else acted
        # SPEC L5: the node check always leaves checked_at (an empty alert list when
        # healthy); no check data at all passes only with safety.health_check=if_present.
        if checked is None:
            health_ran = self.policy.safety.health_check == "if_present"
        else:
            health_ran = checked >= since
        limit = done + self.policy.safety.return_timeout
        if back and health_ran:
            bad = [a for a in self.active(rem.node)
                   if a.last_seen > since and (a.severity is Severity.CRITICAL
                                               or a.fault == rem.data.evidence_fault)]
            restarted = any(t is not None and t > acted
                            for t in (node.boot_time, node.slurmd_start_time))
            if bad and not restarted and self.now < limit:
                # A cloud or BMC may report the reboot done once it accepted it, before
                # the node went down: a check that ran in between still sees the fault
                # from before the reboot. Not a failure until the node has restarted
                # (boot or slurmd start after the action) or the return timeout passes.
                self.wake(min(limit, self.now + POLL_EVERY))
                return
            if bad:
                self.fail(rem, "L5", f"after the {rem.action.value} the health check still "
                          f"sees {', '.join(sorted({a.fault for a in bad}))}")
                return
            out = node.drained or node.down
            # Slurm may replace our marker with its own reboot reason (ReturnToService
            # 0/1): that boot is the one our action caused, so it is ours to clear.
            # A reboot still pending or under way (REBOOT_REQUESTED/ISSUED) is not the one
            # our finished action caused: someone asked Slurm for another one.
            ours = reasons.is_ours(node.reason) or (
                reasons.is_slurm_reboot(node.reason) and node.boot_time is not None
                and node.boot_time > acted and not reasons.slurm_rebooting(node.states))
            if out and ours:
                self.effect("resume", rem.node, rem, "resume", reason=node.reason, rule="L5",
                            why="health check passed")
            self.step(rem, "done", "L5", f"{rem.node} is back and passed its health check"
                      + ("; resumed" if out and ours else
                         "" if not out else "; its reason is not ours: not resumed"))
            return
        if self.now >= limit:
            self.fail(rem, "L5", f"{rem.node} did not come back healthy within "
                      f"{format_duration(self.policy.safety.return_timeout)}")
            return
        self.wake(min(limit, self.now + POLL_EVERY))

    def fail(self, rem: Remediation, rule: str, why: str) -> None:
        """L5: the remediation ends failed; the next recommendation follows E1. A failed
        last step of the ladder ends with a person, never a loop."""
        ladder = self.policy.escalation.ladder
        # An action off the ladder has no next step either (E1 "never a loop").
        top = (rem.action is Action.MIGRATE or rem.action not in ladder
               or rem.action is ladder[-1])
        if top:
            rem = self.step(rem, "failed", rule, why + f"; {rem.node} stays cordoned",
                            data={"handed_to_person": True})
            self.hand_to_person(rem, "E1", f"{rem.action.value} did not fix {rem.node}: it "
                                "stays cordoned and is handed to a person with a removal "
                                "recommendation (slurm-heal never removes, Q2)")
            return
        rem = self.step(rem, "failed", rule, why + "; the next recommendation follows E1")
        self.effect("notify", rem.node, rem, "notify", why=why, rule=rule)
        if self.evidence(rem.node) is None:
            self.release(rem, "failed with no alert left")

    def hand_to_person(self, rem: Remediation, rule: str, msg: str) -> None:
        """The end of automatic work on a node: an ``escalated`` step and a notification.
        The remediation carries ``handed_to_person``; nothing automatic starts on the node
        until a person acts (E1)."""
        self.step(rem, "escalated", rule, msg)
        self.effect("notify", rem.node, rem, "notify", why=msg, rule=rule)

    # ---------------------------------------------------------------- the fold
    def run(self) -> Plan:
        for cmd in sorted(self.state.inbox, key=lambda c: (c.at, c.id)):
            if cmd.kind == "validate":
                continue  # the validation flow's (slurm_heal.validation.service), SPEC V1
            self.command(cmd)
        # Only a node with an alert, a reason, or out of service has anything to observe
        # or start (every rule below returns at once for the others): a healthy node of a
        # 100k-node cluster costs one look here, nothing more (issue 13).
        # Check data that cannot be read is recorded too (I2).
        nodes = sorted((n for n in self.view.nodes
                        if n.reason or n.down or n.drained or self.alerts.get(n.name)
                        or self.check_of(n.name).problem),
                       key=lambda n: n.name)
        for rid in self.unsettled:
            if any(a.outcome is None for a in self.rems[rid].attempts):
                self.settle(self.rems[rid])
        for node in nodes:
            self.observe(node)
        for rem in sorted(self.open_rems(), key=lambda r: (r.created, r.id)):
            if not self.rems[rem.id].phase.terminal:
                self.advance(self.rems[rem.id])
        for node in nodes:
            self.create_from_reason(node)
        for node in nodes:
            self.create_from_alerts(node)
        effects = self.effects
        if self.policy.mode == "recommend_only":
            effects = [e for e in effects if e.kind == "notify"]
        data: dict[str, Any] | None = None
        if self.noted != self.old_noted:
            data = {**self.state.data, "noted": self.noted}
        return Plan(
            updates=tuple(self.rems[i] for i in self.changed),
            effects=tuple(effects),
            records=tuple(self.records),
            consumed=tuple(self.consumed),
            breaker=self.breaker if self.breaker_changed else None,
            next_wake=min(self.wakes) if self.wakes else None,
            paused=self.paused if self.paused_changed else None,
            pause=self.pause,
            data=data,
        )


def decide(view: ClusterView, state: State, now: datetime, policy: Policy,
           alerts: Mapping[str, Sequence[Alert]] | None = None, *,
           catalog: catalog_mod.Catalog | None = None,
           checks: Mapping[str, extra_mod.CheckData] | None = None) -> Plan:
    """Decide what happens next. Pure: no I/O, no clock, no randomness (ARCHITECTURE).

    ``alerts`` overrides the alerts read from each node's Extra (simulate passes its
    own). ``catalog``: the fault catalog (the controller and simulate pass the one they
    loaded; omitted, the shipped one is loaded once per process). ``checks``: each
    node's validated check data (`extra.CheckCache`, once per change of its Extra);
    omitted, every node's Extra is validated here. The same arguments always give the
    same Plan, ids and keys (SPEC S6).
    """
    return _Decider(view, state, now, policy, alerts, catalog, checks).run()


def decide_counted(view: ClusterView, state: State, now: datetime, policy: Policy,
                   alerts: Mapping[str, Sequence[Alert]] | None = None) -> tuple[Plan, int]:
    """`decide`, plus how many stored remediations its rules looked at (issue 13).

    The count is what a cycle's work is made of beyond the one pass that indexes the
    store: the open remediations, and the history of the nodes and machines a rule asks
    about (E1, E3, S2, L3). It must not grow with closed history elsewhere in the store;
    the tests hold it to that. (The indexing pass itself is linear in the store, whose
    size the daemon's retention bounds: docs/store.md.)
    """
    d = _Decider(view, state, now, policy, alerts)
    plan = d.run()
    return plan, d.touched
