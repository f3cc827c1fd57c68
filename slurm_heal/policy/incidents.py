"""One incident per cause (SPEC S7): related alerts on several nodes under one shared
component open one incident on the component, for a person.

Functions of the working set and the ledger, fed by the topology (slurm_heal.topology: the view's,
else the nodes' features). One decide() call:

1. a person's ``close_incident`` command ends an incident (`close`);
2. `correlate`: an open incident takes in the related alerts that appear on more of its
   component's nodes and ends when none of its nodes has one left (the alerts cleared);
   related alerts, first seen within ``incidents.window``, on at least
   ``incidents.min_nodes`` nodes (or ``min_percent`` % of them, and never fewer than two)
   of one component open one incident on it: its nodes' remediations are held (recorded
   once on each), a person is notified once with every node's evidence;
3. the start gate (policy/gates.py) holds a remediation of a node in an open incident
   (``S7``), and a related fault's remediation until its alert is ``incidents.settle``
   old, so a component's failure can show on its other nodes before one is cordoned.

An alert an incident took in (open or ended) never counts towards another, so a person's
close is not undone by the same alerts the next cycle: the held remediations go on by
their own rules (withdrawn by L4 where the alerts cleared). Incidents live in the store
(``data["incidents"]``) with deterministic ids: two controllers open the same one (S6),
and `merge` joins what two plans wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slurm_heal.config import FaultGroup
from slurm_heal.config import Incidents as IncidentsConf
from slurm_heal.incidentstore import INCIDENTS_KEY as INCIDENTS_KEY
from slurm_heal.incidentstore import dump as dump
from slurm_heal.incidentstore import load as load
from slurm_heal.models import Command, Incident, IncidentAlert, Phase, Remediation
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.notices import notice
from slurm_heal.topology import Component, Topology, from_features
from slurm_heal.types import Alert

if TYPE_CHECKING:
    from slurm_heal.policy.working import Ledger, WorkingSet

BEFORE_START = frozenset({Phase.PROPOSED, Phase.APPROVED})


def incident_id(component: str, group: str, since: datetime) -> str:
    raw = f"{component}|{group}|{since.isoformat()}"
    return "i-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def topology_of(ws: WorkingSet) -> Topology | None:
    """The topology this call decides with: the view's (Slurm's or a file's), else the
    nodes' features (topology.source auto or features); None when there is none."""
    if ws.topology_read:
        return ws.topology
    ws.topology_read = True
    conf = ws.policy.topology
    topo = ws.view.topology
    if conf.source == "none":
        topo = None
    elif (topo is None or topo.problem) and conf.source in ("auto", "features") \
            and conf.feature_prefixes:
        found = from_features(ws.view.nodes, conf.feature_prefixes)
        if found:
            topo = found
    ws.topology = topo
    return topo


def components(ws: WorkingSet, node: str) -> tuple[Component, ...]:
    topo = topology_of(ws)
    return topo.of(node) if topo else ()


def _key(node: str, fault: str, first_seen: datetime) -> tuple[str, str, str]:
    return (node, fault, first_seen.isoformat())


def _carried(a: Alert) -> IncidentAlert:
    from slurm_heal.extra import alert_to_json

    return IncidentAlert(node=a.node, fault=a.fault, severity=a.severity.value,
                         summary=a.summary, first_seen=a.first_seen,
                         evidence=tuple(alert_to_json(a).get("evidence") or ()))


def group_words(pol: IncidentsConf, inc: Incident) -> str:
    """How an incident's sentences name its group (`FaultGroup.words`): the group of the
    faults it carries whose key is the incident's, compared whole (issue 33: the stored
    key is never split back); the key itself if the policy no longer has that group."""
    for a in inc.alerts:
        group = pol.group_of(a.fault)
        if group is not None and group.key == inc.group:
            return group.words
    return inc.group


def held_rems(ws: WorkingSet, led: Ledger, inc: Incident) -> list[Remediation]:
    """The open remediations an incident holds: its nodes', for its group's faults,
    before their start."""
    pol = ws.policy.incidents
    out = []
    for node in inc.nodes:
        for rem in led.open_on(node):
            fault = rem.data.evidence_fault or rem.fault
            if rem.phase in BEFORE_START and pol.key_of(fault) == inc.group:
                out.append(rem)
    return out


def open_incident_of(ws: WorkingSet, led: Ledger, node: str, fault: str) -> Incident | None:
    """The open incident that holds ``node``'s remediation for ``fault``, if any."""
    group = ws.policy.incidents.key_of(fault)
    if group is None:
        return None
    return next((i for i in led.incidents.values()
                 if i.open and i.group == group and node in i.nodes), None)


def hold_words(pol: IncidentsConf, inc: Incident) -> str:
    return (f"held by incident {inc.id} on {inc.kind} {inc.name} ({len(inc.nodes)} of "
            f"{inc.size} nodes, {group_words(pol, inc)}): one cause, one ticket for a person; "
            f"this node's own remediation waits until the incident ends (slurm-heal "
            f"incident close {inc.id}, or the alerts clear)")


def hold_of(pol: IncidentsConf, inc: Incident) -> Hold:
    """The hold an open incident puts on its nodes' own remediations (O6: what lifts it)."""
    return Hold("S7", hold_words(pol, inc), subject=inc.id, incident=inc.id,
                label=f"incident {inc.id}",
                lifts=f"a person closes incident {inc.id} once the {inc.kind} is looked at, "
                "or its alerts clear", command=f"slurm-heal incident close {inc.id}")


def _hold(ws: WorkingSet, led: Ledger, inc: Incident, nodes: Iterable[str]) -> None:
    """Record once on each of ``nodes``' held remediations that the incident holds it."""
    wanted = set(nodes)
    hold = hold_of(ws.policy.incidents, inc)
    for rem in held_rems(ws, led, inc):
        if rem.node in wanted and rem.data.blocked != hold.key:
            rem = led.step(rem, "blocked", "S7", hold.why, mark=hold.key)
            led.put(rem.model_copy(update={"data": rem.data.but(blocked=hold.key,
                                                                hold=hold.held())}))


def close(ws: WorkingSet, led: Ledger, cmd: Command) -> None:
    """A person ends an incident (``slurm-heal incident close ID``; a component such as
    ``switch:leaf1`` names the open incident on it)."""
    led.consumed.append(cmd.id)
    inc = led.incidents.get(cmd.incident or "") or next(  # or the open one on a component
        (i for i in led.incidents.values() if i.open and i.component == cmd.incident), None)
    if inc is None or not inc.open:
        led.record(cmd.node or "-", "blocked", "S7", f"close of incident {cmd.incident} by "
                   f"{cmd.by} ignored: no open incident has that id")
        return
    held = held_rems(ws, led, inc)
    why = (f"incident {inc.id} on {inc.kind} {inc.name} closed by {cmd.by}"
           + (f": {cmd.reason}" if cmd.reason else "")
           + f"; {len(held)} held remediation(s) go on by their own rules")
    inc = inc.model_copy(update={"state": "resolved", "resolved": ws.now, "updated": ws.now,
                                 "resolved_by": cmd.by, "resolution": why})
    led.incidents[inc.id] = inc
    led.incidents_changed = True
    for node in inc.nodes:
        led.record(node, "approved", "S7", why)


def correlate(ws: WorkingSet, led: Ledger) -> None:
    """Open, grow and end incidents from this call's alerts (see the module's words)."""
    pol = ws.policy.incidents
    if not pol.enabled:
        return
    told = ws.view.topology
    if told is not None and told.problem and led.once(notice("topology-problem"),
                                                            told.problem):
        led.record("-", "alert", "S7", f"the topology cannot be read ({told.problem}); "
                   "incidents and the blast radius work without it until it can")
    related: dict[FaultGroup, list[tuple[str, Alert]]] = {}  # group -> (node, alert)
    for name, alerts in ws.alerts.items():
        for a in alerts:
            group = pol.group_of(a.fault)
            if group is not None:
                related.setdefault(group, []).append((name, a))
    if not related and not led.any_open_incident:
        return  # a quiet cycle: nothing to correlate, nothing open to end
    for inc in list(led.incidents.values()):
        # Check data that cannot be read is no news, not a cleared alert (SPEC I2, L4).
        if inc.open and not any(ws.check_of(n).problem or any(
                pol.key_of(a.fault) == inc.group for a in ws.active(n)) for n in inc.nodes):
            why = (f"incident {inc.id} on {inc.kind} {inc.name} ended: the "
                   f"{group_words(pol, inc)} alerts cleared on all {len(inc.nodes)} nodes")
            led.incidents[inc.id] = inc.model_copy(update={
                "state": "resolved", "resolved": ws.now, "updated": ws.now, "resolution": why})
            led.incidents_changed = True
            for node in inc.nodes:
                led.record(node, "withdrawn", "S7", why)
    if not related:
        return
    topo = topology_of(ws)
    if not topo:
        return
    covered = {_key(a.node, a.fault, a.first_seen)
               for inc in led.incidents.values() for a in inc.alerts}
    opened = {(i.component, i.group): i for i in led.incidents.values() if i.open}
    for group, found in sorted(related.items(), key=lambda kv: kv[0].key):
        by_comp: dict[str, list[tuple[str, Alert]]] = {}
        comps: dict[str, Component] = {}
        for name, a in found:
            if _key(name, a.fault, a.first_seen) in covered:
                continue
            for c in topo.of(name):
                comps[c.id] = c
                by_comp.setdefault(c.id, []).append((name, a))
        # Smallest component first: the most specific cause takes the alerts.
        for cid in sorted(by_comp, key=lambda i: (len(comps[i].nodes), i)):
            c = comps[cid]
            fresh = [(n, a) for n, a in by_comp[cid]
                     if _key(n, a.fault, a.first_seen) not in covered]
            current = opened.get((cid, group.key))
            if current is not None:
                if fresh:
                    _grow(ws, led, current, fresh, covered)
                continue
            recent = [(n, a) for n, a in fresh if a.first_seen >= ws.now - pol.window]
            nodes = {n for n, _ in recent}
            if len(nodes) < 2 or (len(nodes) < pol.min_nodes
                                  and len(nodes) * 100 < pol.min_percent * len(c.nodes)):
                continue
            _open(ws, led, c, group, recent, topo.source)
            covered.update(_key(n, a.fault, a.first_seen) for n, a in recent)


def _grow(ws: WorkingSet, led: Ledger, inc: Incident, fresh: list[tuple[str, Alert]],
          covered: set[tuple[str, str, str]]) -> None:
    new_nodes = sorted({n for n, _ in fresh} - set(inc.nodes))
    inc = inc.model_copy(update={
        "nodes": tuple(sorted(set(inc.nodes) | set(new_nodes))), "updated": ws.now,
        "alerts": inc.alerts + tuple(_carried(a) for _, a in fresh)})
    led.incidents[inc.id] = inc
    led.incidents_changed = True
    covered.update(_key(n, a.fault, a.first_seen) for n, a in fresh)
    for node in new_nodes:
        led.record(node, "alert", "S7", f"{node} joins incident {inc.id} on {inc.kind} "
                   f"{inc.name} ({group_words(ws.policy.incidents, inc)}; now {len(inc.nodes)} of {inc.size} "
                   "nodes)")
    _hold(ws, led, inc, new_nodes)


def _open(ws: WorkingSet, led: Ledger, c: Component, group: FaultGroup,
          alerts: list[tuple[str, Alert]], source: str) -> None:
    pol = ws.policy.incidents
    since = min(a.first_seen for _, a in alerts)
    nodes = tuple(sorted({n for n, _ in alerts}))
    iid = incident_id(c.id, group.key, since)
    old = led.incidents.get(iid)
    if old is not None:  # another replica opened it (S6): the same incident
        return
    faults = sorted({a.fault for _, a in alerts})
    why = (f"{', '.join(faults)} on {len(nodes)} of the {len(c.nodes)} nodes under "
           f"{c.label} ({', '.join(nodes)}) within {_words(pol.window)}: one incident on the "
           f"{c.kind} (SPEC S7, incidents.min_nodes = {pol.min_nodes}, min_percent = "
           f"{pol.min_percent:g}); their own remediations are held, a person looks at the "
           f"{c.kind}")
    inc = Incident(id=iid, component=c.id, kind=c.kind, name=c.name, group=group.key,
                   size=len(c.nodes), source=source, opened=ws.now, updated=ws.now,
                   nodes=nodes, alerts=tuple(_carried(a) for _, a in alerts), why=why)
    led.incidents[iid] = inc
    led.incidents_changed = True
    for node in nodes:
        led.record(node, "alert", "S7", f"incident {iid}: {why}")
    _hold(ws, led, inc, nodes)
    # One notice for the incident (its first node carries it: an effect names a node).
    notice = (f"incident {iid} on {c.label}: {why}; close it with: slurm-heal incident "
              f"close {iid}")
    led.record(nodes[0], "notified", "S7", notice)
    led.effect("notify", nodes[0], None, f"incident-{iid}", why=notice, rule="S7",
               reason=f"incident:{iid}")


def _words(d: Any) -> str:
    from slurm_heal.config import format_duration

    return format_duration(d)


def settle_until(ws: WorkingSet, rem: Remediation) -> tuple[datetime, Component] | None:
    """When a related fault's remediation may start (``incidents.settle`` after its
    alert was first seen), and the component it waits on; None when it need not wait."""
    pol = ws.policy.incidents
    if not pol.enabled or rem.origin != "alert":
        return None
    fault = rem.data.evidence_fault or rem.fault
    if pol.group_of(fault) is None:
        return None
    comps = components(ws, rem.node)
    if not comps:
        return None
    seen = [a.first_seen for a in ws.active(rem.node, fault)]
    if not seen:
        return None
    until = min(seen) + pol.settle
    return (until, comps[0]) if ws.now < until else None


def by_node(incidents: Mapping[str, Incident]) -> dict[str, list[Incident]]:
    """Incidents by each of their nodes (newest first): the read model's index."""
    out: dict[str, list[Incident]] = {}
    for inc in sorted(incidents.values(), key=lambda i: (i.opened, i.id), reverse=True):
        for n in inc.nodes:
            out.setdefault(n, []).append(inc)
    return out
