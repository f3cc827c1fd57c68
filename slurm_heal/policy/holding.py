"""A gate's Hold applied to the ledger (SPEC O6): one ``blocked`` step per limit (not
one per cycle), the hold stored with the remediation (``Work.hold``), the wake, the
breaker (S5), a person told once where the hold says so; and the holds a started
remediation meets on its way (recommend-only and the pause before each disruptive
step, someone else's drain before the act, D5).

The gates themselves (`gates`) are pure: they return a Hold and write nothing.
"""

from __future__ import annotations

from slurm_heal.models import OPENINGS_KEPT, Phase, Remediation, mark
from slurm_heal.policy.facts import POLL_EVERY
from slurm_heal.policy.gates import mode_hold, start_hold
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import NodeInfo


def blocked(led: Ledger, rem: Remediation, hold: Hold) -> Remediation:
    """Record (once per mark) that ``hold`` holds ``rem``, and store what it is
    (``Work.hold``, O6): a hold whose words or end changed under the same mark is
    stored again without a second record."""
    held = hold.held()
    if rem.data.blocked == hold.key:
        if rem.data.hold == held:
            return rem
        return led.put(rem.model_copy(update={"data": rem.data.but(hold=held)}))
    rem = led.step(rem, "blocked", hold.rule, hold.why, mark=hold.key)
    return led.put(rem.model_copy(update={
        "data": rem.data.but(blocked=hold.key, hold=held)}))


def apply_hold(ws: WorkingSet, led: Ledger, rem: Remediation, hold: Hold) -> Remediation:
    """Record (once) that ``hold`` holds ``rem`` back; open the breaker if it does;
    tell a person once where the hold says so."""
    if hold.wake is not None:
        led.wake(hold.wake)
    if hold.opens_breaker:
        # Keep reset_by/reset_at: the count restarts from the last reset.
        led.breaker = led.breaker.model_copy(update={
            "open": True, "opened_at": ws.now, "why": hold.why,
            "openings": (*led.breaker.openings, ws.now)[-OPENINGS_KEPT:]})
        led.breaker_changed = True
    if hold.notify and rem.data.blocked != hold.key:
        led.effect("notify", rem.node, rem, hold.notify, why=hold.why, rule=hold.rule)
    return blocked(led, rem, hold)


def unhold(led: Ledger, rem: Remediation) -> Remediation:
    """The limit that held ``rem`` no longer does (nothing recorded: the next step
    says what happens); a later hold is recorded afresh."""
    if rem.data.blocked is None and rem.data.hold is None:
        return rem
    return led.put(rem.model_copy(update={"data": rem.data.but(blocked=None, hold=None)}))


def lifted(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> Remediation:
    """A started remediation's stored hold that no longer holds (the pause or
    recommend-only mode ended, someone else's drain is ours again) is cleared, so
    `status` never shows a hold that has lifted (O6)."""
    held = rem.data.hold
    if held is None or rem.phase in (Phase.PROPOSED, Phase.APPROVED):
        return rem
    if held.rule in ("pause", "recommend_only") and mode_hold(ws, led, rem, False) is None:
        return unhold(led, rem)
    if held.rule == "D5" and not ws.foreign(node):
        return unhold(led, rem)
    return rem


def gate(ws: WorkingSet, led: Ledger, rem: Remediation) -> bool:
    """Whether recommend-only or the pause holds a started remediation's next
    disruptive step (recorded once). The breaker does not: it stops new automatic
    work (S5); holding a half-done one would only keep its node drained longer."""
    hold = mode_hold(ws, led, rem, starting=False)
    if hold is None:
        return False
    apply_hold(ws, led, rem, hold)
    return True


def cleared_to_start(ws: WorkingSet, led: Ledger, rem: Remediation) -> Remediation | None:
    """``rem`` as it goes on to its cordon, or None when a limit holds it back."""
    hold, evidence = start_hold(ws, led, rem)
    if evidence is not None:
        rem = led.put(rem.model_copy(update={
            "data": rem.data.but(evidence_fault=evidence)}))
    if hold is None:
        return rem
    apply_hold(ws, led, rem, hold)
    return None


def taken_over(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> bool:
    """House style 2 / D5 (issue 8): someone else drained (or downed) the node with a
    reason of their own after our cordon and before the act. Nothing disruptive runs
    on it (no signal, no eviction, no act): the remediation is held, recorded once
    and a person is told once. It goes on when our marker is back; when that person
    resumes the node, cordon_again() cancels it (the node is theirs)."""
    if not ws.foreign(node):
        return False
    if rem.data.blocked != mark("D5"):
        why = (f"{rem.node} was {'set DOWN' if node.down else 'drained'} by someone else "
               f"({node.reason!r}) before the {rem.action.value} ran: nothing disruptive "
               f"runs on it; {rem.id} is held until that person resumes the node "
               "(the remediation is then cancelled) or cancels it")
        blocked(led, rem, Hold(
            "D5", why, lifts="our marker is back on the node (it goes on), or that "
            "person resumes it (the remediation is then cancelled) or cancels it",
            command=f"slurm-heal cancel {rem.id}"))
        n = sum(1 for a in rem.attempts if a.step == "notify-held")
        led.effect("notify", rem.node, rem, "notify-held", n, why=why, rule="D5")
    led.wake(ws.now + POLL_EVERY)
    return True
