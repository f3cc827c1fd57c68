"""A limit that holds a remediation back (SPEC O6): the value every gate returns.

A gate (`gates.START_GATES`, the lemon hold, the evidence wait, an incident) returns a
`Hold`: the rule, the engine's words, when it lifts by itself and what else lifts it.
`Hold.held` is the typed record of it (`models.HeldBy`) stored with the remediation,
which `status`, `explain`, the API and the console show as it is (issue 32 item 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Literal

from slurm_heal.models import HeldBy, Mark

HoldRule = Literal["recommend_only", "pause", "D5", "S5", "S2", "P1", "E5", "S3", "S4", "Q4",
                   "E7", "S7"]


@dataclass(frozen=True, slots=True)
class Hold:
    """A limit that holds a remediation back from its next disruptive step."""

    rule: HoldRule
    why: str
    wake: datetime | None = None  # when the limit lifts by itself (S2, S7 settle, E7, P1)
    opens_breaker: bool = False  # S5: this hold opens the breaker (why = the breaker's why)
    # Recorded once per mark (the rule and this subject): S7 holds for different reasons
    # (the settle wait, an incident, a component's blast radius) are each recorded once.
    subject: str = ""
    # What lifts it, in words, and the command a person runs for that ("" when only
    # time or the cluster lifts it), SPEC O6.
    lifts: str = ""
    command: str = ""
    incident: str | None = None  # S7: the incident that holds it
    label: str = ""  # which hold of the rule, in a few words (S7: "settle wait", ...)
    # A person is told once when the hold starts, under this step (E7: "notify-lemon").
    notify: str = ""

    @property
    def key(self) -> Mark:
        """The mark it is recorded (once) under."""
        return _mark(self.rule, self.subject)

    def held(self) -> HeldBy:
        """The typed record stored with the remediation (``Work.hold``)."""
        return HeldBy(rule=self.rule, mark=self.key, why=self.why, until=self.wake,
                      lifts=self.lifts, command=self.command, incident=self.incident,
                      label=self.label)


@lru_cache(maxsize=4096)
def _mark(rule: str, subject: str) -> Mark:
    """One Mark per rule and subject (a frozen value, shared): a gate asks for its hold's
    mark on every cycle of every held remediation, and a model costs microseconds."""
    return Mark(rule=rule, subject=subject)
