"""The safety gates held before a remediation's next disruptive step: recommend-only,
pause, D5, an incident and the settle wait (S7), the breaker (S5), the cooldown (S2),
evidence (P1/Q4), migrate spares (E5), concurrency (S3), one per pool (S4), one per
switch/block/rack (S7 blast radius) and pool capacity (Q4).

Each gate is a pure function of the working set that returns a `Hold` (the rule, why,
and when to look again) or None; the breaker's opening (S5) is part of the Hold it
returns, never written by the gate. `Gates` applies a Hold: one ``blocked`` step per
limit (not one per cycle), the wake, the breaker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from slurm_heal.config import format_duration
from slurm_heal.models import Phase, Remediation
from slurm_heal.policy import incidents
from slurm_heal.policy.cordon import Cordon
from slurm_heal.policy.facts import (
    POLL_EVERY,
    act_attempts,
    ended_at,
    gate_failed_last,
    is_automatic,
    iso,
)
from slurm_heal.policy.working import Working
from slurm_heal.types import Action, NodeInfo

HoldRule = Literal["recommend_only", "pause", "D5", "S5", "S2", "P1", "E5", "S3", "S4", "Q4",
                   "E7", "S7"]


@dataclass(frozen=True, slots=True)
class Hold:
    """A limit that holds a remediation back from its next disruptive step."""

    rule: HoldRule
    why: str
    wake: datetime | None = None  # when the limit lifts by itself (S2)
    opens_breaker: bool = False  # S5: this hold opens the breaker (why = the breaker's why)
    # Recorded once per mark (default: the rule): S7 holds for different reasons (the
    # settle wait, an incident, a component's blast radius) are each recorded once.
    mark: str | None = None


def mode_hold(w: Working, rem: Remediation, starting: bool) -> Hold | None:
    """O2: recommend-only mode and the global pause hold every disruptive step."""
    if w.policy.mode == "recommend_only":
        return Hold("recommend_only", f"recommend-only mode: would "
                    f"{'cordon ' + rem.node + ' and ' if starting else ''}"
                    f"{rem.action.value} now; nothing is executed")
    if w.paused:
        return Hold("pause", "slurm-heal is paused: nothing disruptive starts until a "
                    "person unpauses it")
    return None


def breaker_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S5: N automatic starts within the window open the breaker."""
    pol = w.policy.safety
    if w.breaker.open:
        return Hold("S5", "the breaker is open: automatic remediation waits for a person "
                    "(slurm-heal reset-breaker)")
    since = w.now - pol.breaker_window
    if w.breaker.reset_at and w.breaker.reset_at > since:
        since = w.breaker.reset_at  # a reset starts a fresh count
    starts = sum(1 for i in w.ix.recent_starts() if i != rem.id
                 and (t := w.rems[i].phase_times.get("cordoned")) is not None and t >= since)
    if starts < pol.breaker_threshold:
        return None
    return Hold("S5", f"{starts} automatic remediations started within "
                f"{format_duration(pol.breaker_window)} (threshold {pol.breaker_threshold}): "
                "the breaker opens; automatic remediation stops until a person resets it",
                opens_breaker=True)


def evidence_words(w: Working, rem: Remediation) -> str:
    """What a request without evidence waits for, the key that takes requests as
    evidence, and when the wait ends (P1/Q4, O6)."""
    key = ("requests.operator_is_evidence" if rem.origin == "operator"
           else "requests.detector_is_evidence")
    wait = w.policy.requests.evidence_wait
    return (f"waits for a confirmed alert on {rem.node}: SPEC P1; set {key} = true to take "
            f"requests as evidence; withdrawn at {iso(rem.created + wait)} if none comes "
            f"(requests.evidence_wait = {format_duration(wait)})")


def request_evidence(w: Working, rem: Remediation) -> tuple[Hold | None, str | None]:
    """P1/Q4: a request needs a confirmed alert unless policy says the request is
    evidence enough. Returns the hold, or the fault to keep as the request's evidence."""
    pol = w.policy.requests
    enough = pol.operator_is_evidence if rem.origin == "operator" else pol.detector_is_evidence
    ev = w.evidence(rem.node)
    # SPEC V4: the node's last remediation failed its post-repair gate: that is the
    # confirmed failure (its results are the evidence), though no alert is active.
    if ev is None and not enough and gate_failed_last(w.of_node(rem.node)) is None:
        return Hold("P1", evidence_words(w, rem)), None
    if ev is not None and rem.data.evidence_fault is None and not enough:
        return None, ev.fault
    return None, None


def room_hold(w: Working, rem: Remediation) -> Hold | None:
    """E5 spares, S3 concurrency, S4 one per pool, Q4 pool capacity."""
    pol = w.policy
    started = w.ix.started(rem.id)
    spares = pol.escalation.migrate_spares
    if rem.action is Action.MIGRATE and spares is not None:
        moving = sum(1 for r in started if r.action is Action.MIGRATE)
        if moving >= spares:
            return Hold("E5", f"all {spares} reserved spare host(s) are in use by other "
                        "migrations")
    nodes = len(w.view.nodes)
    limit = pol.safety.concurrency_limit(nodes)
    if len(started) >= limit:
        return Hold("S3", f"{len(started)} remediation(s) already run; the limit for "
                    f"{nodes} nodes is {limit}")
    pool = w.pool(rem.node)
    if pol.safety.one_per_pool:
        same = [r for r in started if w.pool(r.node) == pool]
        if same:
            return Hold("S4", f"pool {pool} already has {same[0].id} on {same[0].node}: one "
                        "at a time per pool")
    hold = blast_hold(w, rem, started)
    if hold is not None:
        return hold
    members = [n for n in w.pool_members(pool) if n.name != rem.node]
    if members:
        busy = {r.node for r in started}
        up = [n for n in members if not (n.down or n.drained) and n.name not in busy]
        need = int(len(members) * pol.capacity.min_available_percent // 100)
        if len(up) < need:
            return Hold("Q4", f"pool {pool}: only {len(up)} of {len(members)} other nodes in "
                        f"service, {need} must stay")
    return None


def blast_hold(w: Working, rem: Remediation, started: list[Remediation]) -> Hold | None:
    """SPEC S7: at most topology.blast_radius disruptive remediations at once under one
    switch, block or rack."""
    comps = incidents.components(w, rem.node) if started else ()
    limit = w.policy.topology.blast_radius
    for c in comps:
        same = [r for r in started if r.node in c.nodes]
        if len(same) >= limit:
            return Hold("S7", f"{c.label} already has {len(same)} remediation(s) running "
                        f"({same[0].id} on {same[0].node}): at most {limit} at a time under "
                        f"one {c.kind} (topology.blast_radius)", mark=f"S7:{c.id}")
    return None


def incident_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S7: a node in an open incident waits for the incident's end; a related fault
    waits incidents.settle after it was first seen, so a component's failure can show on
    its other nodes before one of them is cordoned."""
    fault = rem.data.evidence_fault or rem.fault
    inc = incidents.open_incident_of(w, rem.node, fault) if w.any_open_incident else None
    if inc is not None:
        return Hold("S7", incidents.hold_words(inc), mark=f"S7:{inc.id}")
    settle = incidents.settle_until(w, rem)
    if settle is not None:
        until, comp = settle
        return Hold("S7", f"{fault} is a fault a shared component can cause: waits until "
                    f"{iso(until)} (incidents.settle = "
                    f"{format_duration(w.policy.incidents.settle)}) to see whether other "
                    f"nodes under {comp.label} show it too (then it is one incident)",
                    wake=until, mark="S7:settle")
    return None


def start_hold(w: Working, rem: Remediation) -> tuple[Hold | None, str | None]:
    """The first limit that holds ``rem`` back from its start (the cordon), in order;
    and the evidence a request was found to have (kept on the record even when a later
    limit holds it)."""
    hold = mode_hold(w, rem, starting=True)
    if hold is not None:
        return hold, None
    node = w.node(rem.node)
    if node is not None and w.foreign(node):
        # SPEC D5 / house style 2: cordoning would replace someone else's reason with
        # our marker, and the resume at the end would undo their drain. Hold until
        # they resume the node (or turn their reason into a heal-request).
        return Hold("D5", f"{rem.node} is {'DOWN' if node.down else 'drained'} by someone "
                    f"else ({node.reason!r}): slurm-heal does not cordon over it; it waits "
                    "until that person resumes the node"), None
    hold = incident_hold(w, rem)
    if hold is not None:
        return hold, None
    if is_automatic(rem):
        hold = breaker_hold(w, rem)
        if hold is not None:
            return hold, None
    # SPEC E6: a failed GPU reset climbs at once: the node never went back to service,
    # so it starts no cooldown (the reboot after it does, as any action).
    ends = [t for r in w.of_node(rem.node) if r.phase.terminal
            and act_attempts(r) and (t := ended_at(r)) is not None
            and not (r.action is Action.RESET_GPU and r.phase is Phase.FAILED)]
    last_end = max(ends, default=None)
    cooldown = w.policy.safety.cooldown
    if last_end is not None and w.now < last_end + cooldown:
        return Hold("S2", f"cooldown: the last remediation on {rem.node} ended at "
                    f"{iso(last_end)}; the next may start {format_duration(cooldown)} later",
                    wake=last_end + cooldown), None
    evidence = None
    if rem.origin != "alert":
        hold, evidence = request_evidence(w, rem)
        if hold is not None:
            return hold, None
    return room_hold(w, rem), evidence


class Gates(Cordon):
    """Applies the gates' Holds to the working set."""

    def blocked(self, rem: Remediation, rule: str, why: str,
                mark: str | None = None) -> Remediation:
        if rem.data.blocked == (mark or rule):
            return rem
        rem = self.step(rem, "blocked", rule, why)
        return self.put(rem.model_copy(update={"data": rem.data.but(blocked=mark or rule)}))

    def apply_hold(self, rem: Remediation, hold: Hold) -> None:
        """Record (once) that ``hold`` holds ``rem`` back; open the breaker if it does."""
        if hold.wake is not None:
            self.wake(hold.wake)
        if hold.opens_breaker:
            # Keep reset_by/reset_at: the count restarts from the last reset.
            self.breaker = self.breaker.model_copy(update={
                "open": True, "opened_at": self.now, "why": hold.why})
            self.breaker_changed = True
        self.blocked(rem, hold.rule, hold.why, hold.mark)

    def gate(self, rem: Remediation) -> bool:
        """Whether recommend-only or the pause holds a started remediation's next
        disruptive step (recorded once). The breaker does not: it stops new automatic
        work (S5); holding a half-done one would only keep its node drained longer."""
        hold = mode_hold(self, rem, starting=False)
        if hold is None:
            return False
        self.apply_hold(rem, hold)
        return True

    def cleared_to_start(self, rem: Remediation) -> Remediation | None:
        """``rem`` as it goes on to its cordon, or None when a limit holds it back."""
        hold, evidence = start_hold(self, rem)
        if evidence is not None:
            rem = self.put(rem.model_copy(update={
                "data": rem.data.but(evidence_fault=evidence)}))
        if hold is None:
            return rem
        self.apply_hold(rem, hold)
        return None

    def taken_over(self, rem: Remediation, node: NodeInfo) -> bool:
        """House style 2 / D5 (issue 8): someone else drained (or downed) the node with a
        reason of their own after our cordon and before the act. Nothing disruptive runs
        on it (no signal, no eviction, no act): the remediation is held, recorded once
        and a person is told once. It goes on when our marker is back; when that person
        resumes the node, cordon_again() cancels it (the node is theirs)."""
        if not self.foreign(node):
            return False
        if rem.data.blocked != "D5":
            why = (f"{rem.node} was {'set DOWN' if node.down else 'drained'} by someone else "
                   f"({node.reason!r}) before the {rem.action.value} ran: nothing disruptive "
                   f"runs on it; {rem.id} is held until that person resumes the node "
                   "(the remediation is then cancelled) or cancels it")
            self.blocked(rem, "D5", why)
            n = sum(1 for a in rem.attempts if a.step == "notify-held")
            self.effect("notify", rem.node, rem, "notify-held", n, why=why, rule="D5")
        self.wake(self.now + POLL_EVERY)
        return True
