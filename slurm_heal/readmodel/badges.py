"""The console's phase badges in words (issue 25 item 8, SPEC P2, Q3, O6): a remediation
that a limit holds is never shown as a green "approved"; a harmless duplicate request
(Q3) or a wait (S1 persistence, L3 one at a time) is not a red "blocked".

``badge`` returns (label, css class, title): the title is the rule in plain words.
"""

from __future__ import annotations

from typing import Any

from slurm_heal.models import SETTLE, HeldBy, Mark
from slurm_heal.readmodel import rulewords

# A "blocked" record under these rules holds nothing back that needs a person: a
# duplicate dropped (Q3), a wait that ends by itself at a time it knows: the alert's
# persistence (S1), one at a time per node (L3), the cooldown (S2) (issue 36 item 11).
# A limit (S3, S4, S5, ...) stays a red "blocked": it holds until something else changes.
NEUTRAL = {"Q3": "duplicate", "S1": "waiting", "L3": "waiting", "S2": "waiting"}
# S7 holds both ways: an open incident waits for a person to close it, the blast radius
# for room (red); the settle wait ends at its time (grey): its record's mark says which
# (issue 33: the mark, never the record's words).
SELF_ENDING = frozenset({SETTLE})


def _said(rule: str | None, why: str = "") -> str:
    words = rulewords.short(rule)
    head = f"{rule}: {words}" if rule and words else (rule or "")
    return f"{head} ({why})" if why and head else (why or head)


def step_badge(phase: str, rule: str | None = None, mark: object = None) -> tuple[str, str, str]:
    """A timeline step or a decision record (a model's, or its ``--json`` shape's, mark)."""
    if phase == "blocked":
        if rule in NEUTRAL:
            return NEUTRAL[rule], "phase-neutral", _said(rule)
        held = Mark.model_validate(mark) if isinstance(mark, (Mark, str, dict)) else None
        if held in SELF_ENDING:
            return "waiting", "phase-neutral", _said(rule)
        return "blocked", "phase-blocked", _said(rule)
    return phase, f"phase-{phase}", _said(rule)


def rem_badge(rem: dict[str, Any]) -> tuple[str, str, str]:
    """A remediation (its ``--json`` shape): its phase, unless a limit holds it now, then
    "held by RULE" in amber, whatever phase it reached (an approved one waiting for
    evidence, P1, or for room, S3-S5)."""
    phase = str(rem.get("phase", ""))
    waiting = rem.get("waiting_for_evidence")
    if waiting and rem.get("open", True):  # O6: a request without evidence, never "approved"
        return "waiting for evidence", "phase-held", (
            waiting if isinstance(waiting, str) else _said("P1"))
    # the read model's own answer where the shape carries it (rem_json, summary)
    hold = rem["hold"] if "hold" in rem else (rem.get("data") or {}).get("hold")
    if isinstance(hold, dict) and rem.get("open", True):
        # SPEC O6: the engine's own record of what holds it (Work.hold), as it is
        h = HeldBy.model_validate(hold)
        return f"{phase}, held by {h.name}", "phase-held", _said(h.rule, h.lifts)
    held = rem.get("blocked") or (rem.get("data") or {}).get("blocked")
    if held and rem.get("open", True):  # a store from before Work.hold, until its next cycle
        m = Mark.model_validate(held)  # the typed mark (its rule, which hold of it)
        return f"{phase}, held by {m}", "phase-held", _said(m.rule)
    return phase, f"phase-{phase}", ""
