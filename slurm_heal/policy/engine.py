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
pause, an incident on the node's switch/block/rack and the settle wait of a related
fault (S7), the breaker (S5, automatic remediations only), the cooldown (S2),
evidence for requests (P1/Q4), reserved migrate spares (E5), the concurrency limit (S3),
one per pool (S4), one per switch/block/rack (S7) and pool capacity (Q4). Recommend-only and pause also hold the action
of a started one; the breaker does not (it stops new automatic work, and a half-done
remediation held back would only keep its node drained). A held remediation gets one
``blocked`` record naming the limit, not one per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurm_heal import catalog as catalog_mod
from slurm_heal import extra as extra_mod
from slurm_heal.config import Policy
from slurm_heal.models import Plan, State
from slurm_heal.policy import incidents
from slurm_heal.policy.facts import host_of, is_automatic
from slurm_heal.policy.intake import Intake
from slurm_heal.policy.records import Records
from slurm_heal.types import Alert, ClusterView

__all__ = ["Effort", "Records", "decide", "decide_counted", "decide_effort", "host_of",
           "is_automatic"]


class _Decider(Intake):
    """One decide() call. Private; the public surface is `decide`."""

    def run(self) -> Plan:
        for cmd in sorted(self.state.inbox, key=lambda c: (c.at, c.id)):
            if cmd.kind == "validate":
                continue  # the validation flow's (slurm_heal.validation.service), SPEC V1
            if cmd.kind == "close_incident":
                incidents.close(self, cmd)  # SPEC S7
                continue
            self.command(cmd)
        # Only a node with an alert, a reason, or out of service has anything to observe
        # or start (every rule below returns at once for the others): a healthy node of a
        # 100k-node cluster costs one look here, nothing more (issue 13).
        # Check data that cannot be read is recorded too (I2).
        names = self.with_reason_or_out()
        names.update(name for name, alerts in self.alerts.items() if alerts)
        names.update(name for name in self.unreadable if name in self.nodes_by_name)
        nodes = [self.nodes_by_name[name] for name in sorted(names)]
        for rid in self.ix.unsettled_ids():
            if any(a.outcome is None for a in self.rems[rid].attempts):
                self.settle(self.rems[rid])
        for node in nodes:
            self.observe(node)
        incidents.correlate(self)  # SPEC S7: before any remediation moves
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
        if self.noted != self.old_noted or self.incidents_changed:
            data = {**self.state.data, "noted": self.noted}
            if self.incidents_changed:
                data[incidents.INCIDENTS_KEY] = incidents.dump(self.incidents.values())
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
           checks: Mapping[str, extra_mod.CheckData] | None = None,
           records: Records | None = None) -> Plan:
    """Decide what happens next. Pure: no I/O, no clock, no randomness (ARCHITECTURE).

    ``alerts`` overrides the alerts read from each node's Extra (simulate passes its
    own). ``catalog``: the fault catalog (the controller and simulate pass the one they
    loaded; omitted, the shipped one is loaded once per process). ``checks``: each
    node's validated check data (`extra.CheckCache`, once per change of its Extra);
    omitted, every node's Extra is validated here. ``records``: the index of the last
    cycle's store (`Records`), from which this store's is built where records are the
    same objects; omitted, it is built afresh. None of them changes the Plan: the
    same arguments always give the same Plan, ids and keys (SPEC S6).
    """
    return _Decider(view, state, now, policy, alerts, catalog, checks, records).run()


@dataclass(frozen=True, slots=True)
class Effort:
    """What one decide() call looked at (issue 13, 20): how many stored remediations its
    rules read, and the nodes they resolved a context for (in the order they did)."""

    looked: int
    contexts: tuple[str, ...]


def decide_effort(view: ClusterView, state: State, now: datetime, policy: Policy,
                  alerts: Mapping[str, Sequence[Alert]] | None = None, *,
                  catalog: catalog_mod.Catalog | None = None,
                  checks: Mapping[str, extra_mod.CheckData] | None = None,
                  records: Records | None = None) -> tuple[Plan, Effort]:
    """`decide`, and what it looked at: a cycle's work must follow the open work and
    the nodes that changed, not the cluster's size (the tests hold it to that)."""
    d = _Decider(view, state, now, policy, alerts, catalog, checks, records)
    plan = d.run()
    return plan, Effort(looked=d.touched, contexts=tuple(d.contexts))


def decide_counted(view: ClusterView, state: State, now: datetime, policy: Policy,
                   alerts: Mapping[str, Sequence[Alert]] | None = None) -> tuple[Plan, int]:
    """`decide`, plus how many stored remediations its rules looked at (issue 13).

    The count is what a cycle's work is made of beyond the one pass that indexes the
    store: the open remediations, and the history of the nodes and machines a rule asks
    about (E1, E3, S2, L3). It must not grow with closed history elsewhere in the store;
    the tests hold it to that. (The indexing pass itself is linear in the store, whose
    size the daemon's retention bounds: docs/store.md.)
    """
    plan, effort = decide_effort(view, state, now, policy, alerts)
    return plan, effort.looked
