"""The validation flow, pure (SPEC V1, V2): one state machine per machine under test.

A `ValidationRun` lives in the store (``State.validations``) with the same audit fields
as a remediation (phase times, steps with rule and why, attempts with idempotency keys).
Each cycle the controller gathers `Facts` about it (Slurm's view of the node, the job,
the results file) and calls `advance`, which returns the run as it must be persisted and
the effects to carry out *after* that (record intent, act, record outcome)::

    requested --> reserving --> submitting --> running --+--> returning --> passed
        |              |              |              |    +--> ticketing --> failed
        |              +--------------+--------------+----+--> restoring --> interrupted
        +--> skipped (not a Slurm node, someone else's drain, disabled)

- **reserving**: a MAINT reservation ``<prefix><node>`` (Flags=MAINT,IGNORE_JOBS) holds
  the machine (and its peer, when a step needs one) so nothing else lands on it; a drain
  of ours is lifted so the job can start there (the reservation keeps others out).
- **submitting**: the suite as a Slurm job in that reservation (``sbatch --reservation
  --nodelist --job-name <prefix><node>``); found again by its name after a restart.
- **running**: followed through Slurm (``squeue``), never by ssh. A job that ends
  COMPLETED/FAILED with a final results file is judged: pass -> returning, clear failure
  -> ticketing, nothing concluded -> restoring. A job cancelled, timed out, failed with
  its node (NODE_FAIL), gone without results, or a node that went DOWN under it ->
  restoring (interrupted, V2).
- **restoring** puts back exactly what was recorded at the start (`Previous`): the
  reservation is removed, the node drained again with its old reason or left in service
  as it was.

A **gate** run (``origin = "gate"``, SPEC V4) is a remediation's post-repair gate: the
same phases on the node it repaired, which it does not wait for (the gate is that
remediation's own step), time-boxed (its wait for the node or a peer too); a pass only
removes the reservation (the remediation resumes the node, L5), a clear failure drains
the node again with the reason it had (the remediation's cordon) and files no ticket;
a run whose remediation stopped waiting for it is ended (`Facts.abandoned`).

Every effect is idempotent and keyed ``<run id>:<phase>:<effect>``: an effect whose
attempt has no outcome (the controller stopped between intent and outcome) is handed out
again under the same key, and its adapter finds what was already done (the reservation
by name, the job by name) instead of doing it twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from slurm_heal import reasons
from slurm_heal.models import VALIDATION_TERMINAL as TERMINAL
from slurm_heal.models import Attempt, Previous, Step, ValidationRun, VPhase
from slurm_heal.models import gate_run_id as gate_run_id  # the runs' ids live with the
from slurm_heal.models import validation_run_id as run_id  # models, below the engine (#33)
from slurm_heal.types import JobInfo, NodeInfo

__all__ = ["TERMINAL", "Advance", "Facts", "Knobs", "Previous", "Results", "VEffect",
           "ValidationRun", "advance", "gate_run_id", "run_id", "skip"]
EffectKind = Literal["reserve", "unreserve", "lift", "submit", "cancel", "resume", "drain",
                     "ticket"]
# Job states in which the job is over (squeue/scontrol, 22.05 and 25.11).
JOB_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED",
                      "SPECIAL_EXIT"})
# Of those, the ones in which the suite ran to its end and its verdict stands.
JOB_JUDGED = frozenset({"COMPLETED", "FAILED"})
MARKER_FAULT = "validation"
MARKER_BY = "validation"


@dataclass(frozen=True)
class VEffect:
    """Something the controller does for a validation, after the run is persisted."""

    kind: EffectKind
    key: str
    node: str
    reason: str = ""  # drain: the reason to set
    why: str = ""


@dataclass(frozen=True)
class Results:
    """What the job left in its results directory (`runner`), as the controller read it."""

    final: bool  # the runner finished (results.json has its end time)
    outcome: str  # pass / fail / error
    summary: str


@dataclass(frozen=True)
class Facts:
    """What the controller saw of one run this cycle (gathered by the effects side)."""

    node: NodeInfo | None  # None: Slurm does not know it
    reservations: tuple[str, ...] = ()  # reservations the node is in now
    job: JobInfo | None = None  # the validation job, when Slurm still lists it
    results: Results | None = None
    open_remediation: str | None = None  # an open remediation on the node
    open_validation: str | None = None  # an earlier validation still open on the node
    peer: str = ""  # a healthy idle node of the same pool, when a step needs one
    needs_peer: bool = False
    has_steps: bool = True
    enabled: bool = True
    failed_before: bool = False  # the machine failed a validation before (level 3)
    # SPEC V4, a gate's run: why it must stop now ("" while its remediation still waits
    # for it): the remediation ended, or is no longer returning.
    abandoned: str = ""
    # The faults the node check publishes as active on the node now (its Extra): a drain
    # of the check's own is restored only while its fault is still published (L1, O6);
    # None: not known (restored as before).
    check_faults: frozenset[str] | None = None
    # The node's remediations that have ended: a cordon of theirs is not put back.
    closed: frozenset[str] = frozenset()


@dataclass(slots=True)
class Advance:
    """`advance`'s answer: the run to persist and the effects to run after that."""

    run: ValidationRun
    effects: list[VEffect] = field(default_factory=list)


@dataclass(frozen=True)
class Knobs:
    """The policy's knobs the flow needs (from `suite.Validation`)."""

    prefix: str = "slurm-heal-validate-"
    level: int = 2  # the {level} placeholder's value; level_after_failure once it failed
    level_after_failure: int = 3
    # A job still PENDING this long after submission never got the machine (Slurm ends
    # one that runs too long itself: TIMEOUT): cancelled, and the machine restored.
    pending_limit: timedelta = timedelta(hours=2)


def marker(run: ValidationRun, text: str) -> str:
    """Our reason on a node the validation keeps out (``by=validation``: the engine's
    cordon sweep leaves it alone)."""
    return reasons.format_marker(MARKER_FAULT, run.id, MARKER_BY, text)


def _ours(reason: str) -> bool:
    return reasons.is_ours(reason)


def advance(run: ValidationRun, facts: Facts, now: datetime, knobs: Knobs) -> Advance:
    """The next step of ``run`` given ``facts``. Pure: no I/O, ``now`` is a parameter."""
    if run.terminal:
        return Advance(run)
    pending = run.pending()
    if pending:
        # Recorded but never finished (the controller stopped in between): the same
        # effects again under the same keys; each finds what was already done.
        return Advance(run, [_again(run, a) for a in pending])
    failed = [a for a in run.of_phase() if a.outcome == "failed"]
    if facts.abandoned and run.phase in ("requested", "reserving", "running"):
        if run.phase == "requested":
            return _finish(run, now, "skipped", "V4", f"not run: {facts.abandoned}")
        # Held but not submitted yet (reserving): restored without a job, never one
        # submitted for a remediation that no longer waits for it (issue 32: a gate job
        # submitted in the cycle its remediation failed L5, cancelled 2 s later).
        return _restore(run, facts, now, facts.abandoned, cancel=run.phase == "running")
    if run.phase == "requested":
        return _start(run, facts, now, knobs)
    if run.phase == "reserving":
        if failed:
            return _restore(run, facts, now, f"could not hold the machine: {failed[0].detail}")
        return _enter(run, now, "submitting", "V1", f"suite submitted as job {run.job_name} "
                      f"in reservation {run.reservation}", [("submit", "")])
    if run.phase == "submitting":
        if failed:
            return _restore(run, facts, now, f"the job could not be submitted: "
                            f"{failed[0].detail}")
        job_id = _operation(run, "submit")
        run = _with(run, phase="running", job_id=int(job_id) if job_id.isdigit() else None)
        return Advance(_step(run, now, "running", "V1", f"job {run.job_id} ({run.job_name}) "
                             "is followed through Slurm"))
    if run.phase == "running":
        return _follow(run, facts, now, knobs)
    if run.phase == "returning" and run.origin == "gate":
        return _finish(run, now, "passed", "V4", f"passed: {run.summary}"
                       + (f" ({'; '.join(a.detail for a in failed)})" if failed else ""))
    if run.phase == "returning":
        return _finish(run, now, "passed", "V2", "passed: back in service, no ticket"
                       + (f" ({'; '.join(a.detail for a in failed)})" if failed else ""))
    if run.phase == "ticketing" and run.origin == "gate":
        # SPEC V4: no ticket; the remediation fails with this evidence (L5, E1).
        undone = "; ".join(f"{a.effect}: {a.detail}" for a in failed)
        return _finish(run, now, "failed", "V4", f"the post-repair gate failed clearly: "
                       f"{run.summary}; {run.node} stays out of service"
                       + (f" (not done: {undone})" if undone else ""))
    if run.phase == "ticketing":
        run = _with(run, ticket=_operation(run, "ticket"))
        return _finish(run, now, "failed", "V2", f"clear failure: {run.summary}; ticket "
                       f"{run.ticket or '(none filed)'}; the machine stays out"
                       + (f" ({'; '.join(a.detail for a in failed)})" if failed else ""))
    if run.phase == "restoring":
        undone = "; ".join(f"{a.effect}: {a.detail}" for a in failed)
        restored = run.restored + (f"; not restored: {undone}" if undone else "")
        return _finish(_with(run, restored=restored), now, "interrupted", "V2",
                       f"interrupted ({run.summary}); restored: {restored}")
    return Advance(run)  # pragma: no cover - every phase is handled above


# ------------------------------------------------------------------------- phases


def _start(run: ValidationRun, facts: Facts, now: datetime, knobs: Knobs) -> Advance:
    node = facts.node
    gate = run.origin == "gate"
    if gate and now - run.created > knobs.pending_limit:
        # SPEC V4, O6: a gate is time-boxed, its wait for the node (another validation on
        # it) or for a free peer too.
        return _finish(run, now, "skipped", "V4", f"the gate could not start within "
                       f"{now - run.created} ({run.steps[-1].why if run.steps else 'waiting'})")
    if not facts.enabled:
        return _finish(run, now, "skipped", "V1", "validation is disabled ([validation] "
                       "enabled = false): the machine is not tested")
    if node is None:
        return _finish(run, now, "skipped", "V1", f"{run.node} is not a Slurm node: "
                       "validation cannot run there")
    if not facts.has_steps:
        return _finish(run, now, "skipped", "V3", "no validation suite is configured for "
                       "this machine ([validation.suites]): nothing to run")
    if facts.open_validation:
        return _once(run, now, "requested", "L3", f"waits: validation "
                     f"{facts.open_validation} of {run.node} is still open")
    if facts.open_remediation and not gate:
        # L3: one thing at a time on a node; the remediation's own return comes first.
        # (A gate is that remediation's own: it runs while the remediation waits for it.)
        return _once(run, now, "requested", "L3", f"waits: remediation "
                     f"{facts.open_remediation} is still open on {run.node}")
    if (node.drained or node.down) and node.reason and not _ours(node.reason):
        return _finish(run, now, "skipped", "V2", f"{run.node} is "
                       f"{'DOWN' if node.down else 'drained'} by someone else "
                       f"({node.reason!r}); never taken over (house style 2)")
    if node.down:
        return _finish(run, now, "skipped", "V2", f"{run.node} is DOWN: the machine cannot "
                       "run the suite")
    if gate and not node.drained:
        # SPEC S8, V4 (issue 32 item 8): the remediation's cordon holds the node until
        # its gate; in service now, a person resumed it: their hand, no gate after it.
        return _finish(run, now, "skipped", "S8", f"not run: {run.node} is in service (a "
                       "person resumed it): no gate and no drain after a person's resume")
    if facts.needs_peer and not facts.peer:
        return _once(run, now, "requested", "V1", "waits for a healthy idle peer in the same "
                     "pool (a step tests across two machines)")
    prev = Previous(states=tuple(sorted(node.states)), drained=node.drained, down=node.down,
                    reason=node.reason, reservations=facts.reservations,
                    partitions=node.partitions)
    level = run.level if run.level is not None else (
        knobs.level_after_failure if facts.failed_before else knobs.level)
    name = f"{knobs.prefix}{run.node}"
    run = _with(run, previous=prev, reservation=name, job_name=name, peer=facts.peer,
                level=level)
    effects: list[tuple[EffectKind, str]] = [("reserve", "")]
    if node.drained and _ours(node.reason):
        effects.append(("lift", node.reason))  # the reservation keeps others out now
    held = f"{run.node}" + (f" with peer {facts.peer}" if facts.peer else "")
    return _enter(run, now, "reserving", "V1",
                  f"{held} held in maintenance reservation {name} (was "
                  f"{'+'.join(prev.states) or '?'}"
                  + (f", reason {prev.reason!r}" if prev.reason else "")
                  + (f", in {', '.join(prev.reservations)}" if prev.reservations else "")
                  + f"); level {level}", effects)


def _follow(run: ValidationRun, facts: Facts, now: datetime, knobs: Knobs) -> Advance:
    job, node = facts.job, facts.node
    state = job.state if job is not None else ""
    if state and state != run.job_state:
        run = _with(run, job_state=state)
    if node is None:
        return _restore(run, facts, now, f"{run.node} is gone from Slurm")
    if state and state not in JOB_DONE:
        if node.down:
            return _restore(run, facts, now, f"{run.node} went DOWN under job {run.job_id} "
                            f"({node.reason or 'no reason'})", cancel=True)
        since = run.phase_times.get("running", run.updated)
        if state == "PENDING" and now - since > knobs.pending_limit:
            return _restore(run, facts, now, f"job {run.job_id} was still PENDING after "
                            f"{now - since}: the machine never became free for it",
                            cancel=True)
        return Advance(run)  # pending or running: look again next cycle
    res = facts.results
    if state in JOB_JUDGED or (not state and res is not None and res.final):
        if res is None or not res.final:
            return _restore(run, facts, now, f"job {run.job_id} ended {state or 'and is gone'} "
                            "without a final results file")
        run = _with(run, outcome=res.outcome, summary=res.summary)
        if res.outcome == "pass" and run.origin == "gate":
            # SPEC V4: the remediation resumes the node (L5); its drain was lifted for
            # the job, so with the reservation gone it is in service.
            return _enter(run, now, "returning", "V4", f"the post-repair gate passed "
                          f"({res.summary}): reservation removed", [("unreserve", "")])
        if res.outcome == "fail" and run.origin == "gate":
            prev = run.previous or Previous()
            return _enter(run, now, "ticketing", "V4", f"clear failure: {res.summary}: "
                          f"{run.node} is drained again and its remediation fails (L5)",
                          [("drain", prev.reason if prev.drained else ""),
                           ("unreserve", "")])
        if res.outcome == "pass":
            effects: list[tuple[EffectKind, str]] = [("unreserve", "")]
            if node.drained and _ours(node.reason) and not facts.open_remediation:
                # (a remediation opened on the node meanwhile keeps its own cordon)
                effects.append(("resume", node.reason))
            return _enter(run, now, "returning", "V2", f"suite passed ({res.summary}): "
                          "reservation removed, machine back in service", effects)
        if res.outcome == "fail":
            return _enter(run, now, "ticketing", "V2", f"clear failure: {res.summary}: a "
                          "hardware ticket with the results and logs; the machine stays out",
                          [("ticket", ""), ("drain", ""), ("unreserve", "")])
        return _restore(run, facts, now, f"the suite concluded nothing ({res.summary})")
    if state == "CANCELLED":
        # SPEC S8 (issue 32 item 10): the flow cancels its job only on its way to
        # restoring; a job cancelled while it is followed was cancelled by someone else.
        run = _with(run, by_person=True)
        return _restore(run, facts, now, f"job {run.job_id} was cancelled by someone else "
                        "(scancel), not by slurm-heal: a person's hand")
    what = f"job {run.job_id} ended {state}" if state else \
        f"job {run.job_id} is gone from Slurm without a final results file"
    return _restore(run, facts, now, what)


def drain_hold(run: ValidationRun, reason: str, node: NodeInfo | None,
               closed: frozenset[str], check_faults: frozenset[str] | None,
               restoring: bool = True) -> str | None:
    """Why the flow must not drain ``node`` with ``reason`` now (None: it drains it).
    SPEC L1, O6, S8 (issue 32 items 8, 9): the flow puts back only what it changed, and
    only while the node is as it left it: in service (its lift), never DOWN, never
    drained by a person; and the reason still holds: our controller's marker not once its
    remediation has ended (``closed``: released, or handed to a person), the node
    check's only while the check still publishes its fault (a stale one would keep a
    healthy node out with nothing to resume it). Asked when the step is decided and
    again right before it runs (a step sent again after a restart)."""
    if node is None:
        return f"{run.node} is gone from Slurm"
    if node.down:
        return f"{run.node} is DOWN now ({node.reason!r}): left as it is"
    if node.drained and not (reasons.is_ours(node.reason) and not restoring):
        return f"{run.node} is drained now ({node.reason!r}): left as it is"
    marker = reasons.marker_of(reason)
    if marker is None:
        return None
    if marker.by == "controller" and marker.remediation in closed:
        return (f"{marker.remediation}, whose cordon it had, is over (released or handed "
                "to a person): not drained again")
    if marker.by == "check" and check_faults is not None and marker.fault not in check_faults:
        return (f"the node check no longer publishes {marker.fault}: its old drain is not "
                "put back")
    return None


def _restore_effects(run: ValidationRun, node: NodeInfo | None, open_remediation: str | None,
                     closed: frozenset[str] = frozenset(),
                     check_faults: frozenset[str] | None = None
                     ) -> list[tuple[EffectKind, str]]:
    prev = run.previous or Previous()
    out: list[tuple[EffectKind, str]] = [("unreserve", "")]
    if prev.drained and prev.reason:
        if drain_hold(run, prev.reason, node, closed, check_faults) is None:
            out.append(("drain", prev.reason))  # exactly the old reason
    elif node is not None and node.drained and _set_by(run, node.reason) \
            and not open_remediation:
        # Only a drain this run set itself (issue 32 item 9): the node check's drain of
        # a fault it found meanwhile, or anyone else's, is not ours to undo.
        out.append(("resume", node.reason))
    return out


def _set_by(run: ValidationRun, reason: str) -> bool:
    """``reason`` is this run's own marker (``by=validation``, its id)."""
    m = reasons.marker_of(reason)
    return m is not None and m.by == MARKER_BY and m.remediation == run.id


def _restore(run: ValidationRun, facts: Facts, now: datetime, why: str,
             cancel: bool = False) -> Advance:
    prev = run.previous or Previous()
    effects = _restore_effects(run, facts.node, facts.open_remediation, facts.closed,
                               facts.check_faults)
    if cancel:
        effects.insert(0, ("cancel", ""))  # the job first: it must not run on
    kinds = [k for k, _ in effects]
    words = [f"reservation {run.reservation} removed"] if run.reservation else []
    node = facts.node
    if "drain" in kinds:
        words.append(f"drained again ({prev.reason!r})")
    elif prev.drained and prev.reason:
        held = drain_hold(run, prev.reason, node, facts.closed, facts.check_faults)
        words.append(f"not drained again: {held}")
    elif "resume" in kinds:
        words.append("resumed: in service as before")
    elif node is not None and (node.drained or node.down):
        words.append(f"it is {'DOWN' if node.down else 'drained'} now ({node.reason!r}, not "
                     "ours): left to Slurm and a person; it was "
                     + ("drained" if prev.drained else "in service") + " before")
    else:
        words.append("in service as before")
    if prev.reservations:
        words.append(f"still in {', '.join(prev.reservations)}")
    run = _with(run, summary=why, restored="; ".join(words))
    return _enter(run, now, "restoring", "V2", f"interrupted: {why}; restoring the previous "
                  "state", effects)


# ------------------------------------------------------------------------- helpers


def _with(run: ValidationRun, *, now: datetime | None = None, **changes: Any) -> ValidationRun:
    if now is not None:
        changes["updated"] = now
    return run.model_copy(update=changes)


def _step(run: ValidationRun, now: datetime, phase: str, rule: str, why: str) -> ValidationRun:
    times = dict(run.phase_times)
    times.setdefault(phase, now)
    return run.model_copy(update={
        "steps": run.steps + (Step(at=now, phase=phase, rule=rule, why=why),),
        "phase_times": times, "updated": now})


def skip(run: ValidationRun, now: datetime, why: str, rule: str = "V1") -> ValidationRun:
    """The run ends before anything was done to the machine, and says why."""
    return _finish(run, now, "skipped", rule, why).run


def _once(run: ValidationRun, now: datetime, phase: str, rule: str, why: str) -> Advance:
    """A step recorded once (a wait is not repeated every cycle)."""
    if run.steps and run.steps[-1].why == why:
        return Advance(run)
    return Advance(_step(run, now, phase, rule, why))


def _enter(run: ValidationRun, now: datetime, phase: VPhase, rule: str, why: str,
           effects: list[tuple[EffectKind, str]]) -> Advance:
    run = _step(run.model_copy(update={"phase": phase}), now, phase, rule, why)
    out: list[VEffect] = []
    attempts = list(run.attempts)
    for kind, reason in effects:
        key = f"{run.id}:{phase}:{kind}"
        if kind == "drain" and not reason:
            reason = marker(run, f"failed the post-repair gate of {run.remediation}"
                            if run.origin == "gate" else f"failed validation, ticket {run.id}")
        out.append(VEffect(kind=kind, key=key, node=run.node, reason=reason, why=why))
        attempts.append(Attempt(key=key, effect=kind, started=now, detail=reason, step=phase))
    return Advance(run.model_copy(update={"attempts": tuple(attempts)}), out)


def _finish(run: ValidationRun, now: datetime, phase: VPhase, rule: str,
            why: str) -> Advance:
    return Advance(_step(run.model_copy(update={"phase": phase}), now, phase, rule, why))


def _operation(run: ValidationRun, effect: str) -> str:
    """What the current phase's ``effect`` reported (a job id, a ticket reference)."""
    for a in run.of_phase():
        if a.effect == effect and a.outcome == "ok":
            return a.operation or ""
    return ""


def _again(run: ValidationRun, attempt: Attempt) -> VEffect:
    return VEffect(kind=attempt.effect, key=attempt.key, node=run.node,  # type: ignore[arg-type]
                   reason=attempt.detail, why="sent again (no outcome was recorded)")
