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

from collections.abc import Callable

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
from slurm_heal.policy.holds import Hold, HoldRule
from slurm_heal.policy.lemon import lemon_hold
from slurm_heal.policy.working import Working
from slurm_heal.types import Action, NodeInfo

__all__ = ["START_GATES", "Gates", "Hold", "HoldRule", "evidence_hold", "mode_hold",
           "request_evidence", "start_hold"]

def mode_hold(w: Working, rem: Remediation, starting: bool) -> Hold | None:
    """O2: recommend-only mode and the global pause hold every disruptive step."""
    if w.policy.mode == "recommend_only":
        return Hold("recommend_only", f"recommend-only mode: would "
                    f"{'cordon ' + rem.node + ' and ' if starting else ''}"
                    f"{rem.action.value} now; nothing is executed",
                    lifts='a person sets mode = "normal" in the policy (recommend-only '
                    "executes nothing)")
    if w.paused:
        return Hold("pause", "slurm-heal is paused: nothing disruptive starts until a "
                    "person unpauses it", lifts="a person unpauses slurm-heal",
                    command="slurm-heal unpause")
    return None


def start_mode_hold(w: Working, rem: Remediation) -> Hold | None:
    """O2 at the start (the cordon): what would run is said."""
    return mode_hold(w, rem, starting=True)


def foreign_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC D5 / house style 2: cordoning would replace someone else's reason with our
    marker, and the resume at the end would undo their drain. Hold until they resume the
    node (or turn their reason into a heal-request)."""
    node = w.node(rem.node)
    if node is None or not w.foreign(node):
        return None
    return Hold("D5", f"{rem.node} is {'DOWN' if node.down else 'drained'} by someone "
                f"else ({node.reason!r}): slurm-heal does not cordon over it; it waits "
                "until that person resumes the node",
                lifts=f"the person who {'set it DOWN' if node.down else 'drained it'} "
                "resumes the node (or turns the reason into a heal-request)",
                command=f"scontrol update nodename={rem.node} state=resume")


def breaker_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S5: N automatic starts within the window open the breaker (automatic
    remediations only: a person's stays possible)."""
    if not is_automatic(rem):
        return None
    pol = w.policy.safety
    lifts = "a person resets the breaker (a person's own request or approval goes on)"
    if w.breaker.open:
        return Hold("S5", "the breaker is open: automatic remediation waits for a person "
                    "(slurm-heal reset-breaker)", lifts=lifts,
                    command="slurm-heal reset-breaker")
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
                opens_breaker=True, lifts=lifts, command="slurm-heal reset-breaker")


def cooldown_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S2: the cooldown after the node's last remediation that acted."""
    # SPEC E6: a failed GPU reset climbs at once: the node never went back to service,
    # so it starts no cooldown (the reboot after it does, as any action).
    ends = [t for r in w.of_node(rem.node) if r.phase.terminal
            and act_attempts(r) and (t := ended_at(r)) is not None
            and not (r.action is Action.RESET_GPU and r.phase is Phase.FAILED)]
    last_end = max(ends, default=None)
    cooldown = w.policy.safety.cooldown
    if last_end is None or w.now >= last_end + cooldown:
        return None
    until = last_end + cooldown
    return Hold("S2", f"cooldown: the last remediation on {rem.node} ended at "
                f"{iso(last_end)}; the next may start {format_duration(cooldown)} later",
                wake=until, lifts=f"by itself at {iso(until)} (safety.cooldown = "
                f"{format_duration(cooldown)})")


def evidence_words(w: Working, rem: Remediation) -> str:
    """What a request without evidence waits for, the key that takes requests as
    evidence, and when the wait ends (P1/Q4, O6)."""
    key = ("requests.operator_is_evidence" if rem.origin == "operator"
           else "requests.detector_is_evidence")
    wait = w.policy.requests.evidence_wait
    return (f"waits for a confirmed alert on {rem.node}: SPEC P1; set {key} = true to take "
            f"requests as evidence; withdrawn at {iso(rem.created + wait)} if none comes "
            f"(requests.evidence_wait = {format_duration(wait)})")


def evidence_hold(w: Working, rem: Remediation) -> Hold | None:
    """P1/Q4: a request without a confirmed alert (unless policy takes requests as
    evidence) waits for one, at most ``requests.evidence_wait`` (then it is withdrawn).
    Asked directly by the requests' own rules, whatever other limit holds (issue 32
    item 5), and in its place among the start gates."""
    if rem.origin == "alert":
        return None
    pol = w.policy.requests
    enough = pol.operator_is_evidence if rem.origin == "operator" else pol.detector_is_evidence
    # SPEC V4: the node's last remediation failed its post-repair gate: that is the
    # confirmed failure (its results are the evidence), though no alert is active.
    if enough or w.evidence(rem.node) is not None \
            or gate_failed_last(w.of_node(rem.node)) is not None:
        return None
    deadline = rem.created + pol.evidence_wait
    return Hold("P1", evidence_words(w, rem), wake=deadline,
                lifts=f"a confirmed alert on {rem.node}; withdrawn by itself at "
                f"{iso(deadline)} if none comes (requests.evidence_wait)")


def request_evidence(w: Working, rem: Remediation) -> tuple[Hold | None, str | None]:
    """P1/Q4: the evidence hold, or the fault to keep as the request's evidence."""
    hold = evidence_hold(w, rem)
    if hold is not None or rem.origin == "alert":
        return hold, None
    pol = w.policy.requests
    enough = pol.operator_is_evidence if rem.origin == "operator" else pol.detector_is_evidence
    ev = w.evidence(rem.node)
    if ev is not None and rem.data.evidence_fault is None and not enough:
        return None, ev.fault
    return None, None


def room_hold(w: Working, rem: Remediation) -> Hold | None:
    """E5 spares, S3 concurrency, S4 one per pool, Q4 pool capacity."""
    pol = w.policy
    started = w.ix.started(rem.id)
    spares = pol.escalation.migrate_spares
    by_itself = "by itself when another remediation ends"
    if rem.action is Action.MIGRATE and spares is not None:
        moving = sum(1 for r in started if r.action is Action.MIGRATE)
        if moving >= spares:
            return Hold("E5", f"all {spares} reserved spare host(s) are in use by other "
                        "migrations", lifts=by_itself.replace("remediation", "migration"))
    nodes = len(w.view.nodes)
    limit = pol.safety.concurrency_limit(nodes)
    if len(started) >= limit:
        return Hold("S3", f"{len(started)} remediation(s) already run; the limit for "
                    f"{nodes} nodes is {limit}", lifts=by_itself)
    pool = w.pool(rem.node)
    if pol.safety.one_per_pool:
        same = [r for r in started if w.pool(r.node) == pool]
        if same:
            return Hold("S4", f"pool {pool} already has {same[0].id} on {same[0].node}: one "
                        "at a time per pool", lifts=f"by itself when {same[0].id} ends")
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
                        f"service, {need} must stay",
                        lifts=f"by itself when {need} other nodes of pool {pool} are in "
                        "service")
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
                        f"one {c.kind} (topology.blast_radius)", mark=f"S7:{c.id}",
                        label=f"blast radius of {c.label}",
                        lifts=f"by itself when a remediation under {c.label} ends")
    return None


def incident_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S7: a node in an open incident waits for the incident's end; a related fault
    waits incidents.settle after it was first seen, so a component's failure can show on
    its other nodes before one of them is cordoned."""
    hold = open_incident_hold(w, rem)
    if hold is not None:
        return hold
    fault = rem.data.evidence_fault or rem.fault
    settle = incidents.settle_until(w, rem)
    if settle is not None:
        until, comp = settle
        return Hold("S7", f"{fault} is a fault a shared component can cause: waits until "
                    f"{iso(until)} (incidents.settle = "
                    f"{format_duration(w.policy.incidents.settle)}) to see whether other "
                    f"nodes under {comp.label} show it too (then it is one incident)",
                    wake=until, mark="S7:settle", label=f"settle wait under {comp.label}",
                    lifts=f"by itself at {iso(until)} (incidents.settle), unless other "
                    f"nodes under {comp.label} show it too (then an incident holds it)")
    return None


def open_incident_hold(w: Working, rem: Remediation) -> Hold | None:
    """SPEC S7: the open incident that holds ``rem`` (its node's, for its fault's group)."""
    fault = rem.data.evidence_fault or rem.fault
    inc = incidents.open_incident_of(w, rem.node, fault) if w.any_open_incident else None
    return incidents.hold_of(inc) if inc is not None else None


StartGate = Callable[[Working, Remediation], Hold | None]

# The limits that hold a remediation back from its start (the cordon), in the order they
# are asked (issue 33): the first that holds is the one recorded and shown. Recommend-only
# and the pause speak first (they say what would run); the lemon hold before the rest (a
# person is sent the machine's ledger); someone else's drain (D5) before anything of ours;
# the incident and the settle wait (S7) before the breaker counts the start; the cooldown;
# the evidence a request needs (P1/Q4, which its own rules also ask directly: a request's
# wait for evidence runs and ends by its bound whatever holds it here); room last.
START_GATES: tuple[tuple[str, StartGate], ...] = (
    ("O2", start_mode_hold),
    ("E7", lemon_hold),
    ("D5", foreign_hold),
    ("S7", incident_hold),
    ("S5", breaker_hold),
    ("S2", cooldown_hold),
    ("P1", evidence_hold),
    ("room", room_hold),
)


def start_hold(w: Working, rem: Remediation) -> tuple[Hold | None, str | None]:
    """The first limit of START_GATES that holds ``rem`` back from its start, and the
    evidence a request was found to have once the evidence gate passed (kept on the
    record even when a later limit holds it)."""
    evidence = None
    for name, gate in START_GATES:
        hold = gate(w, rem)
        if hold is not None:
            return hold, evidence
        if name == "P1":
            evidence = request_evidence(w, rem)[1]
    return None, evidence


class Gates(Cordon):
    """Applies the gates' Holds to the working set."""

    def blocked(self, rem: Remediation, hold: Hold) -> Remediation:
        """Record (once per mark) that ``hold`` holds ``rem``, and store what it is
        (``Work.hold``, O6): a hold whose words or end changed under the same mark is
        stored again without a second record."""
        held = hold.held()
        if rem.data.blocked == hold.key:
            if rem.data.hold == held:
                return rem
            return self.put(rem.model_copy(update={"data": rem.data.but(hold=held)}))
        rem = self.step(rem, "blocked", hold.rule, hold.why)
        return self.put(rem.model_copy(update={
            "data": rem.data.but(blocked=hold.key, hold=held)}))

    def apply_hold(self, rem: Remediation, hold: Hold) -> Remediation:
        """Record (once) that ``hold`` holds ``rem`` back; open the breaker if it does;
        tell a person once where the hold says so."""
        if hold.wake is not None:
            self.wake(hold.wake)
        if hold.opens_breaker:
            # Keep reset_by/reset_at: the count restarts from the last reset.
            self.breaker = self.breaker.model_copy(update={
                "open": True, "opened_at": self.now, "why": hold.why})
            self.breaker_changed = True
        if hold.notify and rem.data.blocked != hold.key:
            self.effect("notify", rem.node, rem, hold.notify, why=hold.why, rule=hold.rule)
        return self.blocked(rem, hold)

    def unhold(self, rem: Remediation) -> Remediation:
        """The limit that held ``rem`` no longer does (nothing recorded: the next step
        says what happens); a later hold is recorded afresh."""
        if rem.data.blocked is None and rem.data.hold is None:
            return rem
        return self.put(rem.model_copy(update={"data": rem.data.but(blocked=None, hold=None)}))

    def lifted(self, rem: Remediation, node: NodeInfo) -> Remediation:
        """A started remediation's stored hold that no longer holds (the pause or
        recommend-only mode ended, someone else's drain is ours again) is cleared, so
        `status` never shows a hold that has lifted (O6)."""
        held = rem.data.hold
        if held is None or rem.phase in (Phase.PROPOSED, Phase.APPROVED):
            return rem
        if held.rule in ("pause", "recommend_only") and mode_hold(self, rem, False) is None:
            return self.unhold(rem)
        if held.rule == "D5" and not self.foreign(node):
            return self.unhold(rem)
        return rem

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
            self.blocked(rem, Hold(
                "D5", why, lifts="our marker is back on the node (it goes on), or that "
                "person resumes it (the remediation is then cancelled) or cancels it",
                command=f"slurm-heal cancel {rem.id}"))
            n = sum(1 for a in rem.attempts if a.step == "notify-held")
            self.effect("notify", rem.node, rem, "notify-held", n, why=why, rule="D5")
        self.wake(self.now + POLL_EVERY)
        return True
