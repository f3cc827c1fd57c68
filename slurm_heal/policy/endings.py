"""The end of automatic work (SPEC E1, L5, S8): a failure climbs E1 (`fail`), the top of
the ladder or anything a person must decide ends with a person (`fail_to_person`: the
remediation ends and is handed over, `hand_to_person`), a person's resume ends a
remediation with them (`hand_back`), nothing automatic starts on a node handed to a
person until that person acts (`with_a_person`); work that ends before its action ran
undoes our cordon (`end_and_release`)."""

from __future__ import annotations

from typing import Any, Literal

import slurm_heal.policy.cordon as cordon
import slurm_heal.policy.person as person
from slurm_heal.models import Remediation
from slurm_heal.policy.facts import ended_at
from slurm_heal.policy.notices import notice
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Action


def with_a_person(ws: WorkingSet, led: Ledger, name: str) -> bool:
    """SPEC E1: the node's latest remediation handed it to a person: nothing automatic
    (an alert or a detector's request) starts on it until a person acts. Recorded
    once while it holds."""
    past = [r for r in led.of_node(name) if r.phase.terminal]
    last = max(past, key=lambda r: (ended_at(r) or r.updated, r.id), default=None)
    if last is None or not last.data.handed_to_person or last.data.handed_ended:
        return False
    node = ws.node(name)
    ended = person.hand_over_ended(last, node) if node is not None else None
    if ended is not None:
        # SPEC S8 (issue 32 item 10): that person acted: the hand-over is over, and
        # a new fault is remediated again (what was published when it was handed
        # over opens nothing: `person.covers`). Kept on the record: our own drain of
        # a new fault later does not hand the node back to the person.
        led.put(last.model_copy(update={"data": last.data.but(
            handed_ended=True, handed_ended_at=ws.now)}))
        led.record(name, "released", "S8", f"{ended}: the hand-over has ended; a new "
                   "fault on it is remediated again", last)
        return False
    if led.once(notice("person", name), last.id):
        led.record(name, "blocked", "E1", f"{name} was handed to a person after "
                   f"{last.id}; nothing automatic until a person acts", last)
    return True


def fail(ws: WorkingSet, led: Ledger, rem: Remediation, rule: str, why: str,
         release: bool = True) -> None:
    """L5: the remediation ends failed; the next recommendation follows E1. A failed
    last step of the ladder ends with a person, never a loop. ``release=False``: the
    cordon stays although no alert is left (a failed post-repair gate, SPEC V4)."""
    ladder = ws.policy.escalation.steps
    # An action off the ladder has no next step either (E1 "never a loop").
    top = (rem.action is Action.MIGRATE or rem.action not in ladder
           or rem.action is ladder[-1])
    if top:
        fail_to_person(ws, led, rem, rule, why + f"; {rem.node} stays cordoned",
                       f"{rem.action.value} did not fix {rem.node}: it stays cordoned and "
                       "is handed to a person with a removal recommendation (slurm-heal "
                       "never removes, Q2)", tell_rule="E1")
        return
    tail = "; the next recommendation follows E1"
    if not release:
        # SPEC V4: no alert is left to recommend from: say what moves it on.
        tail += (f": {rem.node} stays cordoned until the fault is seen again (the next "
                 f"step, E1), or a person requests an action (slurm-heal request "
                 f"{rem.node} ACTION) or resumes it")
    rem = led.step(rem, "failed", rule, why + tail)
    led.effect("notify", rem.node, rem, "notify", why=why + tail, rule=rule)
    if release and ws.evidence(rem.node) is None:
        cordon.release(ws, led, rem, "failed with no alert left")


def hand_back(ws: WorkingSet, led: Ledger, rem: Remediation, why: str) -> None:
    """SPEC S8: a person resumed the node: the remediation ends with them (recorded,
    nothing disruptive after it), and its alert as seen now opens nothing new."""
    ev = rem.data.evidence_fault
    # What the person saw: every alert published on the node now (the node check
    # acknowledges them on its next run; until then none opens a new remediation:
    # `person.covers`), and this one's acknowledgement if the check made it already.
    seen = set(person.seen_now(ws, rem.node))
    if ev:
        seen |= set(person.marks(person.acknowledged(ws, rem.node, ev)))
    led.step(rem, "cancelled", "S8", f"{why}: a person's hand wins; {rem.id} is handed "
             f"to them and nothing disruptive runs on {rem.node}"
             + (f"; {ev} opens nothing new until the node check sees something new"
                 if ev else ""),
             data={"resumed_by_person": True, "seen_evidence": tuple(sorted(seen))})


def end_and_release(ws: WorkingSet, led: Ledger, rem: Remediation,
                    phase: Literal["denied", "cancelled", "withdrawn"], rule: str, why: str,
                    **changes: Any) -> Remediation:
    """The remediation ends before its action ran (``denied`` P2, ``cancelled`` P4,
    ``withdrawn`` L4 or P1) under ``rule`` with ``why`` (``changes``: the step's, such as
    ``by`` and ``approval_rule``), and our cordon of its node is undone where it is ours
    and nothing keeps the node out (`cordon.release`, house style 2)."""
    rem = led.step(rem, phase, rule, why, **changes)
    cordon.release(ws, led, rem, phase)
    return rem


def fail_to_person(ws: WorkingSet, led: Ledger, rem: Remediation, rule: str, why: str,
                   tell: str, *, phase: Literal["failed", "cancelled"] = "failed",
                   tell_rule: str | None = None, notify: bool = True) -> None:
    """The remediation ends (``failed``, or ``cancelled`` where a person ended our work)
    under ``rule`` with ``why``, and is handed to a person, who is told ``tell`` (under
    ``tell_rule``, default ``rule``): nothing automatic starts on the node until a person
    acts (SPEC E1, L1, L5, P3, S8, V4, D5). The one place of that ending."""
    rem = led.step(rem, phase, rule, why, data={"handed_to_person": True})
    hand_to_person(ws, led, rem, tell_rule or rule, tell, notify=notify)


def hand_to_person(ws: WorkingSet, led: Ledger, rem: Remediation, rule: str,
                   msg: str, notify: bool = True) -> None:
    """The end of automatic work on a node: an ``escalated`` step and a notification.
    The remediation carries ``handed_to_person``; nothing automatic starts on the node
    until a person acts (E1)."""
    node = ws.node(rem.node)
    # SPEC S8: the node as it is handed over, and what was published then: the
    # hand-over ends when a person acts on it (`person.hand_over_ended`).
    rem = led.step(rem, "escalated", rule, msg, data={
        "handed_to_person": True, "seen_evidence": person.seen_now(ws, rem.node),
        "handed_out_of_service": node is None or node.drained or node.down,
        "handed_reason": node.reason if node is not None else ""})
    if notify:  # (S7 max age: the incident's one notice says it for all its nodes)
        led.effect("notify", rem.node, rem, "notify", why=msg, rule=rule)
