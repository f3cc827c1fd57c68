"""Escalation (SPEC E1-E3): the ladder and migrate's evidence (the end of automatic
work where a person takes over is `endings`).

`climb` (E1/E2) and `migrate_refused` (E3) are pure: they return what they found as
data (`Climb`, `MigrateRefused`), whose ``why`` is the audit text; nothing is parsed
back out of a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from slurm_heal.config import format_duration
from slurm_heal.models import Phase
from slurm_heal.policy.facts import acted_at
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import Action, Severity


@dataclass(frozen=True, slots=True)
class Climb:
    """E1: ``fault`` came back on ``host`` after ``count`` ``action``s within ``window``:
    the next step of the ladder is ``to`` (None: the ladder has ended)."""

    fault: str
    host: str
    action: Action
    count: int
    window: timedelta
    to: Action | None
    failed: bool = False  # E6: a GPU reset that failed climbs at once

    @property
    def why(self) -> str:
        if self.failed:
            return (f"the {self.action.value} for {self.fault} on {self.host} failed within "
                    f"{format_duration(self.window)}: "
                    + (f"{self.to.value} at once (SPEC E6)" if self.to else
                       "the ladder has ended"))
        return (f"{self.fault} came back on {self.host} after {self.count} "
                f"{self.action.value}s within {format_duration(self.window)}: "
                + (f"{self.to.value} instead" if self.to else "the ladder has ended"))


@dataclass(frozen=True, slots=True)
class Ladder:
    """E1's answer: the action to take (None: past the end of the ladder) and the
    climbs that led to it (none: the catalog's action stands)."""

    action: Action | None
    climbs: tuple[Climb, ...] = ()

    @property
    def whys(self) -> list[str]:
        return [c.why for c in self.climbs]


@dataclass(frozen=True, slots=True)
class MigrateRefused:
    """E3: no critical alert now, nor on ``host`` within ``window``: rebuild instead."""

    host: str
    window: timedelta

    @property
    def why(self) -> str:
        return (f"migrate needs evidence (a critical alert now or on {self.host} in the last "
                f"{format_duration(self.window)}) and there is none: rebuild instead")


def climb(ws: WorkingSet, led: Ledger, host: str, fault: str, action: Action) -> Ladder:
    """SPEC E1/E2: climb the ladder while the same action already failed to hold."""
    esc = ws.policy.escalation
    climbs: list[Climb] = []
    since = ws.now - esc.window
    ladder = esc.steps
    while True:
        count = failed = 0
        for r in led.of_host(host):
            acted = acted_at(r)
            # E2: only executed attempts in the window; cancelled/withdrawn/denied
            # (incl. faults that cleared on their own) never reach an act.
            if (r.host == host and r.fault == fault and r.action is action
                and r.phase in (Phase.DONE, Phase.FAILED) and acted and acted >= since):
                count += 1
                failed += r.phase is Phase.FAILED
        # SPEC E6: a refused or failed GPU reset climbs at once (a reboot is next); one
        # that held and came back climbs like any action.
        at_once = action is Action.RESET_GPU and failed > 0
        if count < esc.repeats and not at_once:
            return Ladder(action, tuple(climbs))
        # An action off the ladder (power_cycle, E4; reboot with a ladder that starts
        # at rebuild) has no next step: repeating it ends the ladder too, never a loop.
        i = ladder.index(action) if action in ladder else len(ladder)
        nxt = ladder[i + 1] if i + 1 < len(ladder) else None
        climbs.append(Climb(fault, host, action, count, esc.window, nxt,
                            failed=at_once and count < esc.repeats))
        if nxt is None:
            return Ladder(None, tuple(climbs))
        action = nxt


def migrate_refused(ws: WorkingSet, led: Ledger, node: str, host: str) -> MigrateRefused | None:
    """SPEC E3: migrate needs a critical alert now or on this machine within 10 days."""
    if any(a.severity is Severity.CRITICAL for a in ws.active(node)):
        return None
    window = ws.policy.escalation.migrate_evidence_window
    since = ws.now - window
    for r in led.of_host(host):
        if r.severity is Severity.CRITICAL and r.created >= since:
            return None
    return MigrateRefused(host, window)
