"""Escalation (SPEC E1-E3): the ladder, migrate's evidence, and the end of automatic
work where a person takes over.

`climb` (E1/E2) and `migrate_refused` (E3) are pure: they return what they found as
data (`Climb`, `MigrateRefused`), whose ``why`` is the audit text; nothing is parsed
back out of a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import slurm_heal.policy.person as person
from slurm_heal.config import format_duration
from slurm_heal.models import Phase, Remediation
from slurm_heal.policy.facts import acted_at, ended_at
from slurm_heal.policy.gates import Gates
from slurm_heal.policy.working import Working
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


def climb(w: Working, host: str, fault: str, action: Action) -> Ladder:
    """SPEC E1/E2: climb the ladder while the same action already failed to hold."""
    esc = w.policy.escalation
    climbs: list[Climb] = []
    since = w.now - esc.window
    ladder = esc.steps
    while True:
        count = failed = 0
        for r in w.of_host(host):
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


def migrate_refused(w: Working, node: str, host: str) -> MigrateRefused | None:
    """SPEC E3: migrate needs a critical alert now or on this machine within 10 days."""
    if any(a.severity is Severity.CRITICAL for a in w.active(node)):
        return None
    window = w.policy.escalation.migrate_evidence_window
    since = w.now - window
    for r in w.of_host(host):
        if r.severity is Severity.CRITICAL and r.created >= since:
            return None
    return MigrateRefused(host, window)


class Escalation(Gates):
    """The end of automatic work: a failure climbs E1, the top of it goes to a person."""

    def with_a_person(self, name: str) -> bool:
        """SPEC E1: the node's latest remediation handed it to a person: nothing automatic
        (an alert or a detector's request) starts on it until a person acts. Recorded
        once while it holds."""
        past = [r for r in self.of_node(name) if r.phase.terminal]
        last = max(past, key=lambda r: (ended_at(r) or r.updated, r.id), default=None)
        if last is None or not last.data.handed_to_person or last.data.handed_ended:
            return False
        node = self.node(name)
        ended = person.hand_over_ended(last, node) if node is not None else None
        if ended is not None:
            # SPEC S8 (issue 32 item 10): that person acted: the hand-over is over, and
            # a new fault is remediated again (what was published when it was handed
            # over opens nothing: `person.covers`). Kept on the record: our own drain of
            # a new fault later does not hand the node back to the person.
            self.put(last.model_copy(update={"data": last.data.but(handed_ended=True)}))
            self.record(name, "released", "S8", f"{ended}: the hand-over has ended; a new "
                        "fault on it is remediated again", last)
            return False
        if self.once(f"person:{name}", last.id):
            self.record(name, "blocked", "E1", f"{name} was handed to a person after "
                        f"{last.id}; nothing automatic until a person acts", last)
        return True

    def fail(self, rem: Remediation, rule: str, why: str, release: bool = True) -> None:
        """L5: the remediation ends failed; the next recommendation follows E1. A failed
        last step of the ladder ends with a person, never a loop. ``release=False``: the
        cordon stays although no alert is left (a failed post-repair gate, SPEC V4)."""
        ladder = self.policy.escalation.steps
        # An action off the ladder has no next step either (E1 "never a loop").
        top = (rem.action is Action.MIGRATE or rem.action not in ladder
               or rem.action is ladder[-1])
        if top:
            rem = self.step(rem, "failed", rule, why + f"; {rem.node} stays cordoned",
                            data={"handed_to_person": True})
            self.hand_to_person(rem, "E1", f"{rem.action.value} did not fix {rem.node}: it "
                                "stays cordoned and is handed to a person with a removal "
                                "recommendation (slurm-heal never removes, Q2)")
            return
        tail = "; the next recommendation follows E1"
        if not release:
            # SPEC V4: no alert is left to recommend from: say what moves it on.
            tail += (f": {rem.node} stays cordoned until the fault is seen again (the next "
                     f"step, E1), or a person requests an action (slurm-heal request "
                     f"{rem.node} ACTION) or resumes it")
        rem = self.step(rem, "failed", rule, why + tail)
        self.effect("notify", rem.node, rem, "notify", why=why + tail, rule=rule)
        if release and self.evidence(rem.node) is None:
            self.release(rem, "failed with no alert left")

    def hand_back(self, rem: Remediation, why: str) -> None:
        """SPEC S8: a person resumed the node: the remediation ends with them (recorded,
        nothing disruptive after it), and its alert as seen now opens nothing new."""
        ev = rem.data.evidence_fault
        # What the person saw: every alert published on the node now (the node check
        # acknowledges them on its next run; until then none opens a new remediation:
        # `person.covers`), and this one's acknowledgement if the check made it already.
        seen = set(person.seen_now(self, rem.node))
        if ev:
            seen |= set(person.marks(person.acknowledged(self, rem.node, ev)))
        self.step(rem, "cancelled", "S8", f"{why}: a person's hand wins; {rem.id} is handed "
                  f"to them and nothing disruptive runs on {rem.node}"
                  + (f"; {ev} opens nothing new until the node check sees something new"
                     if ev else ""),
                  data={"resumed_by_person": True, "seen_evidence": tuple(sorted(seen))})

    def hand_to_person(self, rem: Remediation, rule: str, msg: str) -> None:
        """The end of automatic work on a node: an ``escalated`` step and a notification.
        The remediation carries ``handed_to_person``; nothing automatic starts on the node
        until a person acts (E1)."""
        node = self.node(rem.node)
        # SPEC S8: the node as it is handed over, and what was published then: the
        # hand-over ends when a person acts on it (`person.hand_over_ended`).
        rem = self.step(rem, "escalated", rule, msg, data={
            "handed_to_person": True, "seen_evidence": person.seen_now(self, rem.node),
            "handed_out_of_service": node is None or node.drained or node.down,
            "handed_reason": node.reason if node is not None else ""})
        self.effect("notify", rem.node, rem, "notify", why=msg, rule=rule)
