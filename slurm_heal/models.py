"""Controller-side models (frozen pydantic): the remediation record, the store's
document, and the plan that the pure `decide()` returns.

This module is the contract between the engine (`policy/`), the store (`store.py`),
the controller cycle (`controller.py`), `simulate` and the CLI. Fields may be added
(with defaults, so old stores still load); never renamed.

How a cycle uses it (ARCHITECTURE "the flow")::

    plan = decide(view, state, now, policy)           # pure
    state = store.apply(plan)                         # updates + intents, before acting
    for effect in plan.effects: outcome = execute(effect)
        store.record_outcome(effect, outcome)         # Attempt.outcome filled in

An effect whose Attempt has no outcome after a crash is "in flight": the next
`decide()` sees it and emits a ``poll`` effect (ask the provider/Slurm by the same
idempotency key) instead of acting again (SPEC S6).
"""

from __future__ import annotations

import enum
import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from slurm_heal.types import Action, Severity

SCHEMA_VERSION = 1  # the major: a store with a newer one is refused, never overwritten
SCHEMA_MINOR = 0  # a newer minor only adds fields, which this version keeps as they are


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stored(BaseModel):
    """A model that lives in the store (or the inbox): fields a newer slurm-heal added
    (a newer ``schema_minor``) are kept as they are and written back unchanged, so an
    older build never wipes what a newer one recorded (SPEC I5, docs/store.md)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class Phase(str, enum.Enum):
    """Phases of a remediation (SPEC L1). Terminal: done, failed, cancelled, withdrawn, denied."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    DENIED = "denied"
    CORDONED = "cordoned"
    WAITING = "waiting"
    DRAINING = "draining"
    ACTING = "acting"
    RETURNING = "returning"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WITHDRAWN = "withdrawn"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES

    @property
    def disruptive(self) -> bool:
        """Phases in which the node is out of service because of us (S3/S4 count these)."""
        return self in DISRUPTIVE_PHASES


TERMINAL_PHASES = frozenset({Phase.DONE, Phase.FAILED, Phase.CANCELLED, Phase.WITHDRAWN,
                             Phase.DENIED})
DISRUPTIVE_PHASES = frozenset({Phase.CORDONED, Phase.WAITING, Phase.DRAINING, Phase.ACTING,
                               Phase.RETURNING})

# Phases a decision record may carry: the remediation phases plus two that are not
# states of a remediation: "escalated" (E1 changed the action) and "blocked" (a limit
# held it back; the limit's rule id is the record's rule).
RecordPhase = Literal[
    "proposed", "approved", "denied", "cordoned", "waiting", "draining", "acting",
    "returning", "done", "failed", "cancelled", "withdrawn", "escalated", "blocked",
    "alert", "notified",
]


class Step(Stored):
    """One entry of a remediation's audit trail (SPEC P4)."""

    at: datetime
    phase: str  # a RecordPhase value
    rule: str  # the rule that decided, e.g. "P2/approvals[0]", "E1", "S2"
    why: str  # plain language
    by: str | None = None  # a person, or None for slurm-heal itself


class Attempt(Stored):
    """One effect on the world, recorded before it runs (intent) and after (outcome)."""

    key: str  # idempotency key: derived from remediation id + step (see `idempotency_key`)
    effect: str  # EffectKind value
    action: Action = Action.NONE
    started: datetime
    outcome: Literal["ok", "failed", "running"] | None = None  # None = in flight
    finished: datetime | None = None
    operation: str | None = None  # the provider's operation id, when it has one
    detail: str = ""  # output excerpt / error text kept for the audit record


class Remediation(Stored):
    """One action on one node (SPEC L3) with its life cycle and audit record (P4)."""

    id: str
    node: str
    host: str | None = None  # machine identity; E1 counts per machine
    pool: str | None = None
    fault: str
    severity: Severity = Severity.WARNING
    action: Action
    phase: Phase = Phase.PROPOSED
    origin: Literal["alert", "request", "operator"] = "alert"
    automatic: bool = True  # False for a person's request (S5 lets those through)
    requested_by: str = "slurm-heal"
    detector: str | None = None
    request_id: str | None = None
    approved_by: str | None = None  # a person, or None when auto-approved
    approval_rule: str | None = None  # the rule that decided approval (P2)
    action_rule: str = ""  # the rule that chose the action (catalog default, E1, E3, ...)
    escalated_from: Action | None = None
    alert_first_seen: datetime | None = None
    created: datetime
    updated: datetime
    phase_times: dict[str, datetime] = Field(default_factory=dict)  # phase -> first entry
    steps: tuple[Step, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    next_check: datetime | None = None
    data: dict[str, Any] = Field(default_factory=dict)  # engine bookkeeping (signal sent, ...)

    @property
    def dedup_key(self) -> tuple[str, str, str, str]:
        """Two open remediations never share this key (S6, Q3)."""
        return (self.node, self.fault, self.detector or "", self.request_id or "")

    @property
    def in_flight(self) -> tuple[Attempt, ...]:
        return tuple(a for a in self.attempts if a.outcome is None)


class Command(Stored):
    """An operator's command waiting for the engine (CLI/API write these to the store)."""

    id: str
    at: datetime
    kind: Literal["approve", "deny", "cancel", "request", "reset_breaker", "pause", "unpause"]
    by: str
    node: str | None = None
    remediation: str | None = None
    action: Action | None = None
    detector: str | None = None
    request_id: str | None = None
    reason: str = ""


class Breaker(Stored):
    """The circuit breaker (SPEC S5)."""

    open: bool = False
    opened_at: datetime | None = None
    why: str = ""
    reset_by: str | None = None
    reset_at: datetime | None = None


class State(Stored):
    """The store's whole document (SPEC I5)."""

    schema_version: int = SCHEMA_VERSION
    schema_minor: int = SCHEMA_MINOR
    remediations: tuple[Remediation, ...] = ()
    inbox: tuple[Command, ...] = ()
    breaker: Breaker = Breaker()
    paused: bool = False  # global kill switch: nothing disruptive runs while set
    data: dict[str, Any] = Field(default_factory=dict)

    def open_for(self, node: str) -> tuple[Remediation, ...]:
        return tuple(r for r in self.remediations if r.node == node and not r.phase.terminal)

    def get(self, remediation_id: str) -> Remediation | None:
        for r in self.remediations:
            if r.id == remediation_id:
                return r
        return None


EffectKind = Literal[
    "cordon",  # drain with our marker (reason field)
    "signal_jobs",  # send `signal` to the jobs on the node (checkpoint lead time, P3)
    "requeue_jobs",  # at the wait limit (P3)
    "cancel_jobs",  # at the wait limit, by policy (P3)
    "act",  # call the provider: `action` with `key`
    "poll",  # ask the provider about operation/key (in flight or running)
    "resume",  # resume the node (only when its reason is ours)
    "release",  # undo our cordon without acting (withdrawn/denied/cancelled)
    "notify",  # route to the support channel (D8)
]


class Effect(Frozen):
    """Something the controller must do in the world for a plan."""

    kind: EffectKind
    node: str
    remediation: str | None = None
    action: Action = Action.NONE
    key: str = ""  # idempotency key (same key => the provider does it at most once)
    reason: str = ""  # for cordon: the reason string to set
    signal: str | None = None
    why: str = ""
    rule: str = ""
    ref: str = ""  # poll: the key of the act Attempt being asked about


class Decision(Stored):
    """One decision record: what `simulate --json` prints and the daemon logs."""

    at: datetime
    node: str
    remediation: str | None = None
    action: Action = Action.NONE
    phase: str  # RecordPhase value
    rule: str
    why: str


class Plan(Frozen):
    """What `decide()` returns. Pure data; applying it is the controller's job."""

    updates: tuple[Remediation, ...] = ()  # new or changed records (whole records)
    effects: tuple[Effect, ...] = ()
    records: tuple[Decision, ...] = ()
    consumed: tuple[str, ...] = ()  # inbox command ids handled by this plan
    breaker: Breaker | None = None  # new breaker state, when it changed
    next_wake: datetime | None = None
    paused: bool | None = None  # new State.paused, when a pause/unpause command changed it
    data: dict[str, Any] | None = None  # new State.data (engine bookkeeping), when changed


def idempotency_key(remediation_id: str, step: str, attempt: int = 0) -> str:
    """Key for a provider call: the same remediation step always yields the same key."""
    return f"{remediation_id}:{step}:{attempt}"


def remediation_id(node: str, fault: str, detector: str | None, request_id: str | None,
                   since: datetime) -> str:
    """Deterministic id: two replicas deciding on the same input create the same id (S6)."""
    raw = "|".join((node, fault, detector or "", request_id or "", since.isoformat()))
    return "r-" + hashlib.sha256(raw.encode()).hexdigest()[:12]
