"""The safety gates held before a remediation's next disruptive step: recommend-only,
pause, D5, an incident and the settle wait (S7), the breaker (S5), the cooldown (S2),
evidence (P1/Q4), migrate spares (E5), concurrency (S3), one per pool (S4), one per
switch/block/rack (S7 blast radius) and pool capacity (Q4).

Each gate is a function of the working set and the ledger that returns a `Hold` (the
rule, why, and when to look again) or None and writes nothing; the breaker's opening
(S5) is part of the Hold it returns. `holding` applies a Hold: one ``blocked`` step per
limit (not one per cycle), the wake, the breaker.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_heal.config import format_duration
from slurm_heal.models import Phase, Remediation
from slurm_heal.policy import incidents
from slurm_heal.policy.facts import (
    act_attempts,
    ended_at,
    gate_failed_last,
    is_automatic,
    iso,
)
from slurm_heal.policy.holds import Hold, HoldRule
from slurm_heal.policy.lemon import lemon_hold
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Action

__all__ = ["START_GATES", "Hold", "HoldRule", "evidence_hold", "mode_hold",
           "request_evidence", "start_hold"]


def mode_hold(ws: WorkingSet, led: Ledger, rem: Remediation, starting: bool) -> Hold | None:
    """O2: recommend-only mode and the global pause hold every disruptive step."""
    if ws.policy.mode == "recommend_only":
        return Hold("recommend_only", f"recommend-only mode: would "
                    f"{'cordon ' + rem.node + ' and ' if starting else ''}"
                    f"{rem.action.value} now; nothing is executed",
                    lifts='a person sets mode = "normal" in the policy (recommend-only '
                    "executes nothing)")
    if led.paused:
        return Hold("pause", "slurm-heal is paused: nothing disruptive starts until a "
                    "person unpauses it", lifts="a person unpauses slurm-heal",
                    command="slurm-heal unpause")
    return None


def start_mode_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """O2 at the start (the cordon): what would run is said."""
    return mode_hold(ws, led, rem, starting=True)


def foreign_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC D5 / house style 2: cordoning would replace someone else's reason with our
    marker, and the resume at the end would undo their drain. Hold until they resume the
    node (or turn their reason into a heal-request)."""
    node = ws.node(rem.node)
    if node is None or not ws.foreign(node):
        return None
    return Hold("D5", f"{rem.node} is {'DOWN' if node.down else 'drained'} by someone "
                f"else ({node.reason!r}): slurm-heal does not cordon over it; it waits "
                "until that person resumes the node",
                lifts=f"the person who {'set it DOWN' if node.down else 'drained it'} "
                "resumes the node (or turns the reason into a heal-request)",
                command=f"scontrol update nodename={rem.node} state=resume")


def breaker_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC S5: N automatic starts within the window open the breaker (automatic
    remediations only: a person's stays possible)."""
    if not is_automatic(rem):
        return None
    pol = ws.policy.safety
    lifts = "a person resets the breaker (a person's own request or approval goes on)"
    if led.breaker.open:
        return Hold("S5", "the breaker is open: automatic remediation waits for a person "
                    "(slurm-heal reset-breaker)", lifts=lifts,
                    command="slurm-heal reset-breaker")
    since = ws.now - pol.breaker_window
    if led.breaker.reset_at and led.breaker.reset_at > since:
        since = led.breaker.reset_at  # a reset starts a fresh count
    starts = sum(1 for i in led.ix.recent_starts() if i != rem.id
                 and (t := led.rems[i].phase_times.get("cordoned")) is not None and t >= since)
    if starts < pol.breaker_threshold:
        return None
    return Hold("S5", f"{starts} automatic remediations started within "
                f"{format_duration(pol.breaker_window)} (threshold {pol.breaker_threshold}): "
                "the breaker opens; automatic remediation stops until a person resets it",
                opens_breaker=True, lifts=lifts, command="slurm-heal reset-breaker")


def cooldown_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC S2: the cooldown after the node's last remediation that acted."""
    # SPEC E6: a failed GPU reset climbs at once: the node never went back to service,
    # so it starts no cooldown (the reboot after it does, as any action).
    ends = [t for r in led.of_node(rem.node) if r.phase.terminal
            and act_attempts(r) and (t := ended_at(r)) is not None
            and not (r.action is Action.RESET_GPU and r.phase is Phase.FAILED)]
    last_end = max(ends, default=None)
    cooldown = ws.policy.safety.cooldown
    if last_end is None or ws.now >= last_end + cooldown:
        return None
    until = last_end + cooldown
    return Hold("S2", f"cooldown: the last remediation on {rem.node} ended at "
                f"{iso(last_end)}; the next may start {format_duration(cooldown)} later",
                wake=until, lifts=f"by itself at {iso(until)} (safety.cooldown = "
                f"{format_duration(cooldown)})")


def evidence_words(ws: WorkingSet, rem: Remediation) -> str:
    """What a request without evidence waits for, the key that takes requests as
    evidence, and when the wait ends (P1/Q4, O6)."""
    key = ("requests.operator_is_evidence" if rem.origin == "operator"
           else "requests.detector_is_evidence")
    wait = ws.policy.requests.evidence_wait
    return (f"waits for a confirmed alert on {rem.node}: SPEC P1; set {key} = true to take "
            f"requests as evidence; withdrawn at {iso(rem.created + wait)} if none comes "
            f"(requests.evidence_wait = {format_duration(wait)})")


def evidence_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """P1/Q4: a request without a confirmed alert (unless policy takes requests as
    evidence) waits for one, at most ``requests.evidence_wait`` (then it is withdrawn).
    Asked directly by the requests' own rules, whatever other limit holds (issue 32
    item 5), and in its place among the start gates."""
    if rem.origin == "alert":
        return None
    pol = ws.policy.requests
    enough = pol.operator_is_evidence if rem.origin == "operator" else pol.detector_is_evidence
    # SPEC V4: the node's last remediation failed its post-repair gate: that is the
    # confirmed failure (its results are the evidence), though no alert is active.
    if enough or ws.evidence(rem.node) is not None \
            or gate_failed_last(led.of_node(rem.node)) is not None:
        return None
    deadline = rem.created + pol.evidence_wait
    return Hold("P1", evidence_words(ws, rem), wake=deadline,
                lifts=f"a confirmed alert on {rem.node}; withdrawn by itself at "
                f"{iso(deadline)} if none comes (requests.evidence_wait)")


def request_evidence(ws: WorkingSet, led: Ledger,
                     rem: Remediation) -> tuple[Hold | None, str | None]:
    """P1/Q4: the evidence hold, or the fault to keep as the request's evidence."""
    hold = evidence_hold(ws, led, rem)
    if hold is not None or rem.origin == "alert":
        return hold, None
    pol = ws.policy.requests
    enough = pol.operator_is_evidence if rem.origin == "operator" else pol.detector_is_evidence
    ev = ws.evidence(rem.node)
    if ev is not None and rem.data.evidence_fault is None and not enough:
        return None, ev.fault
    return None, None


def room_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """E5 spares, S3 concurrency, S4 one per pool, Q4 pool capacity."""
    pol = ws.policy
    started = led.ix.started(rem.id)
    spares = pol.escalation.migrate_spares
    by_itself = "by itself when another remediation ends"
    if rem.action is Action.MIGRATE and spares is not None:
        moving = sum(1 for r in started if r.action is Action.MIGRATE)
        if moving >= spares:
            return Hold("E5", f"all {spares} reserved spare host(s) are in use by other "
                        "migrations", lifts=by_itself.replace("remediation", "migration"))
    nodes = len(ws.view.nodes)
    limit = pol.safety.concurrency_limit(nodes)
    if len(started) >= limit:
        return Hold("S3", f"{len(started)} remediation(s) already run; the limit for "
                    f"{nodes} nodes is {limit}", lifts=by_itself)
    pool = ws.pool(rem.node)
    if pol.safety.one_per_pool:
        same = [r for r in started if ws.pool(r.node) == pool]
        if same:
            return Hold("S4", f"pool {pool} already has {same[0].id} on {same[0].node}: one "
                        "at a time per pool", lifts=f"by itself when {same[0].id} ends")
    hold = blast_hold(ws, rem, started)
    if hold is not None:
        return hold
    members = [n for n in ws.pool_members(pool) if n.name != rem.node]
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


def blast_hold(ws: WorkingSet, rem: Remediation, started: list[Remediation]) -> Hold | None:
    """SPEC S7: at most topology.blast_radius disruptive remediations at once under one
    switch, block, NVLink domain or rack (a cohort is no place: not counted)."""
    comps = incidents.components(ws, rem.node) if started else ()
    limit = ws.policy.topology.blast_radius
    for c in comps:
        same = [r for r in started if r.node in c.nodes]
        if len(same) >= limit:
            return Hold("S7", f"{c.label} already has {len(same)} remediation(s) running "
                        f"({same[0].id} on {same[0].node}): at most {limit} at a time under "
                        f"one {c.kind} (topology.blast_radius)", subject=c.id,
                        label=f"blast radius of {c.label}",
                        lifts=f"by itself when a remediation under {c.label} ends")
    return None


def incident_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC S7: a node in an open incident waits for the incident's end; a related fault
    waits incidents.settle after it was first seen, so a component's failure can show on
    its other nodes before one of them is cordoned."""
    hold = open_incident_hold(ws, led, rem)
    if hold is not None:
        return hold
    fault = rem.data.evidence_fault or rem.fault
    settle = incidents.settle_until(ws, rem)
    if settle is not None:
        until, comp = settle
        what = incidents.a_(incidents.domain_words(ws, comp))
        return Hold("S7", f"{fault} is a fault {what} can cause: waits until "
                    f"{iso(until)} (incidents.settle = "
                    f"{format_duration(ws.policy.incidents.settle)}) to see whether other "
                    f"nodes under {comp.label} ({len(comp.nodes)} nodes) show it too (then "
                    "it is one incident)",
                    wake=until, subject="settle", label=f"settle wait under {comp.label}",
                    lifts=f"by itself at {iso(until)} (incidents.settle), unless other "
                    f"nodes under {comp.label} show it too (then an incident holds it)")
    return None


def open_incident_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC S7: the open incident that holds ``rem`` (its node's, for its fault's group)."""
    fault = rem.data.evidence_fault or rem.fault
    inc = incidents.open_incident_of(ws, led, rem.node, fault) if led.any_open_incident else None
    return incidents.hold_of(ws.policy.incidents, inc) if inc is not None else None


StartGate = Callable[[WorkingSet, Ledger, Remediation], Hold | None]

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


def start_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> tuple[Hold | None, str | None]:
    """The first limit of START_GATES that holds ``rem`` back from its start, and the
    evidence a request was found to have once the evidence gate passed (kept on the
    record even when a later limit holds it)."""
    evidence = None
    for name, gate in START_GATES:
        hold = gate(ws, led, rem)
        if hold is not None:
            return hold, evidence
        if name == "P1":
            evidence = request_evidence(ws, led, rem)[1]
    return None, evidence
