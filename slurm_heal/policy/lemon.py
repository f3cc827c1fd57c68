"""SPEC E7, lemons: a machine whose remediations acted ``escalation.lemon.remediations``
times within ``window`` gets no more automatic remediation. Pure: `lemon_hold` returns the
Hold (rule E7, with the machine's ledger as the store holds it in its why) or None;
`gates.START_GATES` asks it, and applying it tells a person once."""

from __future__ import annotations

from slurm_heal.config import format_duration
from slurm_heal.models import Remediation
from slurm_heal.policy.facts import acted_at, is_automatic
from slurm_heal.policy.holds import Hold
from slurm_heal.policy.working import Ledger, WorkingSet


def machine_words(rems: list[Remediation]) -> str:
    """A machine's ledger as the store holds it, in words (E7): the names it had, its
    remediations by action and outcome, the faults they were for."""
    names = sorted({r.node for r in rems})
    counts: dict[tuple[str, str], int] = {}
    faults: dict[str, int] = {}
    for r in rems:
        if r.phase.terminal or acted_at(r) is not None:
            key = (r.action.value, r.phase.value)
            counts[key] = counts.get(key, 0) + 1
            faults[r.fault] = faults.get(r.fault, 0) + 1
    acts = ", ".join(f"{a} {o} x{n}" for (a, o), n in sorted(counts.items()))
    seen = ", ".join(f"{f} x{n}" for f, n in sorted(faults.items(), key=lambda kv: (-kv[1],
                                                                                    kv[0])))
    return (f"names: {', '.join(names)}; remediations: {acts or 'none'}; "
            f"faults: {seen or 'none'}")


def lemon_hold(ws: WorkingSet, led: Ledger, rem: Remediation) -> Hold | None:
    """SPEC E7: an automatic remediation of a machine that already had
    ``escalation.lemon.remediations`` acted within ``window`` is held; it lifts when the
    oldest of them leaves the window (or a person approves or requests the work)."""
    pol = ws.policy.escalation.lemon
    if not pol.enabled or not is_automatic(rem):
        return None  # (recommend-only and the pause say so themselves, first: START_GATES)
    host = rem.host or rem.node
    since = ws.now - pol.window
    rems = [r for r in led.of_host(host) if r.id != rem.id]
    acts = sorted(t for r in rems if (t := acted_at(r)) is not None and t >= since)
    if len(acts) < pol.remediations:
        return None
    lifts = acts[len(acts) - pol.remediations] + pol.window
    return Hold("E7", f"{host} is a lemon: {len(acts)} remediations acted within "
                f"{format_duration(pol.window)} (escalation.lemon.remediations = "
                f"{pol.remediations}): no more automatic remediation; a person is sent a "
                f"removal recommendation (slurm-heal never removes, Q2); the hold lifts at "
                f"{lifts.isoformat()} or when a person approves {rem.id}; ledger: "
                f"{machine_words(rems)}", wake=lifts, notify="notify-lemon",
                lifts=f"by itself at {lifts.isoformat()} (the oldest of them leaves "
                f"escalation.lemon.window); or a person takes the work: cancel {rem.id} and "
                f"request the {rem.action.value} (a person's work is not held)",
                command=f"slurm-heal cancel {rem.id} && slurm-heal request {rem.node} "
                f"{rem.action.value}")
