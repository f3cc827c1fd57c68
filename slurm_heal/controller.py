"""The controller cycle (ARCHITECTURE "the flow") and the daemon loop.

One cycle, short and imperative; all deciding happens in the pure `decide()`:

    1. now   = clock()                      read once
    2. view  = slurm.snapshot()             nodes, reasons, Extra, jobs
    3. state = store.load()                 a corrupt store fails closed (nothing runs)
    4. plan  = decide(view, state, now, policy, catalog)
    5. store.apply(plan)                    updates + every effect's intent, BEFORE acting;
                                            returns the effects this replica won (S6)
    6. execute them through Slurm / the provider, each isolated (one failure does not
       stop the others)
    7. store.record_outcome(...)            per effect

A ``poll`` effect is not an intent of its own (the store hands it out without recording
it): it asks the provider what happened to the remediation's ``act`` attempt (its
``ref`` is that attempt's idempotency key) and records the answer on that attempt. That is how a restarted controller resolves an attempt left in
flight without acting again.
"""

from __future__ import annotations

import enum
import gc
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from slurm_heal import reasons, sdnotify
from slurm_heal import store as store_mod
from slurm_heal.clock import SteadyClock, words
from slurm_heal.config import Policy, read_section
from slurm_heal.errors import (
    HealError,
    NotFound,
    ProviderError,
    ProviderRefused,
    SlurmError,
    StoreCorrupt,
    StoreError,
    StoreLocked,
)
from slurm_heal.heartbeat import Heartbeat
from slurm_heal.models import NOT_SENT, Attempt, Decision, Effect, Plan, State
from slurm_heal.ports import DecidePort, StatePort, ValidatorPort
from slurm_heal.providers.base import Operation, Provider
from slurm_heal.sections import ControllerSettings as ControllerSettings  # its home (issue 21)
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.sources import nhc
from slurm_heal.topology import TopologyReader
from slurm_heal.types import Action, ClusterView, NodeInfo

log = logging.getLogger("slurm_heal.controller")

RETAIN_EVERY = timedelta(hours=1)

Outcome = Literal["ok", "failed", "running"]


def utcnow() -> datetime:
    """The real clock (the only place the controller reads it)."""
    return datetime.now(timezone.utc)


def controller_settings(raw: ControllerSettings | dict[str, Any],
                        source: str = "config") -> ControllerSettings:
    """Validate the ``[controller]`` section (or take the loaded policy's, already
    typed); errors name the key."""
    return read_section(ControllerSettings, raw, file=source, key="controller")


# What an effect's handler says: its outcome, the detail recorded, the provider's
# operation id (act and poll; None for the others).
Done = tuple[Outcome, str, "str | None"]
# The disruptive steps: the last look (`Controller._taken_over`) comes before each.
DISRUPTIVE = frozenset({"act", "signal_jobs", "requeue_jobs", "cancel_jobs"})


def failure_outcome(kind: str, exc: Exception) -> tuple[Outcome | None, str]:
    """The one map from what an effect's step raised to its outcome and detail; None:
    left in flight (unknown whether it ran), asked about by its key next cycle (S6).

    - ProviderRefused: a definite no from the provider, nothing ran: failed.
    - any other ProviderError on an act or poll (a timeout, a 5xx after retries, a lost
      connection): whether the action ran is unknown, so it stays in flight; the next
      cycle asks by the same key, and the engine's act timeout hands it to a person at
      the end. On any other effect: failed.
    - SlurmError: failed, in Slurm's words; any other HealError (NotFound for a node gone
      from Slurm, a store error): failed, named by its class.
    - anything else (issue 8, defect 7: an OSError from a full disk, a bug): that effect
      fails; an act or poll stays in flight, since whether the action ran is unknown.
    """
    in_flight = kind in ("act", "poll")
    if isinstance(exc, ProviderRefused):
        return "failed", str(exc)
    if isinstance(exc, ProviderError):
        return (None if in_flight else "failed"), str(exc)
    if isinstance(exc, SlurmError):
        return "failed", str(exc)
    if isinstance(exc, HealError):
        return "failed", f"{type(exc).__name__}: {exc}"
    if in_flight:
        return None, f"{type(exc).__name__}: {exc}"
    return "failed", f"unexpected {type(exc).__name__}: {exc}"


@dataclass(slots=True)
class Executed:
    effect: Effect
    outcome: Outcome | None  # None: left in flight (timeout), resolved next cycle
    detail: str = ""


@dataclass(frozen=True)
class CycleFacts:
    """What one cycle saw, decided and did, for the observers beside it (notifications,
    metrics: SPEC O3, O4). Observers only read; one that fails never fails the cycle."""

    at: datetime
    view: ClusterView
    before: State  # the store as loaded, before the plan was applied
    after: State  # the store after the plan was applied (outcomes not yet recorded)
    plan: Plan
    executed: tuple[Executed, ...]
    duration_s: float


@dataclass(slots=True)
class CycleReport:
    at: datetime
    records: tuple[Decision, ...] = ()
    executed: list[Executed] = field(default_factory=list)
    failed_closed: str | None = None


class Where(str):
    """``node=gpu01 remediation=r-1 rule=D5 ...`` in a text log line, the same values as
    fields of a JSON log line (issue 38: `JsonLogFormatter` makes each a key of its own,
    so a log shipper filters on ``node`` or ``phase`` without parsing the message)."""

    fields: dict[str, str]

    def __new__(cls, **kv: object) -> Where:
        fields = {k: str(v.value if isinstance(v, enum.Enum) else v)
                  for k, v in kv.items() if v not in (None, "")}
        self = super().__new__(cls, " ".join(f"{k}={v}" for k, v in fields.items()))
        self.fields = fields
        return self

    def plus(self, **kv: object) -> Where:
        return Where(**self.fields, **kv)


def _fields(**kv: object) -> Where:
    return Where(**kv)


class Notifier:
    """The support channel (D8): a JSON-lines file plus a WARNING log line."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def __call__(self, effect: Effect, now: datetime) -> None:
        log.warning("notify %s why=%s", _fields(node=effect.node, remediation=effect.remediation,
                                                rule=effect.rule, effect="notify"), effect.why)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"at": now.isoformat(), "node": effect.node,
                                     "remediation": effect.remediation, "rule": effect.rule,
                                     "why": effect.why}) + "\n")


class Controller:
    """Runs cycles. Every port is passed in; nothing here decides anything."""

    def __init__(self, *, slurm: SlurmClient, provider: Provider, store: StatePort,
                 policy: Policy, clock: Callable[[], datetime] = utcnow,
                 notifier: Callable[[Effect, datetime], None] | None = None,
                 decide: DecidePort | None = None,
                 observers: Sequence[Callable[[CycleFacts], None]] = (),
                 hot_retention: timedelta | None = None,
                 validator: ValidatorPort | None = None,
                 gpu_reset: Provider | None = None) -> None:
        if decide is None:
            # Issue 20: the real decide(), with each node's check data kept between
            # cycles (validated once per change of its Extra). The catalog is read here,
            # once, at the edge: decide() opens no file (issue 33).
            from slurm_heal import catalog
            from slurm_heal.policy.incremental import Decide
            decide = Decide(catalog.load())
        self.slurm = slurm
        self.provider = provider
        self.store = store
        self.policy = policy
        self.clock = clock
        self.notifier = notifier or Notifier(None)
        self._decide: DecidePort = decide
        self.observers = list(observers)
        self.stop = threading.Event()
        # SPEC O1: what the daemon loop last said about this controller (its heartbeat)
        self.liveness: Heartbeat | None = None
        self.last_failure: Exception | None = None  # why the last cycle tried failed
        # Issue 13: retention runs in the daemon (at most hourly); None = never (tests).
        # [controller] hot_retention (issue 26), a typed duration (issue 33).
        self.hot_retention = hot_retention
        self._retained_at: datetime | None = None
        # SPEC V1, V2: the validation flow (slurm_heal.validation.service.Validator);
        # None: vacated machines are not followed (tests of the remediation cycle alone).
        self.validator: ValidatorPort | None = validator
        # SPEC S7: Slurm's topology (or the policy's file), read at most once per
        # topology.refresh and attached to each cycle's view; never fails a cycle.
        self.topology = TopologyReader(slurm)
        # SPEC E6: reset_gpu runs as a Slurm job on the node (slurm_heal.gpureset), not
        # through the provider; None: the provider is asked (simulate, tests).
        self.gpu_reset = gpu_reset
        # SPEC S8: the act keys whose operation a person ended this cycle (their scancel
        # of our reset job): recorded on the act's attempt with its outcome.
        self._by_person: set[str] = set()

    def cycle(self) -> CycleReport:
        started = time.monotonic()
        now = self.clock()
        gc.unfreeze()  # the last cycle's snapshot may be collected again
        view = self.slurm.snapshot()
        view = self.topology.attach(view, self.policy.topology, now)
        try:
            state: State = self.store.load()
        except StoreCorrupt as exc:  # house style 5: fail closed until a person acts
            log.error("store is corrupt, nothing disruptive runs until a person acts: %s", exc)
            return CycleReport(at=now, failed_closed=str(exc))
        if isinstance(self.clock, SteadyClock):
            state, now = self._follow_clock(self.clock, state, now)
        # Issue 20: the snapshot and the store live for the whole cycle; frozen, the
        # garbage collector does not scan them over and over while decide() runs.
        gc.freeze()
        plan = self._decide(view, state, now, self.policy)
        before = state
        state, mine = self.store.apply(plan, now)
        for rec in plan.records:
            log.info("%s why=%s", _fields(node=rec.node, remediation=rec.remediation,
                                          rule=rec.rule, phase=rec.phase,
                                          action=rec.action), rec.why)
        report = CycleReport(at=now, records=plan.records)
        for effect in mine:
            if self.stop.is_set():
                log.info("stopping between steps; the rest runs next time")
                break
            report.executed.append(self._run(effect, state, now))
        if self.validator is not None and not self.stop.is_set():
            try:
                self.validator.cycle(view, now, self.policy)
            except HealError as exc:  # one subsystem's failure never fails the cycle
                log.error("validation step skipped this cycle: %s", exc)
            except Exception:
                log.exception("validation step failed unexpectedly; the cycle goes on")
        if self.observers:
            facts = CycleFacts(at=now, view=view, before=before, after=state, plan=plan,
                               executed=tuple(report.executed),
                               duration_s=time.monotonic() - started)
            for observe in self.observers:
                try:
                    observe(facts)
                except Exception:  # SPEC O3: never blocking or failing a cycle
                    log.exception("observer %r failed; the cycle goes on", observe)
        self._retain(now)
        return report

    def _follow_clock(self, clock: SteadyClock, state: State,
                      now: datetime) -> tuple[State, datetime]:
        """Issue 34 item 5 (SPEC P3, L5, S2): the stored times on the clock's frame before
        anything is decided. A step of the wall clock (seen by the clock while we ran, or
        between the store's frame and a restarted clock on the same boot) moves them by
        the step, once (`Store.follow_clock`), logged once: every wait then sees the real
        time elapsed. A store that cannot be written skips the cycle, as any store error
        does (nothing is decided on times off by the step)."""
        stored = store_mod.clock_frame(state)
        clock.follow(stored)
        if stored == clock.frame:
            return state, now
        state, step = self.store.follow_clock(clock.frame, now)
        if step is not None:
            log.warning("the wall clock stepped %s (boot %s): the stored times moved by the "
                        "same step, so waits and timeouts keep their real length",
                        words(step), clock.frame.boot[:8] or "?",
                        extra={"fields": {"event": "clock_step",
                                          "step_s": step.total_seconds()}})
        return state, clock()

    def _retain(self, now: datetime) -> None:
        """The store's retention (docs/store.md): keep what E1-E3 need and the hot
        retention, archive the rest (P4). Never fails the cycle."""
        if self.hot_retention is None or (
                self._retained_at is not None and now - self._retained_at < RETAIN_EVERY):
            return
        esc = self.policy.escalation
        keep = max(self.hot_retention, esc.window, esc.migrate_evidence_window,
                   esc.lemon.window, store_mod.DEFAULT_KEEP)  # E7 counts its window too
        try:
            self.store.prune(now, keep=keep, archive=True)
        except HealError as exc:
            log.error("store retention skipped: %s", exc)
            return
        self._retained_at = now

    # -- effects -----------------------------------------------------------------------
    def _run(self, effect: Effect, state: State, now: datetime) -> Executed:
        """Run one effect through its handler (`HANDLERS`), each isolated: whatever it
        raises becomes its outcome through `failure_outcome`, and the cycle goes on."""
        rem = state.get(effect.remediation) if effect.remediation else None
        where = _fields(node=effect.node, remediation=effect.remediation, rule=effect.rule,
                        phase=rem.phase if rem is not None else None)
        record_key = effect.key
        if effect.kind == "poll":
            act = _act_attempt(state, effect.remediation, effect.ref)
            if act is None:
                log.error("%s poll names no act attempt (ref=%s)", where.plus(effect="poll"),
                          effect.ref)
                return Executed(effect, None, "no act attempt to poll")
            record_key = act.key  # the answer goes on the act's attempt
        outcome: Outcome
        operation: str | None = None
        sent = True  # False: the last look found the node taken over; nothing was sent
        self._by_person.discard(record_key)
        try:
            if effect.kind in DISRUPTIVE and (taken := self._taken_over(effect.node)):
                # House style 2 (issue 8, defect 11): the last look before a disruptive
                # step; someone else drained the node since the snapshot: nothing is sent.
                outcome, detail, sent = "failed", NOT_SENT + taken, False
            elif (handler := HANDLERS.get(effect.kind)) is None:  # pragma: no cover
                outcome, detail = "failed", f"unknown effect {effect.kind}"  # a closed Literal
            else:
                outcome, detail, operation = handler(self, effect, state, now)
        except Exception as exc:
            settled, detail = failure_outcome(effect.kind, exc)
            if not isinstance(exc, HealError):
                # Issue 8 (defect 7): one effect's unexpected error (an OSError from a
                # full disk, a bug) fails that effect only; the traceback is logged once,
                # here, and the cycle goes on with the next effect.
                log.exception("%s failed unexpectedly", where.plus(effect=effect.kind))
            if settled is None:
                if isinstance(exc, ProviderError):
                    log.warning("%s outcome unknown, left in flight: %s",
                                where.plus(effect=effect.kind), exc)
                    self._provider_error(effect.remediation, record_key, str(exc), now, where)
                return Executed(effect, None, detail)
            outcome = settled
        log.info("%s detail=%s", where.plus(effect=effect.kind, action=effect.action,
                                            outcome=outcome), detail[:200])
        by_person = record_key in self._by_person
        self._by_person.discard(record_key)
        if effect.remediation and record_key:
            try:
                self.store.record_outcome(effect.remediation, record_key, outcome, now,
                                          operation=operation, detail=detail[:2000],
                                          sent=sent, by_person=by_person)
            except HealError as exc:
                log.error("%s could not record the outcome: %s",
                          where.plus(effect=effect.kind), exc)
            except Exception:
                log.exception("%s could not record the outcome", where.plus(effect=effect.kind))
        return Executed(effect, outcome, detail)

    def _operator(self, action: Action) -> Provider:
        """Who carries out ``action``: the GPU reset job for reset_gpu (SPEC E6) where the
        daemon has one, else the provider."""
        if action is Action.RESET_GPU and self.gpu_reset is not None:
            return self.gpu_reset
        return self.provider

    # One small handler per effect kind (`HANDLERS`): each does its step and says how it
    # went; an exception is turned into the outcome by `failure_outcome`, not here.
    def _poll(self, effect: Effect, state: State, now: datetime) -> Done:
        act = _act_attempt(state, effect.remediation, effect.ref)
        assert act is not None  # _run answered a poll without one
        op = self._operator(act.action).status(act.key)
        if op is None:
            # The provider never saw the key: the submit never arrived. Sending it
            # again with the SAME key cannot execute twice (the key dedups).
            log.warning("%s provider has no record of key=%s; re-sending with the same key",
                        _fields(node=effect.node, remediation=effect.remediation,
                                rule=effect.rule), act.key)
            op = self._operator(act.action).submit(effect.node, act.action, act.key)
        return self._operation(effect, op, now)

    def _act(self, effect: Effect, state: State, now: datetime) -> Done:
        op = self._operator(effect.action).submit(effect.node, effect.action, effect.key)
        return self._operation(effect, op, now)

    def _operation(self, effect: Effect, op: Operation, now: datetime) -> Done:
        outcome, detail, operation = _op_outcome(op)
        if op.by_person and op.finished:
            self._by_person.add(op.key)
        self._vacated(effect, op, outcome, now)
        return outcome, detail, operation

    def _cordon(self, effect: Effect, state: State, now: datetime) -> Done:
        node = self.slurm.node(effect.node)
        if (node.drained or node.down) and reasons.owner(node.reason) in (
                "slurm", "person") and not nhc.taken_over(node, self.policy.sources.nhc):
            # (SPEC D13: an NHC drain of a check the policy maps is taken over, opt-in)
            # house style 2: a person's drain (or Slurm's own reboot reason) is never
            # relabelled (the engine holds such nodes too; this guards the moment between
            # its read and ours)
            return "failed", (f"{effect.node} is out of service for a reason not ours "
                              f"({node.reason!r}); not relabelled"), None
        self.slurm.drain(effect.node, effect.reason or reasons.format_marker(
            "request", remediation=effect.remediation, by="controller"))
        return "ok", "drained", None

    def _signal_jobs(self, effect: Effect, state: State, now: datetime) -> Done:
        self.slurm.signal_jobs(effect.node, effect.signal or "USR1")
        return "ok", f"signal {effect.signal or 'USR1'} sent", None

    def _requeue_jobs(self, effect: Effect, state: State, now: datetime) -> Done:
        self.slurm.requeue_jobs(effect.node)
        return "ok", "jobs requeued", None

    def _cancel_jobs(self, effect: Effect, state: State, now: datetime) -> Done:
        self.slurm.cancel_jobs(effect.node)
        return "ok", "jobs cancelled", None

    def _resume(self, effect: Effect, state: State, now: datetime) -> Done:
        """``resume`` and ``release`` alike: only a node out of service for our reason."""
        node = self.slurm.node(effect.node)
        if not (node.drained or node.down):
            return "ok", "already in service", None
        if effect.reason and node.reason != effect.reason:
            # house style 2 / issue 8: the reason changed since the plan was made (a
            # person's drain, the node check's own drain): not ours to undo.
            return "failed", (f"reason changed since it was planned ({effect.reason!r}, "
                              f"now {node.reason!r}); left alone"), None
        if reasons.owner(node.reason) == "ours" or _our_reboot(node, state, effect):
            self.slurm.resume(effect.node)
            return "ok", "resumed", None
        # house style 2: never resume a node somebody else took out of service
        return "failed", f"reason is not ours ({node.reason!r}); left alone", None

    def _notify(self, effect: Effect, state: State, now: datetime) -> Done:
        self.notifier(effect, now)
        return "ok", "sent to support", None

    def _provider_error(self, rid: str | None, key: str, error: str, now: datetime,
                        where: Where) -> None:
        """O6: the provider's error kept on the act's attempt, for status and the engine."""
        if not rid:
            return
        try:
            self.store.record_provider_error(rid, key, error, now)
        except Exception as exc:  # a store that cannot say it must not stop the cycle
            log.error("%s could not record the provider error: %s", where, exc)

    def _vacated(self, effect: Effect, op: Operation, outcome: Outcome, now: datetime) -> None:
        """SPEC V1, L2: a migrate or remove that succeeded hands its machine to
        validation, before its outcome is recorded (a crash in between queues the same
        validation again, never a second one). A failure here never fails the action."""
        if self.validator is None or outcome != "ok" or not effect.remediation or \
                op.action not in (Action.MIGRATE, Action.REMOVE):
            return
        try:
            self.validator.vacated(remediation=effect.remediation, node=effect.node,
                                   action=op.action, op=op, now=now, policy=self.policy)
        except Exception:
            log.exception("%s the vacated machine could not be queued for validation",
                          _fields(node=effect.node, remediation=effect.remediation,
                                  rule=effect.rule))

    def _gate(self, effect: Effect, state: State, now: datetime) -> Done:
        """SPEC V4: queue the post-repair gate's run; the validation flow runs it (from
        this cycle on) and the engine reads its verdict from the store."""
        if self.validator is None or not effect.remediation:
            return "failed", "this controller runs no validation flow: the gate cannot run", None
        run = self.validator.gate(remediation=effect.remediation, node=effect.node,
                                  key=effect.key, now=now, why=effect.why)
        return "ok", f"gate run {run.id} queued", None

    def _taken_over(self, name: str) -> str:
        """The last look before a disruptive step: why the node is someone else's now,
        or "". When Slurm cannot be asked, the snapshot the engine decided on stands (a
        transient scontrol error must not turn into a failed action)."""
        try:
            node = self.slurm.node(name)
        except (SlurmError, NotFound) as exc:
            log.warning("%s last look before the step failed, going by the snapshot: %s",
                        _fields(node=name), exc)
            return ""
        if not (node.drained or node.down):
            # SPEC S8: every disruptive step runs on a node we drained; one in service
            # again was resumed by a person since the snapshot: theirs now, nothing is sent.
            return (f"{name} was resumed by someone else (in service again, "
                    f"{'+'.join(node.states) or 'no state'}): a person's hand wins (SPEC S8)")
        return _foreign_reason(node)


Handler = Callable[[Controller, Effect, State, datetime], Done]
# Effects dispatched by kind (models.EffectKind): one small handler each.
HANDLERS: dict[str, Handler] = {
    "poll": Controller._poll,
    "act": Controller._act,
    "cordon": Controller._cordon,
    "signal_jobs": Controller._signal_jobs,
    "requeue_jobs": Controller._requeue_jobs,
    "cancel_jobs": Controller._cancel_jobs,
    "resume": Controller._resume,
    "release": Controller._resume,
    "notify": Controller._notify,
    "gate": Controller._gate,
}


def _foreign_reason(node: NodeInfo) -> str:
    """Why the node is someone else's now (drained or down for a reason that is neither
    ours, a request, nor Slurm's own reboot reason), or "" when it is not."""
    if (node.drained or node.down) and reasons.owner(node.reason) == "person":
        return (f"{node.name} was {'set DOWN' if node.down else 'drained'} by someone else "
                f"({node.reason!r})")
    return ""


def _our_reboot(node: NodeInfo, state: State, effect: Effect) -> bool:
    """The node is out of service only because of the reboot our action caused: Slurm's
    own reboot reason replaced our marker, and the boot came after our act."""
    if (reasons.owner(node.reason) != "slurm" or node.boot_time is None
            or reasons.slurm_rebooting(node.states)):
        return False  # a reboot pending or under way now is not the one our act caused
    act = _act_attempt(state, effect.remediation, "")
    return act is not None and node.boot_time > act.started


def _act_attempt(state: State, remediation: str | None, ref: str) -> Attempt | None:
    """The act attempt a poll asks about: the one named by ``ref``, else the latest."""
    rem = state.get(remediation) if remediation else None
    if rem is None:
        return None
    acts = [a for a in rem.attempts if a.effect == "act" and (not ref or a.key == ref)]
    return acts[-1] if acts else None


def _op_outcome(op: Operation) -> tuple[Outcome, str, str]:
    if op.status == "succeeded":
        return "ok", op.detail or "succeeded", op.id
    if op.status == "failed":
        return "failed", op.detail or "failed", op.id
    return "running", op.detail or op.status, op.id


class LeaderLock:
    """One active controller per state directory; other replicas wait as standby.

    The store alone already makes two replicas create one remediation and run each
    action once (SPEC S6), but limits that span nodes (S3, S4, S5) are decided on a
    snapshot: two replicas deciding at once could each start one in the same pool. An
    exclusive flock on ``<state_dir>/leader.lock`` makes one of them the leader; the lock
    goes with its process (even on kill -9), and a standby takes over at its next try.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "leader.lock"
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        import fcntl
        import os

        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        try:  # who leads, for people reading the file; a full disk must not stop us
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        self._fd = fd
        return True

    def release(self) -> None:
        import os

        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _beat(controller: Controller, prev: Heartbeat | None, error: str, interval: float,
          cycles: int, problems: tuple[str, ...] = ()) -> Heartbeat:
    import os

    from slurm_heal import __version__

    now = controller.clock()
    last_success = prev.last_success if prev is not None else None
    failures = prev.failures_since_success if prev is not None else 0
    if error:
        failures += 1
    else:
        last_success, failures = now, 0
    return Heartbeat(
        at=now, last_success=last_success, failures_since_success=failures,
        last_error=error or (prev.last_error if prev is not None else ""),
        last_error_at=now if error else (prev.last_error_at if prev is not None else None),
        pid=os.getpid(), version=__version__, mode=controller.policy.mode,
        interval=interval, cycles=cycles, problems=problems)


def _status(beat: Heartbeat, problem: str) -> str:
    """The heartbeat in a line for `systemctl status` (sd_notify's STATUS=)."""
    if beat.failing:
        words = (f"leading, cycle {beat.cycles}: {beat.failures_since_success} failed in a "
                 f"row: {beat.last_error}")
    else:
        words = f"leading, cycle {beat.cycles} ok"
    return f"{words}; {problem}" if problem else words


def run_forever(controller: Controller, interval: float, heartbeat: Path | None = None,
                max_cycles: int | None = None, leader: LeaderLock | None = None,
                reload: Callable[[], float | None] | None = None,
                on_lead: Callable[[], str] | None = None,
                on_standby: Callable[[], None] | None = None) -> int:
    """The daemon loop: cycles until SIGTERM/SIGINT (clean stop between steps). With
    ``leader``, cycles run only while this process holds the leader lock. With
    ``reload``, SIGHUP asks for it before the next cycle (it returns the new interval,
    or None to keep the old one). ``on_lead`` runs when this process first leads (issue
    22: the metrics server, so a standby or a `--once` beside the active daemon never
    fights it for the port); it returns "" when it is done, or the problem in words, and
    is then tried again before each cycle, the problem in the heartbeat (issue 34 item 4,
    SPEC O1: a taken metrics port never leaves the cluster without a controller).
    ``on_standby`` runs after each wait of a standby (issue 38: its metrics, leader 0)."""
    hup = threading.Event()

    def _hup(signum: int, _frame: object) -> None:
        log.info("signal %d: the config is read again before the next cycle", signum)
        hup.set()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping after the current step", signum)
        sdnotify.notify("STOPPING=1", "STATUS=stopping after the current step")
        controller.stop.set()

    # Issue 38: under systemd (Type=notify, WatchdogSec=) the loop says READY=1 once, then
    # WATCHDOG=1 with each heartbeat and while it waits; a cycle stuck longer than the
    # watchdog's period stops them, and systemd restarts the controller.
    watchdog = sdnotify.watchdog_seconds()
    tick = min(interval, watchdog / 2) if watchdog else interval

    def _wait(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not controller.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            if controller.stop.wait(min(left, tick)):
                return
            if watchdog:
                sdnotify.notify("WATCHDOG=1")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        if reload is not None:
            signal.signal(signal.SIGHUP, _hup)
    cycles = 0
    standby = False
    problem = ""
    told = ""  # the last unexpected failure whose traceback was logged
    if heartbeat is not None and controller.liveness is None:
        # SPEC O1: a restarted daemon (or the next `--once` from cron) keeps the last
        # success its predecessor recorded, so a blind start does not erase it.
        from slurm_heal.heartbeat import read as read_heartbeat

        controller.liveness = read_heartbeat(heartbeat)
    sdnotify.notify("READY=1", f"STATUS=started (pid {os.getpid()})")
    while not controller.stop.is_set():
        if reload is not None and hup.is_set():
            hup.clear()
            interval = reload() or interval
        if leader is not None and not leader.try_acquire():
            if max_cycles is not None:  # --once from cron: the active one does the work
                log.info("another controller holds %s; nothing to do", leader.path)
                break
            if not standby:
                log.info("standby: another controller holds %s", leader.path)
                sdnotify.notify(f"STATUS=standby: another controller holds {leader.path}")
                standby = True
            if watchdog:
                sdnotify.notify("WATCHDOG=1")
            _wait(interval)
            if on_standby is not None and not controller.stop.is_set():
                on_standby()
            continue
        if standby:
            log.info("now the active controller (%s)", leader.path if leader else "")
            standby = False
        if on_lead is not None:
            problem = on_lead()
            if not problem:
                on_lead = None
        error = ""
        controller.last_failure = None
        try:
            report = controller.cycle()
            if report.failed_closed:
                error = f"store corrupt, failing closed: {report.failed_closed}"
                controller.last_failure = StoreCorrupt(error)
        except SlurmError as exc:
            log.error("cycle skipped, Slurm unavailable: %s", exc)
            error = f"Slurm unavailable: {exc}"
            controller.last_failure = exc
        except StoreLocked as exc:
            controller.last_failure = exc
            # Issue 8 (defect 10): a CLI command or a stuck process holds the store lock
            # past its timeout; the message names the holder. Skip, try next interval.
            log.warning("cycle skipped, the store is busy: %s", exc)
            error = f"store busy: {exc}"
        except StoreError as exc:
            controller.last_failure = exc
            # A full disk, a newer store: nothing was written (the store's writes are
            # atomic); skip the cycle and try again, never a crash loop under systemd.
            log.error("cycle skipped, the store cannot be used: %s", exc)
            error = f"store cannot be used: {exc}"
        except Exception as exc:  # noqa: BLE001 - a bug in one cycle never ends the daemon
            # One bad input never stops a daemon: an exception nobody raised on purpose (a
            # bug, met on some node's data) ends this cycle only. decide() is pure and the
            # store's writes are atomic, so what was not recorded is decided again next
            # cycle; each effect already fails alone (`_run`). The heartbeat says it
            # (`status`, sd_notify's STATUS, the HeartbeatStale alert); the traceback is
            # logged once per distinct error, a line each time after that. (Before: the
            # daemon ended, and systemd restarted it into the same error.)
            error = f"cycle failed unexpectedly: {type(exc).__name__}: {exc}"[:500]
            controller.last_failure = exc
            if error != told:
                told = error
                log.exception("%s (a bug in slurm-heal: please report it with this "
                              "traceback); the next cycle tries again", error)
            else:
                log.error("%s (again; the traceback is logged above)", error)
        else:
            told = ""
        cycles += 1
        # SPEC O1: the heartbeat says when a cycle last succeeded and what failed since; a
        # cycle that could not read Slurm is not a success (a blind daemon looks blind).
        controller.liveness = _beat(controller, controller.liveness, error, interval, cycles,
                                    (problem,) if problem else ())
        if heartbeat is not None:
            try:
                controller.liveness.write(heartbeat)
            except OSError as exc:  # a full disk must not stop the daemon either
                log.error("could not write the heartbeat %s: %s", heartbeat, exc)
        # the heartbeat, told to systemd as well: the watchdog is fed, the status in words
        sdnotify.notify(*(("WATCHDOG=1",) if watchdog else ()), "STATUS=" + _status(
            controller.liveness, problem))
        if max_cycles is not None and cycles >= max_cycles:
            break
        _wait(interval)
    return cycles
