"""The life cycle of one remediation (SPEC L1): proposed -> approved (P2) -> cordoned
-> waiting/draining (P3) -> acting -> returning -> done, or failed / cancelled /
withdrawn (L4)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import slurm_heal.policy.person as person
from slurm_heal.config import format_duration
from slurm_heal.models import EffectKind, Phase, Remediation, idempotency_key
from slurm_heal.policy.acting import Acting
from slurm_heal.policy.cordon import marker
from slurm_heal.policy.facts import (
    CORDON_TRIES,
    POLL_EVERY,
    PRE_ACT,
    RESEND_TRIES,
    iso,
)
from slurm_heal.policy.gates import open_incident_hold
from slurm_heal.types import NodeInfo


class Lifecycle(Acting):
    """One remediation moved as far as the snapshot allows."""

    def approve(self, rem: Remediation) -> Remediation:
        """SPEC P2: the most specific matching rule decides; the rule is recorded."""
        if rem.origin == "operator":
            return self.step(rem, "approved", "P2:person", f"requested by {rem.requested_by}, "
                             "a person", approved_by=rem.requested_by, approval_rule="P2:person")
        pool = self.pool(rem.node)
        fault = (rem.data.evidence_fault or rem.fault) if rem.origin == "alert" else rem.fault
        # Most specific first; a tie goes to the more cautious mode, then file order.
        mode, rid = self.policy.approvals.decide(fault, rem.action, rem.node, pool)
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
        # SPEC S8: a person resumed the node: theirs now (before L4: their resume is no
        # cleared alert, even once the node check has acknowledged it).
        why = person.resumed(self, rem, node)
        if why is not None:
            self.hand_back(rem, why)
            return
        if rem.phase in person.BEFORE_CORDON and not rem.data.held_by_check \
                and person.check_drained(node):
            rem = self.put(rem.model_copy(update={"data": rem.data.but(held_by_check=True)}))
        if rem.phase in person.BEFORE_CORDON and not rem.data.held_by_person \
                and person.person_holds(node):
            rem = self.put(rem.model_copy(update={"data": rem.data.but(held_by_person=True)}))
        ev = rem.data.evidence_fault
        # Check data that cannot be read is no news, not a cleared alert (SPEC I2, L4).
        unreadable = self.check_of(rem.node).problem
        if rem.phase in PRE_ACT and ev and not self.active(rem.node, ev) and not unreadable:
            rem = self.step(rem, "withdrawn", "L4", f"{ev} cleared on {rem.node} before the "
                            f"{rem.action.value} ran: the recommendation is withdrawn")
            self.release(rem, "withdrawn")
            return
        HANDLERS[rem.phase](self, self.lifted(rem, node), node)

    def proposed(self, rem: Remediation, node: NodeInfo) -> None:
        rem = self.approve(rem)
        if rem.phase is Phase.APPROVED:
            self.approved(rem, node)
        elif rem.phase is Phase.PROPOSED:
            # SPEC S7, O6 (issue 32 item 6): a proposal an open incident holds waits for
            # the incident's end, not for a person's approval of this node: it is shown
            # held by the incident, never as one more approval to give.
            hold = open_incident_hold(self, rem)
            if hold is not None:
                self.apply_hold(rem, hold)
            elif rem.data.hold is not None and rem.data.hold.by_incident:
                self.unhold(rem)

    def approved(self, rem: Remediation, node: NodeInfo) -> None:
        cleared = self.cleared_to_start(rem)
        if cleared is None:
            return
        rem = cleared
        self.effect("cordon", rem.node, rem, "cordon", why="no new jobs", rule="L1",
                    reason=marker(rem))
        self.step(rem, "cordoned", "L1", f"drain {rem.node} (no new jobs) before the "
                  f"{rem.action.value}")
        # the next cycle sees the drain take effect

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
                                + (f"until {iso(limit)} at most" if limit else
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
            if (signal_due or evict_due) and self.gate(rem):
                self.wake(self.now + POLL_EVERY)
                return
            if w.signal and not rem.data.signalled and self.now >= limit - w.signal_lead:
                self.effect("signal_jobs", rem.node, rem, "signal", signal=w.signal, rule="P3",
                            why=f"checkpoint before the wait limit at {iso(limit)}")
                rem = self.step(rem, "waiting", "P3", f"sent {w.signal} to job(s) {ids} so they "
                                f"can checkpoint before {iso(limit)}", data={"signalled": True})
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
        if self.gate(rem):
            return
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

    def cordon_again(self, rem: Remediation) -> None:
        """SPEC L1: the node is not drained although the remediation started. Our cordon
        is in flight (wait), failed (send it again, at most CORDON_TRIES in all), or was
        applied and a person resumed the node since (cancel: it is theirs now). Never a
        remediation that waits forever holding its S3/S4 slot."""
        cordons = [a for a in rem.attempts if a.effect == "cordon"]
        last = cordons[-1] if cordons else None
        sent_now = ("cordon", rem.id) in self.planned
        if sent_now:
            pass  # cordoned in this very decide() call (a command or a new request)
        elif last is None or last.outcome == "failed":
            n = len(cordons)
            if n < CORDON_TRIES and self.gate(rem):
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
                        reason=marker(rem))
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
            if self.gate(rem):
                self.wake(self.now + POLL_EVERY)
                return
            self.effect("cordon", rem.node, rem, "cordon", same=last.key, rule="L1",
                        why="no new jobs (again, same key: the last cordon never reported an "
                        "outcome)", reason=marker(rem))
            self.record(rem.node, rem.phase.value, "L1", f"the cordon of {rem.node} has had no "
                        f"outcome for {tmo} (the controller stopped before it ran?): sent again "
                        f"with the same key ({last.resent + 2} of {RESEND_TRIES + 1})", rem)
        elif last.outcome == "ok":
            # Our drain took effect and the node is in service again: a person resumed it
            # (SPEC S8; advance() sees that first, this is the same end).
            self.hand_back(rem, f"{rem.node} was resumed by a person after our cordon")
            return
        self.wake(self.now + POLL_EVERY)  # in flight: the next snapshot shows the drain


def _over(w: Lifecycle, rem: Remediation, node: NodeInfo) -> None:
    """A closed remediation does not move (its closing step was its last)."""


# SPEC L1: what moves a remediation on from each phase (ARCHITECTURE: a handler per phase).
HANDLERS: dict[Phase, Callable[[Lifecycle, Remediation, NodeInfo], None]] = {
    Phase.PROPOSED: Lifecycle.proposed,
    Phase.APPROVED: Lifecycle.approved,
    Phase.CORDONED: Lifecycle.wait_and_drain,
    Phase.WAITING: Lifecycle.wait_and_drain,
    Phase.DRAINING: Lifecycle.wait_and_drain,
    Phase.ACTING: lambda w, rem, node: w.acting(rem),
    Phase.RETURNING: Lifecycle.returning,
    **{p: _over for p in Phase if p.terminal},
}
