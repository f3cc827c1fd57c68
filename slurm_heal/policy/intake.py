"""Alerts in: record-only observations (D5, D8, I2) and new remediations from alerts
after S1 persistence, with the action of the catalog, E1 and E3."""

from __future__ import annotations

import slurm_heal.policy.cordon as cordon
import slurm_heal.policy.endings as endings
import slurm_heal.policy.lifecycle as lifecycle
import slurm_heal.policy.person as person
from slurm_heal import extra as extra_mod
from slurm_heal import reasons
from slurm_heal.config import format_duration
from slurm_heal.models import Phase, Remediation, Work, remediation_id
from slurm_heal.policy.escalation import climb, migrate_refused
from slurm_heal.policy.facts import NOT_EVIDENCE, ended_at, iso
from slurm_heal.policy.notices import notice
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.sources import SITE_SOURCES
from slurm_heal.types import Action, Alert, NodeInfo


def create_from_alerts(ws: WorkingSet, led: Ledger, node: NodeInfo) -> None:
    name = node.name
    if led.ix.has_open(name):
        return  # SPEC L3: one remediation at a time per node
    if cordon.unknown_marker(led, node) is not None:
        cordon.unrecorded(led, node)  # I5: ours, but with no record: a person's to look at
        return
    cands: list[tuple[Alert, Action]] = []
    for a in ws.active(name):
        act = ws.fault_action(a)
        if act is Action.NONE:
            continue
        hold = ws.policy.safety.persistence_for(a.fault, a.severity)
        if ws.now - a.first_seen < hold:  # SPEC S1
            until = a.first_seen + hold
            led.wake(until)
            if led.once(notice("s1", name, a.fault, iso(a.first_seen))):
                led.record(name, "blocked", "S1", f"{a.fault} must persist "
                           f"{format_duration(hold)} before action (until {iso(until)})",
                           action=act)
            continue
        cands.append((a, act))
    checked = ws.check_of(name).checked_at
    if cands:  # SPEC S8: an alert a person's resume took over opens nothing new
        resumed = [r for r in led.of_node(name) if r.data.resumed_by_person]
        cands = [c for c in cands if not any(person.covers(r, c[0], node, checked)
                                             for r in resumed)]
    if not cands:
        return
    if endings.with_a_person(ws, led, name):
        return
    # SPEC S8 (issue 32 item 10): the hand-over ended (a person acted); what was
    # published when the node was handed over opens nothing, only a new fault does.
    handed = [r for r in led.of_node(name) if r.data.handed_to_person and r.phase.terminal]
    cands = [c for c in cands if not any(person.covers(r, c[0], node, checked)
                                         for r in handed)]
    if not cands:
        return
    ladder = ws.policy.escalation.steps
    alert, action = sorted(cands, key=lambda c: (
        -c[0].severity.rank, -(ladder.index(c[1]) if c[1] in ladder else -1),
        c[0].fault))[0]
    host = ws.ctx(name).host
    rid = new_id(ws, led, name, alert)
    if rid is None:
        return
    e1 = climb(ws, led, host, alert.fault, action)
    chosen, whys = e1.action, e1.whys
    rule = "P1"
    site = f", from {alert.detector}" if alert.detector in SITE_SOURCES else ""  # D13
    why = (f"{alert.fault} ({alert.severity.value}{site}) on {name} since "
           f"{iso(alert.first_seen)}: {alert.summary or ws.explain(alert.fault)}; "
           f"catalog action {action.value}")
    if chosen is None:
        if led.once(notice("ladder-end", name, alert.fault)):
            led.record(name, "escalated", "E1", "; ".join(whys) + f"; {name} is handed to "
                       "a person with a removal recommendation (SPEC Q2)", action=Action.REMOVE)
            led.effect("notify", name, None, "notify", topic=alert.fault,
                       why="; ".join(whys), rule="E1")
        return
    e3_why = ""
    if chosen is Action.MIGRATE:
        refused = migrate_refused(ws, led, name, host)
        if refused is not None:
            e3_why, chosen = refused.why, Action.REBUILD
    rem = Remediation(
        id=rid, node=name, host=host, pool=ws.pool(name), fault=alert.fault,
        severity=alert.severity, action=chosen, origin="alert", automatic=True,
        detector=alert.detector or None, action_rule="E3" if e3_why else (
            "E1" if whys else f"catalog:{alert.fault}"),
        escalated_from=action if chosen is not action else None,
        alert_first_seen=alert.first_seen, created=ws.now, updated=ws.now,
        data=Work(evidence_fault=alert.fault, held_by_check=person.check_drained(node)
                  or person.check_holds(ws, node)))
    led.put(rem)
    rem = led.step(rem, "proposed", rule, why)
    for w in whys:
        rem = led.step(rem, "escalated", "E1", w)
    if e3_why:
        rem = led.step(rem, "escalated", "E3", e3_why)
    lifecycle.advance(ws, led, rem)


def new_id(ws: WorkingSet, led: Ledger, name: str, alert: Alert) -> str | None:
    """A deterministic id for a new remediation of this alert, or None when this alert
    instance was already handled (denied, cancelled, or done and not seen since)."""
    since = alert.first_seen
    for _ in range(50):
        rid = remediation_id(name, alert.fault, alert.detector or None, None, since)
        old = led.rems.get(rid)
        if old is None:
            return rid
        end = ended_at(old) or old.updated
        if old.phase is Phase.FAILED:
            since = end  # L5: the next recommendation follows E1
        elif old.phase in (Phase.DONE, Phase.WITHDRAWN) and alert.last_seen > end:
            since = end  # seen again after it ended: a recurrence
        elif (old.data.resumed_by_person or old.data.handed_to_person) \
                and not person.covers(old, alert, ws.node(name),
                                      ws.check_of(name).checked_at):
            since = end  # S8: something new since a person resumed the node (or
            # since the hand-over that person has ended)
        else:
            return None
    return None


def observe(ws: WorkingSet, led: Ledger, node: NodeInfo) -> None:
    name = node.name
    ours_rebooting = reasons.owner(node.reason) == "slurm" and any(
        r.phase in (Phase.ACTING, Phase.RETURNING)
        for r in led.of_node(name))  # Slurm's reason for the reboot we caused
    if ws.foreign(node) and not ours_rebooting:
        fault = "slurm.node_down" if node.down else "slurm.node_drain"
        if led.once(notice("d5", name), f"{fault}:{node.reason}"):
            led.record(name, "alert", "D5", f"{fault}: {name} is "
                       f"{'DOWN' if node.down else 'drained'} by someone else "
                       f"({node.reason!r}); recorded, never touched by slurm-heal")
    problem = ws.check_of(name).problem
    if problem and led.once(notice("unreadable", name), problem):
        led.record(name, "alert", "I2", f"{extra_mod.UNREADABLE}: the check data in "
                   f"{name}'s Extra cannot be read ({problem}); recorded, and the node "
                   "is treated as having no check data until its check writes it again")
    cordon.orphan_marker(ws, led, node)
    for a in ws.active(name):
        if a.fault in NOT_EVIDENCE or ws.fault_action(a) is not Action.NONE:
            continue
        told = notice("d8", name, a.fault, iso(a.first_seen))
        if led.once(told):
            why = (f"{a.fault} ({a.severity.value}): {a.summary or ws.explain(a.fault)}; "
                   "no action is mapped: recorded and sent to support")
            led.record(name, "notified", "D8", why)
            led.effect("notify", name, None, "notify", topic=told.key, why=why,
                       rule="D8", reason=told.key)
