"""Controller-side models (frozen pydantic): the remediation record, the store's
document, and the plan that the pure `decide()` returns.

This module is the contract between the engine (`policy/`), the store (`store.py`),
the controller cycle (`controller.py`), `simulate` and the CLI. Fields may be added
(with defaults, so old stores still load); never renamed.

How a cycle uses it (ARCHITECTURE "the flow")::

    plan = decide(view, state, now, policy, catalog=catalog)  # pure
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
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_serializer,
    model_serializer,
    model_validator,
)
from typing_extensions import Self

from slurm_heal.types import Action, Severity

SCHEMA_VERSION = 1  # the major: a store with a newer one is refused, never overwritten
# A newer minor only adds fields, which this version keeps as they are. Minor 1 (issue 21)
# added `Attempt.sent` and `Attempt.step`; a minor-0 document gets both from what it
# recorded (see `Attempt`).
SCHEMA_MINOR = 1


def unknown_names(model: type[BaseModel], given: Mapping[str, Any],
                  names: Iterable[str] | None = None) -> ValidationError | None:
    """The error for the names in ``given`` that are no field of ``model`` (None when
    every name is one): a ``extra_forbidden`` error per name, each naming the field it was
    given and the field it was perhaps meant to be."""
    known = frozenset(model.model_fields) if names is None else frozenset(names)
    bad = sorted(k for k in given if k not in known)
    if not bad:
        return None
    import difflib

    errors: list[Any] = []
    for name in bad:
        near = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        errors.append({"type": "value_error", "loc": (name,), "input": given[name],
                       "ctx": {"error": ValueError(
                           f"{model.__name__} has no field {name!r}{hint}")}})
    return ValidationError.from_exception_data(model.__name__, errors)


class Record(BaseModel):
    """A typed record: made or changed by our own code only with the names it has.

    ``Model(name=...)`` and ``record.model_copy(update={...})`` refuse a name that is no
    field (a `ValidationError` that names it): a typo is an error where it is written,
    never a key stored beside the flag it meant (issue 33). What the store *reads*
    (``model_validate``) is not affected: a stored model keeps the fields a newer
    slurm-heal wrote (`Stored`), as before."""

    __record_names__: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.__record_names__ = frozenset(cls.model_fields)

    def __init__(self, /, **data: Any) -> None:
        if not data.keys() <= self.__record_names__:
            error = unknown_names(type(self), data, self.__record_names__)
            if error is not None:
                raise error
        # What BaseModel.__init__ does, without a second frame (a record is made on
        # every cycle for every held remediation).
        self.__pydantic_validator__.validate_python(data, self_instance=self)

    # Pydantic calls a model's own ``__init__`` from every validation (a stored document's
    # too) unless it is marked as the base one: it is, so what the store reads is
    # validated as before and only our code's calls are checked for names.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Self:
        if update and not update.keys() <= self.__record_names__:
            error = unknown_names(type(self), update, self.__record_names__)
            if error is not None:
                raise error
        return super().model_copy(update=update, deep=deep)


class Frozen(Record):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stored(Record):
    """A model that lives in the store (or the inbox): fields a newer slurm-heal added
    (a newer ``schema_minor``) are kept as they are and written back unchanged, so an
    older build never wipes what a newer one recorded (SPEC I5, docs/store.md)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class Mark(Frozen):
    """The mark a limit is recorded once under (SPEC O6, issue 33): the rule that holds
    and, where one rule holds for several reasons, which one (S7: ``i-1`` an incident,
    ``switch:leaf1`` a component's blast radius, ``settle`` the settle wait). Readers use
    ``rule`` and ``subject``; nothing splits a string for them.

    Stored as the text the store has always held (``"S2"``, ``"S7:i-1"``), so a document of
    an older build loads and means the same and an older build reads a newer one's; that
    text is read back only here, at the store's edge, like a timestamp.
    """

    rule: str
    subject: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            rule, _, subject = data.partition(":")  # the store's text form (see above)
            return {"rule": rule, "subject": subject}
        return data

    @model_serializer(mode="plain")
    def _as_text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"{self.rule}:{self.subject}" if self.subject else self.rule


def mark(rule: str, subject: str = "") -> Mark:
    """A `Mark` of ``rule`` (and which hold of it)."""
    return Mark(rule=rule, subject=subject)


# SPEC S7: the words the settle wait's "blocked" record has said since it existed
# (policy/gates.py). A record written before records carried their mark is given the
# settle wait's mark from them, in this one place (issue 33): the console's badge reads
# the mark, never the words.
SETTLE_WORDS = "(incidents.settle = "
SETTLE = Mark(rule="S7", subject="settle")


def marked_by_words(data: Any) -> Any:
    """A step or decision record of an older build: the settle wait's mark from its words."""
    if isinstance(data, dict) and "mark" not in data and data.get("phase") == "blocked" \
            and data.get("rule") == "S7" and SETTLE_WORDS in str(data.get("why", "")):
        return {**data, "mark": SETTLE}
    return data


def without_mark(out: dict[str, Any]) -> dict[str, Any]:
    """Written only when set: a record without one reads back as the same document."""
    if out.get("mark") is None:
        out.pop("mark", None)
    return out


class MarkedRecord(Stored):
    """What an audit entry that may carry a hold's mark shares (`Step`, `Decision`; issue
    33): an older build's settle-wait record is given its mark at load, and the mark is
    written only when set. Each subclass declares its own ``mark`` field, in its place."""

    @model_validator(mode="before")
    @classmethod
    def _settle_of_old(cls, data: Any) -> Any:
        return marked_by_words(data)

    @model_serializer(mode="wrap")
    def _mark_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_mark(handler(self))


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

# Phases a decision record may carry: the remediation phases plus those that are not
# states of a remediation: "escalated" (E1 changed the action), "blocked" (a limit
# held it back; the limit's rule id is the record's rule), "alert" and "notified"
# (observations, D5/D8/I2) and "released" (an orphaned cordon of ours undone, L1).
RecordPhase = Literal[
    "proposed", "approved", "denied", "cordoned", "waiting", "draining", "acting",
    "returning", "done", "failed", "cancelled", "withdrawn", "escalated", "blocked",
    "alert", "notified", "released",
]


class Step(MarkedRecord):
    """One entry of a remediation's audit trail (SPEC P4)."""

    at: datetime
    phase: str  # a RecordPhase value
    rule: str  # the rule that decided, e.g. "P2/approvals[0]", "E1", "S2"
    why: str  # plain language
    by: str | None = None  # a person, or None for slurm-heal itself
    # A "blocked" step: the hold it records (its rule and which hold of it, O6), which
    # the console's badge reads (issue 33); None for every other step.
    mark: Mark | None = None


# The words an Attempt.detail starts with when the controller did not send the step at
# all (its last look found the node taken over by someone else, house style 2, so the
# step "failed" without anything having run). Before schema minor 1 these words were the
# flag; now `Attempt.sent` is, and the words are read only to give a record written
# before it its ``sent`` (issue 21).
NOT_SENT = "not sent: "


def key_step(key: str) -> str:
    """The step an idempotency key names (``<owner id>:<step>:<n>``, a validation's
    ``<run id>:<phase>:<effect>``): what a record written before `Attempt.step` existed
    is given as its step; "" for a key of another shape."""
    parts = key.rsplit(":", 2)
    return parts[1] if len(parts) == 3 else ""


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
    # Times this intent was handed out again with the same key because it had no outcome
    # after safety.step_timeout (the controller stopped between recording and acting).
    resent: int = 0
    # O6: an act (or a poll of it) the provider did not answer (connection refused, a
    # timeout, 5xx after retries): failed tries in a row, the last error and when. The
    # attempt stays in flight (its outcome is unknown); an answer resets the count.
    errors: int = 0
    last_error: str = ""
    last_error_at: datetime | None = None
    # False: the controller did not send the step at all (its last look found the node
    # taken over by someone else, house style 2); it "failed" without anything having
    # run, and ``detail`` says why ("not sent: ..."). E1/S2 count no such act (issue 21:
    # typed, where the detail's first words were the flag).
    sent: bool = True
    # True: a person ended the step (their scancel of our GPU reset job, SPEC S8): their
    # hand, never a failure that climbs E1 (issue 32 item 10).
    by_person: bool = False

    @model_serializer(mode="wrap")
    def _by_person_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Written only when set: a document of a build before it reads back as it was.
        out: dict[str, Any] = handler(self)
        if not out.get("by_person"):
            out.pop("by_person", None)
        return out
    # The step of its owner the attempt belongs to: a remediation's "act", "cordon",
    # "notify-held", ...; a validation's phase. Rules count attempts by it, never by a
    # prefix of the key (issue 21).
    step: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_minor_0(cls, data: Any) -> Any:
        """A record written before minor 1: ``step`` from its key, ``sent`` from the
        words its detail starts with (kept as they are: the audit record's text)."""
        if not isinstance(data, dict) or ("step" in data and "sent" in data):
            return data
        data = dict(data)
        if "step" not in data and isinstance(data.get("key"), str):
            data["step"] = key_step(data["key"])
        if "sent" not in data:
            detail = data.get("detail")
            if isinstance(detail, str) and detail.startswith(NOT_SENT):
                data["sent"] = False
        return data


class HeldBy(Stored):
    """What holds a remediation back now (SPEC O6, issue 32 item 6): the one answer
    `status`, `explain`, the API and the console give, produced by the pure core's gates
    (`policy.holds.Hold.held`) and stored with the remediation, never parsed back out of a
    sentence or a mark.

    ``rule`` is the SPEC id (or ``pause``/``recommend_only``); ``mark`` tells one hold of
    that rule from another (the settle wait, an incident, a component: each recorded
    once); ``until`` is when it lifts by itself (None: it does not); ``lifts`` says in
    words what lifts it and ``command`` is the command a person runs for that ("" when
    only time or the cluster lifts it); ``incident`` is the S7 incident that holds it and
    ``label`` which hold of the rule it is, in a few words.
    """

    rule: str
    mark: Mark
    why: str
    until: datetime | None = None
    lifts: str = ""
    command: str = ""
    incident: str | None = None
    label: str = ""  # which hold, in a few words ("incident i-1", "settle wait"): the gate's

    @property
    def name(self) -> str:
        """"S7 (incident i-1)", "E7", "pause": the rule and which hold of it."""
        return f"{self.rule} ({self.label})" if self.label else self.rule

    @property
    def by_incident(self) -> bool:
        """An incident holds it: the person looks at the component and closes the
        incident; approving the node's own remediation is not what it waits for (S7)."""
        return self.incident is not None


class Work(Record):
    """The working state of one remediation that decides what happens next: every flag
    `decide()` keeps between cycles, in one place, typed (issue 8, "Shape").

    Stored as the remediation's ``data`` object, in the same shape as before this model
    existed: only the flags that are set are written (a flag at its default is left
    out), and keys this build does not know are kept and written back unchanged, so a
    store written by an older or a newer slurm-heal loads and round-trips.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    # L4/L5: the alert that justified the remediation: it must stay active before the
    # act (else withdrawn) and be gone in the health check after it.
    evidence_fault: str | None = None
    # P2: the approval rule a person's approval waits on (recorded once, not per cycle).
    approval_pending: str | None = None
    # The mark of the limit that holds the remediation now (one blocked record per
    # hold); cleared on every phase change.
    blocked: Mark | None = None
    # What that limit is, until when, and what lifts it (O6): set with ``blocked`` and
    # cleared with it; the read model shows only this (issue 32 item 6).
    hold: HeldBy | None = None
    # P3: the checkpoint signal was sent (never twice).
    signalled: bool = False
    # P3: eviction tries made at the wait limit, and when the last one was sent.
    evict_n: int = Field(default=0, ge=0)
    evict_at: datetime | None = None
    # L5: when the provider reported the action finished (the return timeout counts
    # from here).
    act_done: datetime | None = None
    # E1: the end of automatic work on the node: nothing automatic until a person acts.
    handed_to_person: bool = False
    # S8: the node check had drained the node before our cordon (its return to service
    # before our cordon is a person's resume, not the check's own release).
    held_by_check: bool = False
    # S8: a person had drained the node with a reason of their own before our cordon
    # (`reasons.persons_drain`): their resume before our cordon hands it to them.
    held_by_person: bool = False
    # S8: ended because a person resumed the node; the evidence of its alert seen then
    # (`policy.person.marks`): that alert opens nothing new until something new is seen.
    resumed_by_person: bool = False
    seen_evidence: tuple[str, ...] = ()
    # SPEC V4: the post-repair gate failed clearly: the node stays cordoned under this
    # remediation's marker (never released as an orphan) until the fault is seen again
    # (E1) or a person acts.
    gate_failed: bool = False
    # SPEC S8 (issue 32 item 10): the node as the hand-over to a person left it (out of
    # service or not, and its reason); None: not recorded (a store from before). The
    # hand-over holds until a person acts on the node (resumes, drains, re-reasons it);
    # ``seen_evidence`` then holds the evidence published when it was handed over.
    handed_out_of_service: bool | None = None
    handed_reason: str = ""
    # ... and that person has acted since: the hand-over is over (kept, so that our own
    # drain of a new fault later does not bring it back).
    handed_ended: bool = False
    # ... when the controller saw that person act (the hand-over's end): until the node
    # check publishes after it, what it had published was there before that person acted
    # (SPEC S8: `policy.person.covers`).
    handed_ended_at: datetime | None = None

    @field_serializer("evict_at", "act_done", "handed_ended_at")
    def _iso(self, value: datetime | None) -> str | None:
        # The same text the free-dict state wrote (``isoformat()``, "+00:00"), which an
        # older build's datetime.fromisoformat reads on Python 3.10 too.
        return value.isoformat() if value is not None else None

    @model_serializer(mode="wrap")
    def _set_flags_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name, info in type(self).model_fields.items():
            if name in out and getattr(self, name) == info.default:
                del out[name]
        return out

    def but(self, **changes: Any) -> Work:
        """A copy with ``changes`` applied, validated (a wrong type is an error here,
        never a surprise in a later cycle; a name that is no flag is refused, issue 33).
        The keys a newer slurm-heal stored (``__pydantic_extra__``) stay as they are."""
        if not changes.keys() <= self.__record_names__:
            error = unknown_names(Work, changes, self.__record_names__)
            if error is not None:
                raise error
        # The field values themselves, not a model_dump round trip: a dump serializes
        # every field, which made this the costliest line of decide() (issue 13).
        kept = self.__pydantic_extra__
        if kept:
            return Work.model_validate({**kept, **self.__dict__, **changes})
        return Work.model_validate({**self.__dict__, **changes})


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
    # (``next_check``, never used, is gone: an older store's key is kept as it is.)
    data: Work = Field(default_factory=Work)  # decide()'s working state (typed, see Work)

    @property
    def dedup_key(self) -> tuple[str, str, str, str]:
        """Two open remediations never share this key (S6, Q3)."""
        return (self.node, self.fault, self.detector or "", self.request_id or "")

    @property
    def in_flight(self) -> tuple[Attempt, ...]:
        return tuple(a for a in self.attempts if a.outcome is None)

    @property
    def generation(self) -> str:
        """Which proposal a person is asked to decide (SPEC O7): the remediation, its node,
        its action and when it was put to a person. A link or a chat button carries it; a
        decision made with another generation in hand (an older proposal, an escalated
        action) is refused. Twelve hex digits of a SHA-256: stable across processes."""
        proposed = self.phase_times.get("proposed") or self.created
        text = "|".join((self.id, self.node, self.action.value,
                         self.escalated_from.value if self.escalated_from else "",
                         proposed.isoformat(), self.data.approval_pending or ""))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class Command(Stored):
    """An operator's command waiting for the engine (CLI/API write these to the store)."""

    id: str
    at: datetime
    kind: Literal["approve", "deny", "cancel", "request", "reset_breaker", "pause", "unpause",
                  "validate", "close_incident"]
    by: str
    node: str | None = None
    remediation: str | None = None
    action: Action | None = None
    detector: str | None = None
    request_id: str | None = None
    reason: str = ""
    level: int | None = None  # validate: the {level} asked for (V1)
    incident: str | None = None  # close_incident: the incident's id (SPEC S7)
    # SPEC O7, P4: where the person decided (what the audit says: "approved by alice via
    # slack"); None: a command written by a build before channels were recorded.
    channel: Literal["cli", "api", "console", "slack"] | None = None
    # SPEC O7: approve/deny made from a link or a chat message: the proposal's
    # `Remediation.generation` the person saw; the engine refuses it when it changed.
    generation: str | None = None

    @model_serializer(mode="wrap")
    def _incident_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Written only when set: a store of a build without incidents reads back the
        # very document it wrote (SPEC I5: only a close_incident command carries it; O7:
        # only a command of this build carries its channel, and a link's its generation).
        out: dict[str, Any] = handler(self)
        for key in ("incident", "channel", "generation"):
            if out.get(key) is None:
                out.pop(key, None)
        return out

    @property
    def via(self) -> str:
        """" via slack" for the audit's words; "" when the channel is not known."""
        return f" via {self.channel}" if self.channel else ""


class Breaker(Stored):
    """The circuit breaker (SPEC S5)."""

    open: bool = False
    opened_at: datetime | None = None
    why: str = ""
    reset_by: str | None = None
    reset_at: datetime | None = None
    # Every opening, oldest first, the last OPENINGS_KEPT (the console's repairs over
    # time, issue 42): a typed history, never read back out of a step's words.
    openings: tuple[datetime, ...] = ()


OPENINGS_KEPT = 1000


class Pause(Stored):
    """Who last paused or unpaused all automation, when and why (SPEC O2)."""

    paused: bool
    by: str
    at: datetime
    reason: str = ""


# The phases of a validation (SPEC V1, V2; slurm_heal.validation.flow).
VPhase = Literal["requested", "reserving", "submitting", "running", "returning", "ticketing",
                 "restoring", "passed", "failed", "interrupted", "skipped"]
VALIDATION_TERMINAL = frozenset({"passed", "failed", "interrupted", "skipped"})


class Previous(Stored):
    """The node as it was when its validation started: what an interruption restores."""

    states: tuple[str, ...] = ()
    drained: bool = False
    down: bool = False
    reason: str = ""
    reservations: tuple[str, ...] = ()  # the reservations the node was in
    partitions: tuple[str, ...] = ()


class ValidationRun(Stored):
    """One validation of one machine (SPEC V1, V2), with its audit record (P4)."""

    id: str
    node: str
    host: str | None = None  # the machine, when the provider named it (migrate)
    # "gate": the post-repair gate of a remediation (SPEC V4), not a vacated machine
    origin: Literal["migrate", "remove", "request", "gate"] = "request"
    remediation: str | None = None  # the remediation that vacated (or gates) the machine
    requested_by: str = "slurm-heal"
    reason: str = ""
    level: int | None = None  # the {level} value; None: the policy decides
    phase: VPhase = "requested"
    created: datetime
    updated: datetime
    phase_times: dict[str, datetime] = Field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    previous: Previous | None = None
    reservation: str = ""
    peer: str = ""
    job_name: str = ""
    job_id: int | None = None
    job_state: str = ""
    results_dir: str = ""
    outcome: Literal["pass", "fail", "error"] | None = None
    summary: str = ""  # the suite's verdict in words (failed steps and why)
    ticket: str = ""  # the ticket's reference(s), when one was filed
    restored: str = ""  # what an interruption put back, in words
    # SPEC S8: the job was cancelled by someone else (a person's scancel; the flow
    # cancels its own only on its way to restoring): a person's hand (issue 32 item 10).
    by_person: bool = False

    @model_serializer(mode="wrap")
    def _by_person_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Written only when set (as an attempt's): older documents round-trip unchanged.
        out: dict[str, Any] = handler(self)
        if not out.get("by_person"):
            out.pop("by_person", None)
        return out

    @property
    def terminal(self) -> bool:
        return self.phase in VALIDATION_TERMINAL

    def pending(self) -> tuple[Attempt, ...]:
        """The current phase's attempts that have no outcome yet (in flight)."""
        return tuple(a for a in self.attempts if a.step == self.phase and a.outcome is None)

    def of_phase(self) -> tuple[Attempt, ...]:
        """The current phase's attempts (by their typed step, issue 21)."""
        return tuple(a for a in self.attempts if a.step == self.phase)


class State(Stored):
    """The store's whole document (SPEC I5)."""

    schema_version: int = SCHEMA_VERSION
    schema_minor: int = SCHEMA_MINOR
    remediations: tuple[Remediation, ...] = ()
    inbox: tuple[Command, ...] = ()
    breaker: Breaker = Breaker()
    paused: bool = False  # global kill switch: nothing disruptive runs while set
    pause: Pause | None = None  # who set or cleared ``paused`` last, when and why (O2)
    data: dict[str, Any] = Field(default_factory=dict)
    validations: tuple[ValidationRun, ...] = ()  # SPEC V1, V2 (slurm_heal.validation.flow)

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
    "gate",  # queue the post-repair gate's run on the node (SPEC V4, validation flow)
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
    step: str = ""  # the step its key names (Attempt.step of the intent recorded for it)
    # Send again under the SAME key: its Attempt was recorded but never got an outcome
    # (issue 8). The store hands it out once more instead of refusing the known key.
    resend: bool = False


class Decision(MarkedRecord):
    """One decision record: what `simulate --json` prints and the daemon logs."""

    at: datetime
    node: str
    remediation: str | None = None
    action: Action = Action.NONE
    phase: str  # RecordPhase value
    rule: str
    why: str
    mark: Mark | None = None  # a "blocked" record: the hold it records (as Step.mark)


class Plan(Frozen):
    """What `decide()` returns. Pure data; applying it is the controller's job."""

    updates: tuple[Remediation, ...] = ()  # new or changed records (whole records)
    effects: tuple[Effect, ...] = ()
    records: tuple[Decision, ...] = ()
    consumed: tuple[str, ...] = ()  # inbox command ids handled by this plan
    breaker: Breaker | None = None  # new breaker state, when it changed
    next_wake: datetime | None = None
    paused: bool | None = None  # new State.paused, when a pause/unpause command changed it
    pause: Pause | None = None  # new State.pause (who, when, why), with ``paused``
    data: dict[str, Any] | None = None  # new State.data (engine bookkeeping), when changed


def idempotency_key(remediation_id: str, step: str, attempt: int = 0) -> str:
    """Key for a provider call: the same remediation step always yields the same key."""
    return f"{remediation_id}:{step}:{attempt}"


def remediation_id(node: str, fault: str, detector: str | None, request_id: str | None,
                   since: datetime) -> str:
    """Deterministic id: two replicas deciding on the same input create the same id (S6)."""
    raw = "|".join((node, fault, detector or "", request_id or "", since.isoformat()))
    return "r-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def validation_run_id(node: str, origin: str, ref: str) -> str:
    """Deterministic id of a validation run: the same vacated machine (or request) gives
    the same run (S6)."""
    raw = "|".join((node, origin, ref))
    return "v-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def gate_run_id(node: str, key: str) -> str:
    """The run of a remediation's post-repair gate (SPEC V4): one per gate attempt, named
    by that attempt's idempotency key, so the engine finds the run the controller queued
    and a gate sent again under the same key queues no second one (S6)."""
    return validation_run_id(node, "gate", key)


class IncidentAlert(Stored):
    """One node's alert as an incident carries it (SPEC S7, D7: evidence unchanged)."""

    node: str
    fault: str
    severity: str = "critical"
    summary: str = ""
    first_seen: datetime
    evidence: tuple[dict[str, Any], ...] = ()


class Incident(Stored):
    """One incident on a shared component (SPEC S7): related alerts on several nodes under
    one switch, NVLink domain, rack or driver cohort, for a person; the nodes' own remediations are held while it
    is open. Kept in the store (``data["incidents"]``), its id deterministic (SPEC S6)."""

    id: str
    component: str  # "switch:leaf1", "block:nvl1", "rack:r12"
    kind: str
    name: str
    group: str  # the related faults' group (incidents.related), "xid:gpu.xid.79" per fault
    # Issue 37: the cause domain's kind ("leaf", "nvlink", "rack", "cohort"; "" in an
    # older store) and every group it took in (its first is ``group``; new groups join).
    domain: str = ""
    groups: tuple[str, ...] = ()
    size: int  # nodes under the component
    source: str = ""  # where the topology came from
    opened: datetime
    updated: datetime
    nodes: tuple[str, ...] = ()
    alerts: tuple[IncidentAlert, ...] = ()
    state: Literal["open", "resolved"] = "open"
    resolved: datetime | None = None
    resolved_by: str | None = None  # the person who closed it; None: the alerts cleared
    why: str = ""  # why it opened
    resolution: str = ""  # why it ended
    # How it ended (SPEC O6, issue 37): closed by a person, its alerts cleared, it no
    # longer qualified (fewer nodes than a rule opens one for), or it reached
    # incidents.max_age and was handed to a person.
    ended: Literal["closed", "cleared", "released", "aged"] | None = None
    # Since when fewer of its nodes keep the alerts than an incident opens for: it is
    # released once that lasted incidents.settle (alerts clear node by node as a switch
    # comes back; the last ones are not rebooted for a check that has not run yet).
    short_since: datetime | None = None

    @property
    def all_groups(self) -> tuple[str, ...]:
        return self.groups or (self.group,)

    @property
    def open(self) -> bool:
        return self.state == "open"
