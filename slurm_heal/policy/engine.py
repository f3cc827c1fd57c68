"""The pure decision core: ``decide(view, state, now, policy, catalog) -> Plan`` (ARCHITECTURE).

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
from slurm_heal.policy import acting, endings, incidents, intake, lifecycle, requests
from slurm_heal.policy.facts import host_of, is_automatic
from slurm_heal.policy.records import Records
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Alert, ClusterView

__all__ = ["Effort", "Records", "begin", "decide", "decide_counted", "decide_effort",
           "host_of", "is_automatic", "run"]


def run(ws: WorkingSet, led: Ledger) -> Plan:
    """One decide() call: the fold of the rules over the working set into the ledger,
    in the order of the module's words; the ledger becomes the Plan."""
    for cmd in sorted(ws.state.inbox, key=lambda c: (c.at, c.id)):
        if cmd.kind == "validate":
            continue  # the validation flow's (slurm_heal.validation.service), SPEC V1
        if cmd.kind == "close_incident":
            incidents.close(ws, led, cmd)  # SPEC S7
            continue
        requests.command(ws, led, cmd)
    # Only a node with an alert, a reason, or out of service has anything to observe
    # or start (every rule below returns at once for the others): a healthy node of a
    # 100k-node cluster costs one look here, nothing more (issue 13).
    # Check data that cannot be read is recorded too (I2).
    names = ws.with_reason_or_out()
    names.update(name for name, alerts in ws.alerts.items() if alerts)
    names.update(name for name in ws.unreadable if name in ws.nodes_by_name)
    nodes = [ws.nodes_by_name[name] for name in sorted(names)]
    for rid in led.ix.unsettled_ids():
        if any(a.outcome is None for a in led.rems[rid].attempts):
            acting.settle(ws, led, led.rems[rid])
    for node in nodes:
        intake.observe(ws, led, node)
    incidents.correlate(ws, led)  # SPEC S7: before any remediation moves
    for inc in list(led.incidents.values()) if led.incidents_changed else ():
        if inc.ended == "aged" and inc.resolved == ws.now:  # SPEC O6: max age (issue 37)
            for rem in incidents.held_rems(ws, led, inc):
                endings.fail_to_person(ws, led, rem, "S7", inc.resolution, inc.resolution,
                                       phase="cancelled", notify=False)
    for rem in sorted(led.open_rems(), key=lambda r: (r.created, r.id)):
        if not led.rems[rem.id].phase.terminal:
            lifecycle.advance(ws, led, led.rems[rem.id])
    for node in nodes:
        requests.create_from_reason(ws, led, node)
    for node in nodes:
        intake.create_from_alerts(ws, led, node)
    effects = led.effects
    if ws.policy.mode == "recommend_only":
        effects = [e for e in effects if e.kind == "notify"]
    data: dict[str, Any] | None = None
    if led.noted != led.old_noted or led.incidents_changed:
        data = {**ws.state.data, "noted": led.noted}
        if led.incidents_changed:
            data[incidents.INCIDENTS_KEY] = incidents.dump(  # unreadable ones kept (O6)
                led.incidents.values(), incidents.aside(led.incidents_raw))
    return Plan(
        updates=tuple(led.rems[i] for i in led.changed),
        effects=tuple(effects),
        records=tuple(led.records),
        consumed=tuple(led.consumed),
        breaker=led.breaker if led.breaker_changed else None,
        next_wake=min(led.wakes) if led.wakes else None,
        paused=led.paused if led.paused_changed else None,
        pause=led.pause,
        data=data,
    )


def begin(view: ClusterView, state: State, now: datetime, policy: Policy,
          alerts: Mapping[str, Sequence[Alert]] | None = None, *,
          catalog: catalog_mod.Catalog,
          checks: Mapping[str, extra_mod.CheckData] | None = None,
          records: Records | None = None) -> tuple[WorkingSet, Ledger]:
    """The working set and the empty ledger of one decide() call."""
    led = Ledger(state, now, policy, records)
    return WorkingSet(view, state, now, policy, alerts, catalog=catalog, checks=checks), led


def decide(view: ClusterView, state: State, now: datetime, policy: Policy,
           alerts: Mapping[str, Sequence[Alert]] | None = None, *,
           catalog: catalog_mod.Catalog,
           checks: Mapping[str, extra_mod.CheckData] | None = None,
           records: Records | None = None) -> Plan:
    """Decide what happens next. Pure: no I/O, no clock, no randomness (ARCHITECTURE).

    ``alerts`` overrides the alerts read from each node's Extra (simulate passes its
    own). ``catalog``: the fault catalog, an input like the others (issue 33): the caller
    loads it at its edge (the controller, the daemon, simulate, `plan`, the tests) and
    decide() opens no file for it. ``checks``: each
    node's validated check data (`extra.CheckCache`, once per change of its Extra);
    omitted, every node's Extra is validated here. ``records``: the index of the last
    cycle's store (`Records`), from which this store's is built where records are the
    same objects; omitted, it is built afresh. None of them changes the Plan: the
    same arguments always give the same Plan, ids and keys (SPEC S6).
    """
    return run(*begin(view, state, now, policy, alerts, catalog=catalog, checks=checks,
                      records=records))


@dataclass(frozen=True, slots=True)
class Effort:
    """What one decide() call looked at (issue 13, 20): how many stored remediations its
    rules read, and the nodes they resolved a context for (in the order they did)."""

    looked: int
    contexts: tuple[str, ...]


def decide_effort(view: ClusterView, state: State, now: datetime, policy: Policy,
                  alerts: Mapping[str, Sequence[Alert]] | None = None, *,
                  catalog: catalog_mod.Catalog,
                  checks: Mapping[str, extra_mod.CheckData] | None = None,
                  records: Records | None = None) -> tuple[Plan, Effort]:
    """`decide`, and what it looked at: a cycle's work must follow the open work and
    the nodes that changed, not the cluster's size (the tests hold it to that)."""
    ws, led = begin(view, state, now, policy, alerts, catalog=catalog, checks=checks,
                    records=records)
    plan = run(ws, led)
    return plan, Effort(looked=led.touched, contexts=tuple(ws.contexts))


def decide_counted(view: ClusterView, state: State, now: datetime, policy: Policy,
                   alerts: Mapping[str, Sequence[Alert]] | None = None, *,
                   catalog: catalog_mod.Catalog) -> tuple[Plan, int]:
    """`decide`, plus how many stored remediations its rules looked at (issue 13).

    The count is what a cycle's work is made of beyond the one pass that indexes the
    store: the open remediations, and the history of the nodes and machines a rule asks
    about (E1, E3, S2, L3). It must not grow with closed history elsewhere in the store;
    the tests hold it to that. (The indexing pass itself is linear in the store, whose
    size the daemon's retention bounds: docs/store.md.)
    """
    plan, effort = decide_effort(view, state, now, policy, alerts, catalog=catalog)
    return plan, effort.looked
