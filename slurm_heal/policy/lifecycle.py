"""The life cycle of one remediation (SPEC L1): proposed -> approved (P2) -> cordoned
-> waiting/draining (P3) -> acting -> returning -> done, or failed / cancelled /
withdrawn (L4)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import slurm_heal.policy.acting as acting
import slurm_heal.policy.endings as endings
import slurm_heal.policy.holding as holding
import slurm_heal.policy.person as person
from slurm_heal.config import format_duration
from slurm_heal.models import EffectKind, Phase, Remediation, idempotency_key, mark
from slurm_heal.policy.cordon import marker
from slurm_heal.policy.facts import (
    CORDON_TRIES,
    POLL_EVERY,
    PRE_ACT,
    RESEND_TRIES,
    iso,
)
from slurm_heal.policy.gates import evidence_hold, open_incident_hold
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import NodeInfo


def approve(ws: WorkingSet, led: Ledger, rem: Remediation) -> Remediation:
    """SPEC P2: the most specific matching rule decides; the rule is recorded."""
    if rem.origin == "operator":
        return led.step(rem, "approved", "P2:person", f"requested by {rem.requested_by}, "
                        "a person", approved_by=rem.requested_by, approval_rule="P2:person")
    pool = ws.pool(rem.node)
    fault = (rem.data.evidence_fault or rem.fault) if rem.origin == "alert" else rem.fault
    # Most specific first; a tie goes to the more cautious mode, then file order.
    mode, rid = ws.policy.approvals.decide(fault, rem.action, rem.node, pool)
    if rem.data.approval_pending == rid and mode == "manual":
        return rem
    if mode == "auto":
        return led.step(rem, "approved", rid, f"auto-approved by {rid} for "
                        f"{fault} / {rem.action.value} on {rem.node}", approval_rule=rid)
    if mode == "deny":
        return endings.end_and_release(ws, led, rem, "denied", rid, f"{rid} denies "
                                       f"{rem.action.value} for {fault} on {rem.node}",
                                       approval_rule=rid)
    rem = led.step(rem, "proposed", rid, f"waits for a person: slurm-heal approve "
                   f"{rem.node} (or deny)", approval_rule=rid)
    return led.put(rem.model_copy(update={"data": rem.data.but(approval_pending=rid)}))


def advance(ws: WorkingSet, led: Ledger, rem: Remediation) -> None:
    """Move one remediation as far as this snapshot allows.

    SPEC P1/Q4, O6 first: a request held for want of evidence waits for it before it is
    put to anyone's approval (a person is not asked to approve what cannot run), is
    recorded and notified once, and waits at most ``requests.evidence_wait``. The
    evidence is asked directly (issue 32 item 5): a pause, someone else's drain, an
    incident, the breaker or a cooldown holding the request too never hide it, nor
    stop the wait's bound."""
    if rem.origin != "alert" and rem.phase in (Phase.PROPOSED, Phase.APPROVED) \
            and ws.node(rem.node) is not None:
        hold = evidence_hold(ws, led, rem)
        if hold is not None:
            wait_for_evidence(ws, led, rem, hold)
            return
    node = ws.node(rem.node)
    if node is None:
        if rem.phase in PRE_ACT:
            led.step(rem, "cancelled", "L3", f"{rem.node} is no longer in Slurm")
        return
    # SPEC S8: a person resumed the node: theirs now (before L4: their resume is no
    # cleared alert, even once the node check has acknowledged it).
    why = person.resumed(ws, led, rem, node)
    if why is not None:
        endings.hand_back(ws, led, rem, why)
        return
    if rem.phase in person.BEFORE_CORDON and not rem.data.held_by_check \
            and person.check_drained(node):
        rem = led.put(rem.model_copy(update={"data": rem.data.but(held_by_check=True)}))
    if rem.phase in person.BEFORE_CORDON and not rem.data.held_by_person \
            and person.person_holds(node):
        rem = led.put(rem.model_copy(update={"data": rem.data.but(held_by_person=True)}))
    ev = rem.data.evidence_fault
    # Check data that cannot be read is no news, not a cleared alert (SPEC I2, L4).
    unreadable = ws.check_of(rem.node).problem
    if rem.phase in PRE_ACT and ev and not ws.active(rem.node, ev) and not unreadable:
        endings.end_and_release(ws, led, rem, "withdrawn", "L4", f"{ev} cleared on {rem.node} "
                                f"before the {rem.action.value} ran: the recommendation is "
                                "withdrawn")
        return
    HANDLERS[rem.phase](ws, led, holding.lifted(ws, led, rem, node), node)


def proposed(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> None:
    rem = approve(ws, led, rem)
    if rem.phase is Phase.APPROVED:
        approved(ws, led, rem, node)
    elif rem.phase is Phase.PROPOSED:
        # SPEC S7, O6 (issue 32 item 6): a proposal an open incident holds waits for
        # the incident's end, not for a person's approval of this node: it is shown
        # held by the incident, never as one more approval to give.
        hold = open_incident_hold(ws, led, rem)
        if hold is not None:
            holding.apply_hold(ws, led, rem, hold)
        elif rem.data.hold is not None and rem.data.hold.by_incident:
            holding.unhold(led, rem)


def approved(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> None:
    cleared = holding.cleared_to_start(ws, led, rem)
    if cleared is None:
        return
    rem = cleared
    led.effect("cordon", rem.node, rem, "cordon", why="no new jobs", rule="L1",
               reason=marker(rem))
    led.step(rem, "cordoned", "L1", f"drain {rem.node} (no new jobs) before the "
             f"{rem.action.value}")
    # the next cycle sees the drain take effect


def wait_and_drain(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> None:
    """SPEC P3 + L1: wait for jobs (at most max_wait), evict at the limit, then act."""
    if not node.drained:
        cordon_again(ws, led, rem)
        return
    if holding.taken_over(ws, led, rem, node):
        return
    jobs = ws.jobs(rem.node)
    w = ws.policy.waiting
    start = rem.phase_times.get("cordoned", ws.now)
    limit = start + w.max_wait if w.max_wait is not None else None
    if jobs:
        ids = ", ".join(str(j) for j in jobs)
        if rem.phase is Phase.CORDONED:
            rem = led.step(rem, "waiting", "P3", f"{len(jobs)} job(s) still run on "
                           f"{rem.node} ({ids}); waiting "
                           + (f"until {iso(limit)} at most" if limit else
                               "for them to end (never interrupted)"))
        if limit is None:
            return
        signal_due = bool(w.signal) and not rem.data.signalled \
            and ws.now >= limit - w.signal_lead
        last_evict = rem.data.evict_at
        evict_due = ws.now >= limit and (
            not rem.data.evict_n
            or (last_evict is not None and ws.now >= last_evict + w.evict_every))
        # O2 / house style 8 (issue 8): pause and recommend-only hold signalling and
        # eviction too, not only the start and the act.
        if (signal_due or evict_due) and holding.gate(ws, led, rem):
            led.wake(ws.now + POLL_EVERY)
            return
        if w.signal and not rem.data.signalled and ws.now >= limit - w.signal_lead:
            led.effect("signal_jobs", rem.node, rem, "signal", signal=w.signal, rule="P3",
                       why=f"checkpoint before the wait limit at {iso(limit)}")
            rem = led.step(rem, "waiting", "P3", f"sent {w.signal} to job(s) {ids} so they "
                           f"can checkpoint before {iso(limit)}", data={"signalled": True})
        elif w.signal and not rem.data.signalled:
            led.wake(limit - w.signal_lead)
        if ws.now < limit:
            led.wake(limit)
            return
        n = rem.data.evict_n
        last = rem.data.evict_at
        if n == 0 or (last is not None and ws.now >= last + w.evict_every):
            evict(ws, led, rem, ids, n)
        led.wake(ws.now + w.evict_every)
        return
    if holding.gate(ws, led, rem):
        return
    if any(a.key == idempotency_key(rem.id, "act", 0) for a in rem.attempts):
        return  # SPEC S6: never twice
    led.effect("act", rem.node, rem, "act", 0, rule="L1",
               why=f"{rem.action.value} {rem.node}")
    led.step(rem, "acting", "L1", f"no jobs left on {rem.node}: {rem.action.value} it")
    led.wake(ws.now + POLL_EVERY)


def evict(ws: WorkingSet, led: Ledger, rem: Remediation, ids: str, n: int) -> None:
    """SPEC P3 (issue 8, defect 5): eviction try ``n`` (0-based) at the wait limit,
    bounded: ``evict_tries`` requeues (or cancels), then as many cancels when policy
    allows (``cancel_when_stuck``); jobs still there after that end the remediation
    failed with a person (the node stays cordoned, the S3/S4 slot is freed)."""
    w = ws.policy.waiting
    tries = w.evict_tries
    then_cancel = w.at_limit == "requeue" and w.cancel_when_stuck
    total = tries * (2 if then_cancel else 1)
    evictions = [a for a in rem.attempts if a.effect in ("requeue_jobs", "cancel_jobs")]
    failed = [a for a in evictions if a.outcome == "failed"]
    note = (f"; the last {failed[-1].effect.split('_')[0]} failed: {failed[-1].detail}"
            if failed and failed[-1].detail else "")
    if n >= total:
        endings.fail_to_person(
            ws, led, rem, "P3",
            f"job(s) {ids} still run on {rem.node} after {n} eviction tries{note}; "
            f"{rem.node} stays cordoned",
            f"job(s) {ids} on {rem.node} could not be evicted ({n} tries{note}): a person "
            f"decides (requeue or cancel them, or cancel {rem.id}); {rem.node} stays "
            "cordoned")
        return
    how = "cancel" if w.at_limit == "cancel" or n >= tries else "requeue"
    kind: EffectKind = "cancel_jobs" if how == "cancel" else "requeue_jobs"
    led.effect(kind, rem.node, rem, how, n, rule="P3",
               why=f"wait limit {format_duration(w.max_wait or timedelta())} passed")
    led.step(rem, "draining", "P3", f"the wait limit passed: {how} job(s) {ids} (try "
             f"{n + 1} of {total}){note}",
             data={"evict_n": n + 1, "evict_at": ws.now})


def cordon_again(ws: WorkingSet, led: Ledger, rem: Remediation) -> None:
    """SPEC L1: the node is not drained although the remediation started. Our cordon
    is in flight (wait), failed (send it again, at most CORDON_TRIES in all), or was
    applied and a person resumed the node since (cancel: it is theirs now). Never a
    remediation that waits forever holding its S3/S4 slot."""
    cordons = [a for a in rem.attempts if a.effect == "cordon"]
    last = cordons[-1] if cordons else None
    sent_now = ("cordon", rem.id) in led.planned
    if sent_now:
        pass  # cordoned in this very decide() call (a command or a new request)
    elif last is None or last.outcome == "failed":
        n = len(cordons)
        if n < CORDON_TRIES and holding.gate(ws, led, rem):
            led.wake(ws.now + POLL_EVERY)
            return  # O2: a paused controller sends no cordon either
        if n >= CORDON_TRIES:
            endings.fail_to_person(
                ws, led, rem, "L1", f"{rem.node} could not be drained after {n} tries"
                + (f" ({last.detail})" if last and last.detail else ""),
                f"slurm-heal could not drain {rem.node}: a person must look; nothing "
                "automatic on it until then")
            return
        led.effect("cordon", rem.node, rem, "cordon", n, rule="L1",
                   why="no new jobs" + (" (again: the last cordon failed)" if n else ""),
                   reason=marker(rem))
        if n:
            led.record(rem.node, rem.phase.value, "L1", f"cordon of {rem.node} failed"
                       + (f" ({last.detail})" if last and last.detail else "")
                       + f": try {n + 1} of {CORDON_TRIES}", rem)
    elif last.outcome is None and ws.now >= last.started + ws.policy.safety.step_timeout:
        # L1 (issue 8): recorded, but the controller stopped before it ran (or before
        # it recorded the outcome). A drain with our marker is safe to send again under
        # the same key; at most RESEND_TRIES times, then a person looks.
        tmo = format_duration(ws.policy.safety.step_timeout)
        if last.resent >= RESEND_TRIES:
            endings.fail_to_person(
                ws, led, rem, "L1",
                f"the cordon of {rem.node} was recorded but never reported an outcome "
                f"({last.resent + 1} sends, {tmo} each)",
                f"slurm-heal could not drain {rem.node} (its cordon never reported an "
                "outcome): a person must look; nothing automatic on it until then")
            return
        if holding.gate(ws, led, rem):
            led.wake(ws.now + POLL_EVERY)
            return
        led.effect("cordon", rem.node, rem, "cordon", same=last.key, rule="L1",
                   why="no new jobs (again, same key: the last cordon never reported an "
                   "outcome)", reason=marker(rem))
        led.record(rem.node, rem.phase.value, "L1", f"the cordon of {rem.node} has had no "
                   f"outcome for {tmo} (the controller stopped before it ran?): sent again "
                   f"with the same key ({last.resent + 2} of {RESEND_TRIES + 1})", rem)
    elif last.outcome == "ok":
        # Our drain took effect and the node is in service again: a person resumed it
        # (SPEC S8; advance() sees that first, this is the same end).
        endings.hand_back(ws, led, rem, f"{rem.node} was resumed by a person after our cordon")
        return
    led.wake(ws.now + POLL_EVERY)  # in flight: the next snapshot shows the drain


def wait_for_evidence(ws: WorkingSet, led: Ledger, rem: Remediation, hold: Hold) -> None:
    wait = ws.policy.requests.evidence_wait
    deadline = rem.created + wait
    if ws.now >= deadline:
        endings.end_and_release(ws, led, rem, "withdrawn", "P1", f"no confirmed alert on "
                                f"{rem.node} within {format_duration(wait)} "
                                f"(requests.evidence_wait): the {rem.action.value} request "
                                "is withdrawn")
        return
    if rem.data.blocked != mark("P1"):
        # Once per remediation: a person's approve while it waits unblocks it, and the
        # next look (in this call or a later one) holds it again without a second notice
        # under the same key (S6).
        told = idempotency_key(rem.id, "notify-evidence", 0)
        if not any(a.key == told for a in rem.attempts) \
                and not any(e.key == told for e in led.effects):
            who = rem.requested_by if rem.origin == "operator" else \
                f"detector {rem.detector}"
            led.effect("notify", rem.node, rem, "notify-evidence", rule="P1",
                       why=f"{rem.action.value} of {rem.node} requested by {who} "
                       f"{hold.why}")
    holding.blocked(led, rem, hold)
    led.wake(deadline)


def _over(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> None:
    """A closed remediation does not move (its closing step was its last)."""


# SPEC L1: what moves a remediation on from each phase (ARCHITECTURE: a handler per phase).
HANDLERS: dict[Phase, Callable[[WorkingSet, Ledger, Remediation, NodeInfo], None]] = {
    Phase.PROPOSED: proposed,
    Phase.APPROVED: approved,
    Phase.CORDONED: wait_and_drain,
    Phase.WAITING: wait_and_drain,
    Phase.DRAINING: wait_and_drain,
    Phase.ACTING: lambda ws, led, rem, node: acting.acting(ws, led, rem),
    Phase.RETURNING: acting.returning,
    **{p: _over for p in Phase if p.terminal},
}
