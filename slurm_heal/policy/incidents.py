"""One incident per cause (SPEC S7, O6): related alerts on several nodes under one domain
that can cause them open one incident on it, for a person.

Functions of the working set and the ledger; which components can cause which faults is
policy/domains.py's (issue 37). One decide() call:

1. a person's ``close_incident`` command ends an incident (`close`);
2. `correlate`: an open incident takes in its faults on more of its domain's nodes, and
   ends (`_bound`) when its alerts cleared, when fewer of its nodes keep them than an
   incident opens for (the held remediations go on by their own rules), or at
   ``incidents.max_age`` (handed to a person, with one notice); related alerts first seen
   within ``incidents.window`` on ``incidents.min_nodes`` nodes (or ``min_percent`` %,
   never fewer than two) of one domain open one incident, at most one open per component
   and domain kind (a new group of faults joins it): its nodes' remediations are held, a
   person is notified once with the domain's nodes and every node's evidence;
3. the start gate (policy/gates.py) holds a node's remediation while an open incident
   holds it, and a fault a domain can cause until ``incidents.settle`` after it showed,
   only where that domain could still form an incident (`domains.settle_until`).

An alert an incident took in never counts towards another. Incidents live in the store
(``data["incidents"]``) with deterministic ids: two controllers open the same one (S6).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from slurm_heal.config import FaultGroup, format_duration
from slurm_heal.config import Incidents as IncidentsConf
from slurm_heal.incidentstore import INCIDENTS_KEY as INCIDENTS_KEY
from slurm_heal.incidentstore import aside as aside
from slurm_heal.incidentstore import dump as dump
from slurm_heal.incidentstore import load as load
from slurm_heal.incidentstore import unreadable
from slurm_heal.models import Command, Incident, IncidentAlert, Phase, Remediation
from slurm_heal.policy.domains import DOMAIN_WORDS as DOMAIN_WORDS
from slurm_heal.policy.domains import a_ as a_
from slurm_heal.policy.domains import causes, faults_words, qualifies
from slurm_heal.policy.domains import components as components
from slurm_heal.policy.domains import domain_words as domain_words
from slurm_heal.policy.domains import settle_until as settle_until
from slurm_heal.policy.domains import topology_of as topology_of
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.notices import notice
from slurm_heal.topology import Component
from slurm_heal.types import Alert

if TYPE_CHECKING:
    from slurm_heal.policy.working import Ledger, WorkingSet

BEFORE_START = frozenset({Phase.PROPOSED, Phase.APPROVED})


def incident_id(component: str, group: str, since: datetime) -> str:
    raw = f"{component}|{group}|{since.isoformat()}"
    return "i-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def _key(node: str, fault: str, first_seen: datetime) -> tuple[str, str, str]:
    return (node, fault, first_seen.isoformat())


def _carried(a: Alert) -> IncidentAlert:
    from slurm_heal.extra import alert_to_json

    return IncidentAlert(node=a.node, fault=a.fault, severity=a.severity.value,
                         summary=a.summary, first_seen=a.first_seen,
                         evidence=tuple(alert_to_json(a).get("evidence") or ()))


def _related(ws: WorkingSet, fault: str, inc: Incident) -> bool:
    return not set(ws.policy.incidents.keys_of(fault)).isdisjoint(inc.all_groups)


def held_rems(ws: WorkingSet, led: Ledger, inc: Incident) -> list[Remediation]:
    """The open remediations an incident holds: its nodes', for its groups' faults,
    before their start."""
    out = []
    for node in inc.nodes:
        for rem in led.open_on(node):
            fault = rem.data.evidence_fault or rem.fault
            if rem.phase in BEFORE_START and _related(ws, fault, inc):
                out.append(rem)
    return out


def open_incident_of(ws: WorkingSet, led: Ledger, node: str, fault: str) -> Incident | None:
    """The open incident that holds ``node``'s remediation for ``fault``, if any."""
    if not ws.policy.incidents.groups_of(fault):
        return None
    return next((i for i in led.incidents.values()
                 if i.open and node in i.nodes and _related(ws, fault, i)), None)


def hold_words(pol: IncidentsConf, inc: Incident) -> str:
    return (f"held by incident {inc.id} on {inc.kind} {inc.name} ({len(inc.nodes)} of "
            f"{inc.size} nodes, {faults_words(pol, inc)}): one cause, one ticket for a person; "
            f"this node's own remediation waits until the incident ends (slurm-heal "
            f"incident close {inc.id}, or the alerts clear)")


def hold_of(pol: IncidentsConf, inc: Incident) -> Hold:
    """The hold an open incident puts on its nodes' own remediations (O6: what lifts it)."""
    return Hold("S7", hold_words(pol, inc), subject=inc.id, incident=inc.id,
                label=f"incident {inc.id}",
                lifts=f"a person closes incident {inc.id} once the {inc.kind} is looked at, "
                "its alerts clear, or too few of its nodes keep them (then each goes on by "
                "its own rules)", command=f"slurm-heal incident close {inc.id}")


def _hold(ws: WorkingSet, led: Ledger, inc: Incident, nodes: Iterable[str]) -> None:
    """Record once on each of ``nodes``' held remediations that the incident holds it."""
    wanted = set(nodes)
    hold = hold_of(ws.policy.incidents, inc)
    for rem in held_rems(ws, led, inc):
        if rem.node in wanted and rem.data.blocked != hold.key:
            rem = led.step(rem, "blocked", "S7", hold.why, mark=hold.key)
            led.put(rem.model_copy(update={"data": rem.data.but(blocked=hold.key,
                                                                hold=hold.held())}))


def _end(ws: WorkingSet, led: Ledger, inc: Incident, how: str, why: str,
         by: str | None = None) -> Incident:
    inc = inc.model_copy(update={"state": "resolved", "resolved": ws.now, "updated": ws.now,
                                 "resolved_by": by, "resolution": why, "ended": how})
    led.incidents[inc.id] = inc
    led.incidents_changed = True
    return inc


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
    inc = _end(ws, led, inc, "closed", why, by=cmd.by)
    for node in inc.nodes:
        led.record(node, "approved", "S7", why)


def _still(ws: WorkingSet, inc: Incident) -> list[str]:
    """The incident's nodes that keep one of its alerts (or whose check data cannot be
    read: no news, not a cleared alert, SPEC I2, L4)."""
    return [n for n in inc.nodes if ws.check_of(n).problem
            or any(_related(ws, a.fault, inc) for a in ws.active(n))]


def _bound(ws: WorkingSet, led: Ledger, inc: Incident) -> None:
    """SPEC S7, O6 (issue 37): an open incident ends when its alerts cleared, when too few
    of its nodes keep them (the rest go on by their own rules), or when it reached
    incidents.max_age (handed to a person with a notice)."""
    pol = ws.policy.incidents
    still = _still(ws, inc)
    if not still:
        why = (f"incident {inc.id} on {inc.kind} {inc.name} ended: the "
               f"{faults_words(pol, inc)} alerts cleared on all {len(inc.nodes)} nodes")
        _end(ws, led, inc, "cleared", why)
        for node in inc.nodes:
            led.record(node, "withdrawn", "S7", why)
        return
    short = not qualifies(ws, len(still), inc.size)
    if short != (inc.short_since is not None):  # it stopped (or again) qualifying
        inc = inc.model_copy(update={"short_since": ws.now if short else None,
                                     "updated": ws.now})
        led.incidents[inc.id] = inc
        led.incidents_changed = True
    if short and inc.short_since is not None:
        until = inc.short_since + pol.settle
        if ws.now < until:
            led.wake(until)  # the other nodes' checks may clear theirs meanwhile
            return
        held = held_rems(ws, led, inc)
        why = (f"incident {inc.id} on {inc.kind} {inc.name} ended: its alerts remain on "
               f"{len(still)} of the {inc.size} nodes ({', '.join(still)}) since "
               f"{inc.short_since.isoformat()}, fewer than an incident opens for "
               f"(incidents.min_nodes = {pol.min_nodes}, min_percent = "
               f"{pol.min_percent:g}, for incidents.settle = "
               f"{format_duration(pol.settle)}); "
               f"{len(held)} held remediation(s) go on by their own rules")
        _end(ws, led, inc, "released", why)
        for node in inc.nodes:
            led.record(node, "approved", "S7", why)
        return
    if ws.now >= inc.opened + pol.max_age:
        held = held_rems(ws, led, inc)
        why = (f"incident {inc.id} on {inc.kind} {inc.name} has been open "
               f"{format_duration(ws.now - inc.opened)} (incidents.max_age = "
               f"{format_duration(pol.max_age)}) "
               f"with its alerts on {len(still)} of {len(inc.nodes)} nodes: handed to a "
               f"person with its {len(held)} held remediation(s); nothing automatic starts "
               "on its nodes until a person acts")
        _end(ws, led, inc, "aged", why)  # the engine hands its held ones over (E1)
        led.record(inc.nodes[0], "notified", "S7", why)
        led.effect("notify", inc.nodes[0], None, f"incident-aged-{inc.id}", why=why,
                   rule="S7", reason=f"incident-aged:{inc.id}", topic=f"aged:{inc.id}")


def _report_unreadable(led: Ledger) -> None:
    """SPEC O6 (issue 37): stored incident entries that cannot be read are said once
    (and kept in the store, `incidentstore.dump`), never dropped without a word."""
    bad = unreadable(led.incidents_raw) if led.incidents_raw else []
    if bad and led.once(notice("incident-unreadable"), len(bad)):
        led.record("-", "alert", "S7", f"{len(bad)} stored incident entr"
                   f"{'y' if len(bad) == 1 else 'ies'} cannot be read and are kept aside "
                   f"unchanged: {'; '.join(bad[:3])} (slurm-heal incidents lists them)")


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
            for group in pol.groups_of(a.fault):
                related.setdefault(group, []).append((name, a))
    if not related and not led.any_open_incident:
        return  # a quiet cycle: nothing to correlate, nothing open to end
    _report_unreadable(led)
    for inc in list(led.incidents.values()):
        if inc.open:
            _bound(ws, led, inc)
    if not related:
        return
    topo = topology_of(ws)
    if not topo:
        return
    covered = {_key(a.node, a.fault, a.first_seen)
               for inc in led.incidents.values() for a in inc.alerts}
    # SPEC O6 (issue 37): one open incident per component and domain kind.
    opened = {(i.component, i.domain): i for i in led.incidents.values() if i.open}
    for group, found in sorted(related.items(), key=lambda kv: kv[0].key):
        domain, kinds = causes(ws, group)
        by_comp: dict[str, list[tuple[str, Alert]]] = {}
        comps: dict[str, Component] = {}
        for name, a in found:
            if _key(name, a.fault, a.first_seen) in covered:
                continue
            for c in topo.of(name):
                if kinds is None:
                    if pol.domain_of_component(c.kind) == "cohort":
                        continue
                elif c.kind not in kinds:
                    continue  # a kind of component that cannot cause this fault
                comps[c.id] = c
                by_comp.setdefault(c.id, []).append((name, a))
        # Smallest component first: the most specific cause takes the alerts.
        for cid in sorted(by_comp, key=lambda i: (len(comps[i].nodes), i)):
            c = comps[cid]
            dom = pol.domain_of_component(c.kind) or domain or ""
            fresh = [(n, a) for n, a in by_comp[cid]
                     if _key(n, a.fault, a.first_seen) not in covered]
            if not fresh:
                continue
            current = opened.get((cid, dom))
            if current is not None and group.key in current.all_groups:
                opened[(cid, dom)] = _grow(ws, led, current, group, fresh, covered)
                continue
            recent = [(n, a) for n, a in fresh if a.first_seen >= ws.now - pol.window]
            if not qualifies(ws, len({n for n, _ in recent}), len(c.nodes)):
                continue
            if current is not None:  # a new group of faults on the same domain joins it
                opened[(cid, dom)] = _grow(ws, led, current, group, recent, covered)
                continue
            opened[(cid, dom)] = _open(ws, led, c, dom, group, recent, topo.source)
            covered.update(_key(n, a.fault, a.first_seen) for n, a in recent)


def _grow(ws: WorkingSet, led: Ledger, inc: Incident, group: FaultGroup,
          fresh: list[tuple[str, Alert]], covered: set[tuple[str, str, str]]) -> Incident:
    new_nodes = sorted({n for n, _ in fresh} - set(inc.nodes))
    groups = inc.all_groups if group.key in inc.all_groups \
        else (*inc.all_groups, group.key)
    inc = inc.model_copy(update={
        "nodes": tuple(sorted(set(inc.nodes) | set(new_nodes))), "updated": ws.now,
        "groups": groups, "alerts": inc.alerts + tuple(_carried(a) for _, a in fresh)})
    led.incidents[inc.id] = inc
    led.incidents_changed = True
    covered.update(_key(n, a.fault, a.first_seen) for n, a in fresh)
    for node in new_nodes:
        led.record(node, "alert", "S7", f"{node} joins incident {inc.id} on {inc.kind} "
                   f"{inc.name} ({group.words}; now {len(inc.nodes)} of {inc.size} "
                   "nodes)")
    _hold(ws, led, inc, inc.nodes if len(groups) > 1 else new_nodes)
    return inc


def _open(ws: WorkingSet, led: Ledger, c: Component, domain: str, group: FaultGroup,
          alerts: list[tuple[str, Alert]], source: str) -> Incident:
    pol = ws.policy.incidents
    since = min(a.first_seen for _, a in alerts)
    nodes = tuple(sorted({n for n, _ in alerts}))
    iid = incident_id(c.id, group.key, since)
    old = led.incidents.get(iid)
    if old is not None:  # another replica opened it (S6): the same incident
        return old
    faults = sorted({a.fault for _, a in alerts})
    what = domain_words(ws, c)
    why = (f"{', '.join(faults)} on {len(nodes)} of the {len(c.nodes)} nodes under "
           f"{c.label} ({', '.join(nodes)}) within {format_duration(pol.window)}: one "
           "incident on the "
           f"{c.kind} (SPEC S7, incidents.min_nodes = {pol.min_nodes}, min_percent = "
           f"{pol.min_percent:g}); {a_(what)} can cause {group.words} "
           f"(incidents.domains.{domain or '-'}); their own remediations are held, a "
           f"person looks at the {what}")
    inc = Incident(id=iid, component=c.id, kind=c.kind, name=c.name, group=group.key,
                   domain=domain, groups=(group.key,), size=len(c.nodes), source=source,
                   opened=ws.now, updated=ws.now, nodes=nodes,
                   alerts=tuple(_carried(a) for _, a in alerts), why=why)
    led.incidents[iid] = inc
    led.incidents_changed = True
    for node in nodes:
        led.record(node, "alert", "S7", f"incident {iid}: {why}")
    _hold(ws, led, inc, nodes)
    # One notice for the incident (its first node carries it: an effect names a node),
    # with every node of the domain (SPEC S7, issue 37 item 4).
    members = ", ".join(sorted(c.nodes)) if len(c.nodes) <= 72 else f"{len(c.nodes)} nodes"
    told = (f"incident {iid} on {c.label}: {why}; the {what}'s nodes: {members}; close it "
            f"with: slurm-heal incident close {iid}")
    led.record(nodes[0], "notified", "S7", told)
    led.effect("notify", nodes[0], None, f"incident-{iid}", why=told, rule="S7",
               reason=f"incident:{iid}")
    return inc
