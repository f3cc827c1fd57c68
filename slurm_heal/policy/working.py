"""The working set of one decide() call (issue 20): the indexes of the store and the
snapshot, built once per call, and the ledger (steps, records, effects, wakes) that
becomes the Plan. Every rule reads the world and writes its outcome through it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_heal import catalog as catalog_mod
from slurm_heal import extra as extra_mod
from slurm_heal import reasons
from slurm_heal.config import Policy
from slurm_heal.errors import CatalogError
from slurm_heal.models import (
    DISRUPTIVE_PHASES,
    TERMINAL_PHASES,
    Decision,
    Effect,
    EffectKind,
    Pause,
    Phase,
    Remediation,
    State,
    Step,
    idempotency_key,
)
from slurm_heal.policy.facts import BUSY_JOB_STATES, NO_CHECK_DATA, NOT_EVIDENCE, is_automatic
from slurm_heal.types import Action, Alert, ClusterView, JobInfo, NodeInfo, Severity


class Working:
    """One decide() call's working set and ledger."""

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

    def explain(self, fault: str) -> str:
        try:
            return self.catalog.get(fault).explanation
        except CatalogError:
            return fault
