"""The two values every rule of one decide() call works on (issue 20, 33), passed
explicitly:

* `WorkingSet`: the frozen inputs (the snapshot, the store as loaded, the time, the
  policy, the catalog, each node's check data and alerts) and their indexes, a context
  per node resolved once. Rules read it; nothing in it changes what the call decides
  after it is built (its caches only remember what was looked up).
* `Ledger`: what the call writes: the remediations as they stand now (the store's
  index, forked: `Records`), the steps, records, effects and wakes, the commands
  consumed, the breaker, the pause, the notices and the incidents. It becomes the Plan.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import slurm_heal.policy.facts as facts
import slurm_heal.policy.sitealerts as sitealerts
from slurm_heal import catalog as catalog_mod
from slurm_heal import extra as extra_mod
from slurm_heal.components import Shared
from slurm_heal.config import Policy
from slurm_heal.incidentstore import INCIDENTS_KEY
from slurm_heal.incidentstore import load as load_incidents
from slurm_heal.models import (
    Decision,
    Effect,
    EffectKind,
    Incident,
    Mark,
    Pause,
    Phase,
    RecordPhase,
    Remediation,
    State,
    Step,
    idempotency_key,
)
from slurm_heal.policy.facts import BUSY_JOB_STATES, NO_CHECK_DATA, PHASES, host_of
from slurm_heal.policy.notices import Notice
from slurm_heal.policy.records import Records
from slurm_heal.sources import nhc
from slurm_heal.types import Action, Alert, ClusterView, JobInfo, NodeInfo

_NAME = operator.attrgetter("name")
_OUT = frozenset({"DOWN", "DRAIN"})


def node_key(node: str, rule: str, topic: str) -> str:
    """The base of the idempotency key of an effect no remediation owns (a notice, the
    release of an orphaned cordon): the node, the rule and what the effect is about,
    never its words, so rewording a message changes no key (issue 21). A remediation's
    effects are keyed by its id (models.idempotency_key), which stores hold."""
    return "n-" + hashlib.sha256(f"{node}|{rule}|{topic}".encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class NodeContext:
    """One node as the rules of one call see it: looked up once, by name."""

    name: str
    node: NodeInfo | None  # None: not in the snapshot
    check: extra_mod.CheckData  # its validated check data (I2)
    alerts: list[Alert]  # its active alerts, by fault and first seen
    host: str  # the machine under it (E1, E3): `host_of`
    pool: str  # its pool (S4, Q4, P2)


class WorkingSet:
    """One decide() call's inputs and their indexes (read by the rules, never written)."""

    def __init__(self, view: ClusterView, state: State, now: datetime, policy: Policy,
                 alerts: Mapping[str, Sequence[Alert]] | None = None, *,
                 catalog: catalog_mod.Catalog,
                 checks: Mapping[str, extra_mod.CheckData] | None = None) -> None:
        self.view = view
        self.state = state
        self.now = now
        self.policy = policy
        self.catalog = catalog  # an input (issue 33): decide() opens no file
        # The passes over every node run in C (map, zip, compress), not in Python: at
        # 100,000 nodes a Python loop is a good part of a quiet cycle (issue 20).
        self.names = list(map(_NAME, view.nodes))
        self.nodes_by_name = dict(zip(self.names, view.nodes, strict=True))
        self._jobs: dict[str, list[JobInfo]] | None = None  # by node, on first use
        self.contexts: dict[str, NodeContext] = {}  # each node the rules looked at
        self._pools: dict[str, list[NodeInfo]] | None = None
        self.alerts: dict[str, list[Alert]] = {}
        # SPEC S7: the topology, read on first use (policy/incidents.topology_of).
        self.topology_read = False
        self.topology: Shared | None = None  # with the node check's domains (issue 37)
        # SPEC I2: each node's Extra is validated once here (extra.read_check_data never
        # raises); a node with bad data has none, and a problem that names the field.
        # Issue 20: the caller passes ``checks`` validated once per change of a node's
        # Extra (extra.CheckCache); without it every node's Extra is validated here.
        if checks is None:
            checks = {n.name: extra_mod.read_check_data(n.name, n.extra, now)
                      for n in view.nodes}
        self.check_data: Mapping[str, extra_mod.CheckData] = checks
        flagged = checks.flagged if isinstance(checks, extra_mod.CheckMap) else tuple(
            name for name, data in checks.items() if data.alerts or data.problem)
        # The nodes whose check data cannot be read (I2), recorded as observations.
        self.unreadable = [name for name in flagged if checks[name].problem]
        if alerts is None:
            alerts = {name: checks[name].alerts for name in flagged if checks[name].alerts}
        for name, raw in alerts.items():
            if raw and name in self.nodes_by_name:  # only the nodes that have any
                self.alerts[name] = sorted((a for a in raw if a.active),
                                           key=lambda a: (a.fault, a.first_seen))
        self._add_site_alerts()

    def _add_site_alerts(self) -> None:
        """SPEC D13: the site's own alerts beside the node check's (`policy.sitealerts`)."""
        site = sitealerts.site_alerts(self.state, self.nodes_by_name, self.policy, self.now,
                                      self.catalog, self.with_reason_or_out)
        for name, more in site.items():
            self.alerts[name] = sorted([*self.alerts.get(name, []), *more],
                                       key=lambda a: (a.fault, a.first_seen))

    def with_reason_or_out(self) -> set[str]:
        """The nodes with a reason, DOWN or drained: something for the rules to observe."""
        nodes = self.view.nodes
        out = set(itertools.compress(self.names, map(operator.attrgetter("reason"), nodes)))
        out.update(itertools.compress(self.names, map(operator.not_, map(
            _OUT.isdisjoint, map(operator.attrgetter("states"), nodes)))))
        return out

    def ctx(self, name: str) -> NodeContext:
        """The node as the rules see it in this call, resolved once (issue 20)."""
        got = self.contexts.get(name)
        if got is None:
            node = self.nodes_by_name.get(name)
            got = NodeContext(
                name=name, node=node, check=self.check_data.get(name, NO_CHECK_DATA),
                alerts=self.alerts.get(name, []), host=host_of(node, name),
                pool=self.policy.pool_of(node.partitions, node.features) if node
                else "default")
            self.contexts[name] = got
        return got

    def check_of(self, name: str) -> extra_mod.CheckData:
        return self.ctx(name).check

    def node(self, name: str) -> NodeInfo | None:
        return self.ctx(name).node

    def pool_members(self, pool: str) -> list[NodeInfo]:
        """The nodes of a pool (computed once per call, on first use)."""
        if self._pools is None:
            pools: dict[str, list[NodeInfo]] = {}
            if self.policy.pools.by == "feature":
                for n in self.view.nodes:
                    pools.setdefault(self.policy.pool_of(n.partitions, n.features),
                                     []).append(n)
            else:  # Policy.pool_of's first partition, inlined: one look per node
                for n in self.view.nodes:
                    pools.setdefault(n.partitions[0] if n.partitions else "default",
                                     []).append(n)
            self._pools = pools
        return self._pools.get(pool, [])

    def pool(self, name: str) -> str:
        return self.ctx(name).pool

    def active(self, node: str, fault: str | None = None) -> list[Alert]:
        out = self.ctx(node).alerts
        return [a for a in out if fault is None or a.fault == fault]

    def fault_action(self, alert: Alert) -> Action:
        """The catalog's action for an alert (Xid 154 names its own; E4 power cut)."""
        return facts.fault_action(self.catalog, self.policy.escalation.power_cycle, alert,
                                  self.policy.escalation.gpu_reset)

    def evidence(self, node: str) -> Alert | None:
        """P1: the worst active alert on the node that counts as a confirmed failure."""
        return facts.evidence(self.catalog, self.active(node))

    def record_only(self, fault: str) -> bool:
        return facts.record_only(self.catalog, fault)

    def healthy_but_for_us(self, node: str) -> bool:
        """No active alert that would itself keep the node out of service."""
        return not facts.keeps_out(self.catalog, self.active(node))

    def foreign(self, node: NodeInfo) -> bool:
        """House style 2 / D5: DOWN or DRAIN for a reason that is neither ours nor a
        request: a person (or Slurm) owns the node, and we never cordon or resume it."""
        return facts.foreign(node) and not nhc.taken_over(node, self.policy.sources.nhc)

    def jobs(self, node: str) -> list[int]:
        if self._jobs is None:
            self._jobs = {}
            for j in self.view.jobs:
                for name in j.nodes:
                    self._jobs.setdefault(name, []).append(j)
        return sorted(j.job_id for j in self._jobs.get(node, ())
                      if j.state.upper() in BUSY_JOB_STATES)

    def explain(self, fault: str) -> str:
        return facts.explain(self.catalog, fault)


class Ledger:
    """What one decide() call writes: the remediations as they stand, the steps,
    records, effects and wakes, and the rest of the Plan."""

    def __init__(self, state: State, now: datetime, policy: Policy,
                 records: Records | None = None) -> None:
        self.now = now  # the time of every step and record written
        # The store's records indexed (issue 13): kept between cycles by the caller
        # (issue 20: ``records``, the index of the last cycle's store), else built here.
        if records is None or records.source is not state.remediations:
            records = Records.of(state.remediations, records)
        self.ix = records.fork(now - policy.safety.breaker_window)
        self.rems = self.ix.rems
        # (kind, remediation id or node) of each effect planned in this call, and
        # ("undo", node) for a release or resume: asked per node, not by a scan.
        self.planned: set[tuple[str, str]] = set()
        self.changed: dict[str, None] = {}  # ids changed in this call, in order (a set's speed)
        self.effects: list[Effect] = []
        self.records: list[Decision] = []
        self.consumed: list[str] = []
        self.breaker = state.breaker
        self.breaker_changed = False
        self.paused = state.paused
        self.paused_changed = False
        self.pause: Pause | None = None  # O2: who paused/unpaused, when, why
        self.old_noted: dict[str, Any] = dict(state.data.get("noted") or {})
        self.noted: dict[str, Any] = {}
        self.wakes: list[datetime] = []
        # SPEC S7: the incidents on record, changed in this call by policy/incidents.
        # (Validated on first use: a quiet cycle with no related alert never reads them.)
        self._incidents: dict[str, Incident] | None = None
        raw = state.data.get(INCIDENTS_KEY)
        self.incidents_raw: list[Any] = raw if isinstance(raw, list) else []
        self.incidents_changed = False

    @property
    def incidents(self) -> dict[str, Incident]:
        """The incidents on record by id (SPEC S7), read once per call on first use."""
        if self._incidents is None:
            self._incidents = load_incidents(self.incidents_raw)
        return self._incidents

    @property
    def any_open_incident(self) -> bool:
        """Whether the store has an open incident, asked without reading them all."""
        if self._incidents is not None:
            return any(i.open for i in self._incidents.values())
        return any(isinstance(i, dict) and i.get("state", "open") == "open"
                   for i in self.incidents_raw)

    def put(self, rem: Remediation) -> Remediation:
        self.ix.put(rem)
        self.changed.setdefault(rem.id, None)
        return rem

    @property
    def touched(self) -> int:
        """Stored remediations the rules looked at (`decide_counted`)."""
        return self.ix.looked

    def of_node(self, name: str) -> list[Remediation]:
        """Every remediation of a node on record (open and closed), oldest first."""
        return self.ix.of_node(name)

    def of_host(self, host: str) -> list[Remediation]:
        """Every remediation of a machine on record (E1, E3), oldest first."""
        return self.ix.of_host(host)

    def open_on(self, name: str) -> list[Remediation]:
        """The node's open remediations, in store order."""
        return self.ix.open_on(name)

    def open_rems(self) -> list[Remediation]:
        return self.ix.open_all()

    def record(self, node: str, phase: RecordPhase, rule: str, why: str,
               rem: Remediation | None = None, action: Action | None = None,
               mark: Mark | None = None) -> None:
        # Built from our own typed values: not validated again (issue 20: the costliest
        # part of a cycle that creates remediations).
        self.records.append(Decision.model_construct(
            at=self.now, node=node, remediation=rem.id if rem else None,
            action=action if action is not None else (rem.action if rem else Action.NONE),
            phase=phase, rule=rule, why=why, mark=mark))

    def step(self, rem: Remediation, phase: RecordPhase, rule: str, why: str,
             by: str | None = None, mark: Mark | None = None,
             **changes: Any) -> Remediation:
        """Append an audit step (P4), move the phase when ``phase`` is one, and record it
        (a ``blocked`` step with the ``mark`` of the hold it records)."""
        times = dict(rem.phase_times)
        work = rem.data
        update: dict[str, Any] = dict(changes)
        flags: dict[str, Any] = update.pop("data", {})
        if phase in PHASES:
            update["phase"] = Phase(phase)
            times.setdefault(phase, self.now)
            if work.blocked is not None or work.hold is not None:
                flags = {"blocked": None, "hold": None, **flags}
        if flags:
            work = work.but(**flags)
        update.update(phase_times=times, data=work, updated=self.now,
                      steps=rem.steps + (Step.model_construct(
                          at=self.now, phase=phase, rule=rule, why=why, by=by, mark=mark),))
        new = rem.model_copy(update=update)
        self.record(rem.node, phase, rule, why, new, mark=mark)
        return self.put(new)

    def once(self, told: Notice, value: Any = True) -> bool:
        """True the first time a condition is seen (kept while it holds); once per call too.
        Kept in the store under the notice's key (`notices.Notice.key`)."""
        key = told.key
        if key in self.noted and self.noted[key] == value:
            return False
        self.noted[key] = value
        return bool(self.old_noted.get(key) != value)

    def effect(self, kind: EffectKind, node: str, rem: Remediation | None, step: str, n: int = 0,
               same: str | None = None, topic: str = "", **fields: Any) -> None:
        """Plan an effect; ``same`` sends an unfinished attempt again under its own key.
        One no remediation owns is keyed by `node_key` on ``topic`` (what it is about:
        the fault, the marker's remediation), never on its ``why``."""
        base = rem.id if rem else node_key(node, str(fields.get("rule", "")), topic)
        self.effects.append(Effect(kind=kind, node=node, remediation=rem.id if rem else None,
                                   action=rem.action if rem else Action.NONE,
                                   key=same or idempotency_key(base, step, n),
                                   step=step, resend=same is not None, **fields))
        self.planned.add((kind, rem.id if rem else f"node:{node}"))
        if kind in ("release", "resume"):
            self.planned.add(("undo", node))

    def wake(self, t: datetime) -> None:
        self.wakes.append(t)
