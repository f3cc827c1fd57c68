"""The post-repair gate in the life cycle (SPEC V4): after the action and the node's
health check (L5), before the node is resumed.

Pure, like the rest of `policy/`: the gate's job runs through the validation flow
(`slurm_heal.validation.flow`, a run with ``origin = "gate"``: a Slurm job in a
maintenance reservation on the node, the validation suite's steps and judges), and its
verdict comes in as input, the run in ``state.validations``. What this module decides:

* no gate yet: a ``gate`` effect (the controller queues the run; key
  ``<remediation>:gate:<n>``, the run's id derived from it);
* the run passed: the node may be resumed (`after_check` returns the words);
* a clear failure: the remediation fails (L5), E1 follows; the node stays cordoned
  (the gate says it is not fit, whatever its health check says), with the gate's
  evidence in the audit and the notification;
* interrupted (the job cancelled or timed out, the node or the peer gone, nothing
  concluded): run again ``gate.retries`` times, then a person.
"""

from __future__ import annotations

from datetime import timedelta

import slurm_heal.policy.endings as endings
import slurm_heal.policy.holding as holding
from slurm_heal.config import format_duration
from slurm_heal.models import Attempt, Remediation, ValidationRun, gate_run_id
from slurm_heal.policy.facts import POLL_EVERY
from slurm_heal.policy.working import Ledger, WorkingSet
from slurm_heal.types import NodeInfo


def tries(rem: Remediation) -> list[Attempt]:
    """The gate attempts of ``rem``, oldest first (one per run of the gate)."""
    return [a for a in rem.attempts if a.effect == "gate"]


def run_of(ws: WorkingSet, rem: Remediation, attempt: Attempt) -> ValidationRun | None:
    rid = gate_run_id(rem.node, attempt.key)
    return next((v for v in ws.state.validations if v.id == rid), None)


def after_check(ws: WorkingSet, led: Ledger, rem: Remediation, node: NodeInfo) -> str | None:
    """SPEC V4, called once the node is back and passed its health check (L5). Returns
    the words for the ``done`` step when the node may be resumed ("" with no gate), or
    None while the gate holds it (queued, running, failed or with a person)."""
    gate = ws.policy.gate
    sent = tries(rem)
    if not sent:
        if not gate.enabled:
            return ""
        _start(ws, led, rem, 0, f"{rem.node} is back and passed its health check: the "
               f"post-repair gate runs before it is resumed")
        return None
    # A gate started before the gate was turned off is followed to its end.
    last = sent[-1]
    run = run_of(ws, rem, last)
    if run is None:
        if last.outcome is None or last.outcome == "running":
            led.wake(ws.now + POLL_EVERY)  # being queued (settle() bounds an unanswered one)
            return None
        why = last.detail or "the gate's run was never queued"
    elif not run.terminal:
        limit = last.started + bound(ws)
        if ws.now < limit:
            led.wake(min(limit, ws.now + POLL_EVERY))
            return None
        # O6: the flow bounds its own run (the time box, for its wait and its job); this
        # holds when the flow does not move at all (its section broken, no validator).
        endings.fail_to_person(
            ws, led, rem, "V4",
            f"the post-repair gate of {rem.node} did not end within "
            f"{format_duration(bound(ws))} (run {run.id} is still {run.phase}); "
            f"{rem.node} stays out of service",
            f"the post-repair gate of {rem.node} never ended (run {run.id}, {run.phase}): "
            f"{rem.node} is handed to a person; check the controller's log for the "
            "validation flow's errors")
        return None
    elif run.phase == "passed":
        return f"; the post-repair gate passed ({run.summary}, job {run.job_id})"
    elif run.phase == "failed":
        _failed(ws, led, rem, run)
        return None
    elif run.by_person:
        # SPEC S8 (issue 32 item 10): a person cancelled the gate's job: their hand, not
        # an interruption to run again; the node stays as the restore left it.
        endings.fail_to_person(
            ws, led, rem, "S8",
            f"a person cancelled the post-repair gate's job on {rem.node} ({run.summary}); "
            f"{rem.id} is handed to them",
            f"a person cancelled the post-repair gate of {rem.node}: it is theirs now "
            "(resume it, or request an action); nothing automatic on it until a person acts",
            phase="cancelled")
        return None
    else:
        why = f"{run.phase}: {run.summary or (run.steps[-1].why if run.steps else '?')}"
    if not gate.enabled:
        # Turned off since this gate started: a person's word that no gate runs now.
        return (f"; the post-repair gate concluded nothing ({why}) and is off now "
                "([gate] enabled = false): not run again")
    n = len(sent)
    if n <= gate.retries:
        _start(ws, led, rem, n, f"the post-repair gate of {rem.node} concluded nothing ({why}): "
               f"run again (try {n + 1} of {gate.retries + 1})")
        return None
    endings.fail_to_person(
        ws, led, rem, "V4",
        f"the post-repair gate of {rem.node} concluded nothing {n} time(s) (last: {why}); "
        f"{rem.node} stays cordoned",
        f"the post-repair gate of {rem.node} was interrupted {n} time(s) (last: {why}): "
        f"{rem.node} stays cordoned and is handed to a person: resume it, or request an "
        "action")
    return None


def bound(ws: WorkingSet) -> timedelta:
    """The longest the life cycle waits for one gate run: its wait for the node and its
    job, each up to ``gate.timeout``, and the flow's few steps around them."""
    return 2 * ws.policy.gate.timeout + ws.policy.safety.step_timeout


def _start(ws: WorkingSet, led: Ledger, rem: Remediation, n: int, why: str) -> None:
    """Queue gate run ``n`` (held by the pause and recommend-only like any step, O2)."""
    if holding.gate(ws, led, rem):
        led.wake(ws.now + POLL_EVERY)
        return
    gate = ws.policy.gate
    steps = ", ".join(s.name for s in gate.steps())
    led.effect("gate", rem.node, rem, "gate", n, rule="V4",
               why=f"post-repair gate of {rem.id} ({rem.action.value}), try {n + 1}")
    led.step(rem, "returning", "V4", f"{why}: {steps} as a Slurm job in a maintenance "
             f"reservation on {rem.node}" + (" with a healthy idle peer" if gate.needs_peer
                                           else "")
             + f", within {format_duration(gate.timeout)}")
    led.wake(ws.now + POLL_EVERY)


def _failed(ws: WorkingSet, led: Ledger, rem: Remediation, run: ValidationRun) -> None:
    """A clear failure: the remediation fails (L5) and E1 follows; the node stays
    cordoned (never released as healthy: the gate says it is not)."""
    rem = led.put(rem.model_copy(update={"data": rem.data.but(gate_failed=True)}))
    where = f"; results and logs in {run.results_dir}" if run.results_dir else ""
    endings.fail(ws, led, rem, "V4", f"after the {rem.action.value} the post-repair gate failed: "
           f"{run.summary} (job {run.job_id}{where})", release=False)
