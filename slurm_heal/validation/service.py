"""The validation flow's effects: the controller's side of `flow` (SPEC V1, V2).

`Validator.cycle` runs once per controller cycle, after the remediation effects:

1. takes ``validate`` commands from the store's inbox (``slurm-heal validate NODE``) and
   turns each into a `ValidationRun` (the operator's word is never lost: the command
   and the run are one store write);
2. for every open run: gathers its `flow.Facts` (Slurm's view of the node, the job by id
   or name, the results file), asks the pure `flow.advance`, persists the run (phase,
   audit step, an attempt per effect) *before* any effect runs, carries the effects
   out, and records each outcome on its attempt.

`Validator.vacated` is how a migrate or a remove hands its machine to validation: the
controller calls it when the provider reports the action succeeded, before it records
that outcome, so a crash in between creates the same run again (same id), never two.

One run's failure (Slurm refusing a call, a results file that cannot be read) is
recorded on that run and never stops the others or the cycle.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slurm_heal.errors import HealError, NotFound, ValidationFlowError
from slurm_heal.models import Command, Phase, State, ValidationRun
from slurm_heal.providers.base import Operation
from slurm_heal.sections import Gate
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.mapping import ACTIVE_JOB_STATES
from slurm_heal.types import Action, ClusterView, NodeInfo
from slurm_heal.validation import flow
from slurm_heal.validation.slurmjobs import SlurmJobs, job_partitions
from slurm_heal.validation.suite import SuiteResult, Validation, validation_from

log = logging.getLogger("slurm_heal.validation")

RESULTS = "results.json"
MAX_DETAIL = 2000


def summarize(result: SuiteResult) -> str:
    """The verdict in words: the failed (or inconclusive) steps and why."""
    bad = [s for s in result.steps if s.outcome != "pass"]
    if not result.steps:
        return "no step ran"
    if not bad:
        return f"all {len(result.steps)} step(s) passed"
    return "; ".join(f"{s.name} {s.outcome}" + (f": {s.reason}" if s.reason else "")
                     for s in bad)[:500]


def read_results(directory: Path) -> flow.Results | None:
    """The job's results.json, or None when there is none. A file that cannot be read
    concludes nothing (an ``error``), never a pass or a fail."""
    path = directory / RESULTS
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return flow.Results(final=True, outcome="error", summary=f"cannot read {path}: {exc}")
    try:
        result = SuiteResult.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        return flow.Results(final=True, outcome="error",
                            summary=f"{path} cannot be read: {str(exc)[:200]}")
    return flow.Results(final=bool(result.finished), outcome=result.outcome,
                        summary=summarize(result))


class Validator:
    """Runs the validation flow against Slurm and the store (the controller owns it)."""

    def __init__(self, *, store: Any, slurm: SlurmClient, state_dir: Path | str,
                 slurm_conf: str | None = None, jobs: SlurmJobs | None = None) -> None:
        self.store = store
        self.slurm = slurm
        self.state_dir = Path(state_dir)
        self.slurm_conf = slurm_conf
        self._jobs = jobs
        self._jobs_user: str | None = None

    # ------------------------------------------------------------------ settings
    def settings(self, policy: Any) -> Validation:
        return validation_from(getattr(policy, "validation", None) or {},
                               str(getattr(policy, "source", "<policy>")))

    def gate_settings(self, policy: Any) -> Validation:
        """SPEC V4: the flow's settings for a gate run: ``[gate]``'s suite, time box and
        reservation prefix; the job's Python, user, results directory and placeholders'
        values as ``[validation]`` sets them."""
        base = self.settings(policy)
        gate = getattr(policy, "gate", None) or Gate()
        return base.model_copy(update={
            "enabled": True, "vendor": gate.vendor, "suites": {gate.vendor: gate.steps()},
            "reservation_prefix": gate.reservation_prefix, "job_time_limit": gate.timeout})

    def jobs(self, cfg: Validation) -> SlurmJobs:
        if self._jobs is None or self._jobs_user != cfg.user:
            self._jobs = SlurmJobs(slurm_conf=self.slurm_conf, user=cfg.user)
            self._jobs_user = cfg.user
        return self._jobs

    def results_root(self, cfg: Validation) -> Path:
        return Path(cfg.results_dir) if cfg.results_dir else self.state_dir / "validation"

    # ------------------------------------------------------------------ intake
    def vacated(self, *, remediation: str, node: str, action: Action, op: Operation,
                now: datetime, policy: Any) -> ValidationRun | None:
        """SPEC V1, L2: the machine a migrate or remove vacated goes to validation.

        migrate: the host the provider reports as vacated (``previous_host``), as the
        Slurm node of that name or of ``[validation] hosts``; remove: the node itself.
        """
        if action not in (Action.MIGRATE, Action.REMOVE):
            return None
        cfg = self.settings(policy)
        host = op.previous_host or None
        why = ""
        if action is Action.REMOVE:
            target = node
        elif not host:
            target = node
            why = (f"the provider did not say which host {node} left: the vacated machine "
                   "cannot be validated")
        else:
            target = cfg.hosts.get(host, host)
            if target == node:
                why = (f"the vacated host {host} maps to {node} itself, which now runs on "
                       "other hardware: the old machine cannot be reached through Slurm")
        origin = "migrate" if action is Action.MIGRATE else "remove"
        run = ValidationRun(
            id=flow.run_id(target, origin, remediation), node=target, host=host,
            origin=origin, remediation=remediation, created=now, updated=now,
            reason=f"vacated by {action.value} of {node} ({remediation})")
        if why:
            run = flow.skip(run, now, why)
        return self._create(run)

    def gate(self, *, remediation: str, node: str, key: str, now: datetime,
             why: str = "") -> ValidationRun:
        """SPEC V4: queue the post-repair gate of ``remediation`` on ``node`` for its gate
        attempt ``key`` (the same key queues the same run, never a second one)."""
        run = ValidationRun(id=flow.gate_run_id(node, key), node=node, origin="gate",
                            remediation=remediation, created=now, updated=now,
                            reason=why or f"post-repair gate of {remediation}")
        return self._create(run)

    def _create(self, run: ValidationRun) -> ValidationRun:
        with self.store.transaction() as txn:
            state: State = txn.state
            if any(v.id == run.id for v in state.validations):
                return next(v for v in state.validations if v.id == run.id)
            txn.state = state.model_copy(update={"validations": state.validations + (run,)})
        log.info("node=%s validation=%s queued: %s", run.node, run.id, run.reason)
        return run

    def intake(self, now: datetime) -> None:
        """``validate`` commands from the inbox become runs, in one store write."""
        with self.store.transaction() as txn:
            state: State = txn.state
            cmds = [c for c in state.inbox if c.kind == "validate"]
            if not cmds:
                return
            runs = list(state.validations)
            known = {v.id for v in runs}
            for cmd in cmds:
                run = _from_command(cmd, now)
                if run.id not in known:
                    runs.append(run)
                    known.add(run.id)
                    log.info("node=%s validation=%s requested by %s", run.node, run.id, cmd.by)
            done = {c.id for c in cmds}
            txn.state = state.model_copy(update={
                "validations": tuple(runs),
                "inbox": tuple(c for c in state.inbox if c.id not in done)})

    # ------------------------------------------------------------------ the cycle
    def cycle(self, view: ClusterView, now: datetime, policy: Any) -> None:
        state: State = self.store.load()
        if any(c.kind == "validate" for c in state.inbox):
            self.intake(now)
            state = self.store.load()
        if all(v.terminal for v in state.validations):
            return  # the steady state: nothing to look at, no Slurm call, no write
        cfg = self.settings(policy)
        gate_cfg: Validation | None = None
        for run in state.validations:
            if run.terminal:
                continue
            if state.paused and run.phase == "requested":
                continue  # SPEC O2: nothing new starts while paused
            try:
                if run.origin == "gate" and gate_cfg is None:
                    gate_cfg = self.gate_settings(policy)
                self.step(run, view, state, now,
                          gate_cfg if run.origin == "gate" and gate_cfg else cfg)
            except HealError as exc:
                log.error("node=%s validation=%s cycle step failed: %s", run.node, run.id, exc)
            except Exception:  # one run never stops the others (nor the cycle)
                log.exception("node=%s validation=%s failed unexpectedly", run.node, run.id)

    def step(self, run: ValidationRun, view: ClusterView, state: State, now: datetime,
             cfg: Validation) -> ValidationRun:
        facts = self.facts(run, view, state, cfg, now)
        knobs = flow.Knobs(prefix=cfg.reservation_prefix, level=cfg.level,
                           level_after_failure=cfg.level_after_failure,
                           pending_limit=cfg.job_time_limit)
        adv = flow.advance(run, facts, now, knobs)
        if adv.run != run:
            self._save(adv.run)
            for s in adv.run.steps[len(run.steps):]:
                log.info("node=%s validation=%s phase=%s rule=%s why=%s", run.node, run.id,
                         s.phase, s.rule, s.why)
        current = adv.run
        for effect in adv.effects:
            outcome, detail, operation = self.execute(effect, current, cfg, now, state)
            log.info("node=%s validation=%s effect=%s outcome=%s detail=%s", run.node,
                     run.id, effect.kind, outcome, detail[:200])
            current = self._outcome(current.id, effect.key, outcome, detail, operation, now)
        return current

    def _save(self, run: ValidationRun) -> None:
        with self.store.transaction() as txn:
            state: State = txn.state
            txn.state = state.model_copy(update={"validations": tuple(
                run if v.id == run.id else v for v in state.validations)})

    def _outcome(self, run_id: str, key: str, outcome: str, detail: str,
                 operation: str | None, now: datetime) -> ValidationRun:
        with self.store.transaction() as txn:
            state: State = txn.state
            run = next(v for v in state.validations if v.id == run_id)
            attempts = tuple(
                a.model_copy(update={"outcome": outcome, "finished": now,
                                     "detail": detail[-MAX_DETAIL:],
                                     "operation": operation or a.operation})
                if a.key == key else a for a in run.attempts)
            run = run.model_copy(update={"attempts": attempts, "updated": now})
            txn.state = state.model_copy(update={"validations": tuple(
                run if v.id == run_id else v for v in state.validations)})
        return run

    # ------------------------------------------------------------------ facts
    def facts(self, run: ValidationRun, view: ClusterView, state: State,
              cfg: Validation, now: datetime | None = None) -> flow.Facts:
        node = view.node(run.node)
        if node is None:
            try:
                node = self.slurm.node(run.node)
            except NotFound:
                node = None
        steps = cfg.suite_for(cfg.vendor)
        base: dict[str, Any] = {"node": node, "enabled": cfg.enabled,
                                "has_steps": bool(steps),
                                "check_faults": _check_faults(node, now),
                                "closed": _closed(state, run.node)}
        opened = state.open_for(run.node)
        base["open_remediation"] = opened[0].id if opened else None
        if run.origin == "gate":
            # SPEC V4: the gate is its remediation's step while that one returns (L5).
            rem = state.get(run.remediation or "")
            if rem is None or rem.phase is not Phase.RETURNING:
                base["abandoned"] = (f"remediation {run.remediation} is "
                                     f"{rem.phase.value if rem else 'gone'}")
        if run.phase == "requested":
            busy = [v.id for v in state.validations if not v.terminal and v.id != run.id
                    and run.node in (v.node, v.peer) and (v.created, v.id) < (run.created, run.id)]
            base["open_validation"] = busy[0] if busy else None
            held = self.jobs(cfg).reservations()
            base["reservations"] = tuple(sorted(
                name for name, nodes in held.items() if run.node in nodes))
            base["failed_before"] = any(
                v.phase == "failed" and v.id != run.id and (
                    v.node == run.node or (run.host is not None and v.host == run.host))
                for v in state.validations)
            if any(s.peer for s in steps) and node is not None:
                base["needs_peer"] = True
                base["peer"] = self.peer(node, view, state, held, cfg)
        elif run.phase == "running":
            jobs = self.jobs(cfg)
            job = jobs.job(run.job_id) if run.job_id is not None else jobs.find_job(
                run.job_name, f"slurm-heal validation {run.id}")
            base["job"] = job
            if job is None or job.state in flow.JOB_DONE:
                base["results"] = read_results(Path(run.results_dir))
        return flow.Facts(**base)

    def peer(self, node: NodeInfo, view: ClusterView, state: State,
             held: dict[str, tuple[str, ...]], cfg: Validation) -> str:
        """A known-healthy peer from the same pool: idle, not drained or down, not under
        remediation or validation, in no reservation, running nothing."""
        pool = node.partitions[:1]
        busy = {v.node for v in state.validations if not v.terminal} | {
            v.peer for v in state.validations if not v.terminal and v.peer}
        reserved = {n for nodes in held.values() for n in nodes}
        for cand in sorted(view.nodes, key=lambda n: n.name):
            if (cand.name == node.name or cand.partitions[:1] != pool or cand.drained
                    or cand.down or "IDLE" not in cand.states or cand.name in busy
                    or cand.name in reserved or state.open_for(cand.name)
                    or any(j.state in ACTIVE_JOB_STATES for j in view.jobs_on(cand.name))):
                continue
            return cand.name
        return ""

    # ------------------------------------------------------------------ effects
    def execute(self, effect: flow.VEffect, run: ValidationRun, cfg: Validation,
                now: datetime, state: State) -> tuple[str, str, str | None]:
        """Carry out one effect; (outcome, detail, operation). Never raises."""
        try:
            detail, operation = self._do(effect, run, cfg, now, state)
            return "ok", detail, operation
        except HealError as exc:
            return "failed", f"{type(exc).__name__}: {exc}", None
        except OSError as exc:
            return "failed", f"{type(exc).__name__}: {exc}", None
        except Exception as exc:
            log.exception("node=%s validation=%s effect=%s failed unexpectedly", run.node,
                          run.id, effect.kind)
            return "failed", f"unexpected {type(exc).__name__}: {exc}", None

    def _do(self, effect: flow.VEffect, run: ValidationRun, cfg: Validation, now: datetime,
            state: State) -> tuple[str, str | None]:
        jobs = self.jobs(cfg)
        kind = effect.kind
        if kind == "reserve":
            nodes = [run.node] + ([run.peer] if run.peer else [])
            return jobs.reserve(run.reservation, nodes), None
        if kind == "unreserve":
            return jobs.unreserve(run.reservation), None
        if kind == "cancel":
            if run.job_id is None:
                return "no job to cancel", None
            return jobs.cancel(run.job_id), None
        if kind == "submit":
            return self._submit(run, cfg, jobs)
        if kind == "lift":
            info = self.slurm.node(run.node)
            if not info.drained:
                return "not drained", None
            if info.reason != effect.reason:
                raise ValidationFlowError(f"{run.node}'s reason changed ({info.reason!r}); not lifted")
            self.slurm.resume(run.node)
            return f"drain {effect.reason!r} lifted for the job (the reservation holds it)", None
        if kind == "resume":
            info = self.slurm.node(run.node)
            if not (info.drained or info.down):
                return "already in service", None
            from slurm_heal import reasons
            if info.reason and not reasons.is_ours(info.reason):
                raise ValidationFlowError(f"{run.node} is out of service for a reason not ours "
                                f"({info.reason!r}); left alone")
            self.slurm.resume(run.node)
            return "resumed", None
        if kind == "drain":
            # L1, O6 (issue 32 item 9): asked again right before it runs (this step may
            # be one sent again after a restart): only a node still as the flow left it.
            info = self.slurm.node(run.node)
            held = flow.drain_hold(run, effect.reason, info, _closed(self.store.load(),
                                                                     run.node),
                                   _check_faults(info, now),
                                   restoring=effect.key.split(":")[-2:-1] == ["restoring"])
            if held is not None:
                return f"not drained: {held}", None
            self.slurm.drain(run.node, effect.reason)
            return f"drained: {effect.reason}", None
        if kind == "ticket":
            return self._ticket(run, cfg, now, state)
        raise ValidationFlowError(f"unknown validation effect {kind}")  # pragma: no cover

    def _submit(self, run: ValidationRun, cfg: Validation,
                jobs: SlurmJobs) -> tuple[str, str | None]:
        from slurm_heal.validation.runner import RunSpec

        out = self.results_root(cfg) / run.id
        out.mkdir(parents=True, exist_ok=True)
        comment = f"slurm-heal validation {run.id}"
        if (out / "job.out").exists() and jobs.find_job(run.job_name, comment) is None:
            # Sent again after a restart, and a job already ran here that Slurm no longer
            # lists (longer ago than MinJobAge): never a second job; the run is restored.
            raise ValidationFlowError(
                f"a validation job already ran in {out} (job.out is there) and Slurm no "
                "longer lists it; not submitted again")
        steps = cfg.suite_for(cfg.vendor)
        spec = RunSpec(node=run.node, peer=run.peer, vendor=cfg.vendor, steps=steps,
                       values={"level": str(run.level or cfg.level), "scratch": cfg.scratch,
                               **({"gpus": str(cfg.gpus)} if cfg.gpus else {})})
        (out / "spec.json").write_text(json.dumps(spec.model_dump(mode="json"), indent=1)
                                       + "\n")
        python = cfg.python or sys.executable
        script = out / "job.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"# slurm-heal validation {run.id} of {run.node} (SPEC V1); written by the "
            "controller\n"
            f"exec {shlex.quote(python)} -m slurm_heal.validation.runner "
            f"--spec {shlex.quote(str(out / 'spec.json'))} --out {shlex.quote(str(out))}\n")
        os.chmod(script, 0o755)
        self._set(run, results_dir=str(out))
        minutes = max(1, int(cfg.job_time_limit.total_seconds() // 60))
        nodes = [run.node] + ([run.peer] if run.peer else [])
        # The partitions that hold the node (and its peer): a node outside the default
        # partition is refused without them (issue 32 item 4).
        job_id = jobs.submit(name=run.job_name, reservation=run.reservation, nodes=nodes,
                             time_minutes=minutes, output=str(out / "job.out"),
                             chdir=str(out), script=str(script),
                             comment=comment, partitions=job_partitions(
                                 *(self.slurm.node(n).partitions for n in nodes)))
        return f"job {job_id} submitted ({run.job_name}, {minutes} min)", str(job_id)

    def _set(self, run: ValidationRun, **changes: Any) -> None:
        with self.store.transaction() as txn:
            state: State = txn.state
            txn.state = state.model_copy(update={"validations": tuple(
                v.model_copy(update=changes) if v.id == run.id else v
                for v in state.validations)})

    def _ledger(self, run: ValidationRun, state: State,
                now: datetime) -> tuple[dict[str, Any], str]:
        """SPEC E7: the ledger of the machine under test (the vacated one a migrate named,
        else the one the node was last seen on), for the ticket; none when not known."""
        from slurm_heal import ledger as ledger_mod
        from slurm_heal.errors import StoreError
        from slurm_heal.readmodel.machines import current

        try:
            led = current(self.state_dir, state, now)
        except StoreError as exc:
            log.warning("the ticket goes without the machine's ledger: %s", exc)
            return {}, ""
        m = (led.machines.get(run.host) if run.host else None) or ledger_mod.of_node(led,
                                                                                   run.node)
        if m is None:
            return {}, ""
        from slurm_heal.config import Lemon

        window = Lemon().window  # the count's window as E7 has it by default
        return ledger_mod.machine_json(m, now, window), ledger_mod.summary(m, now, window)

    def _ticket(self, run: ValidationRun, cfg: Validation, now: datetime,
                state: State) -> tuple[str, str | None]:
        from slurm_heal.validation.tickets import Ticket, sinks_from

        logs = Path(run.results_dir)
        try:
            results = SuiteResult.model_validate(json.loads((logs / RESULTS).read_text()))
        except (OSError, ValueError, ValidationError) as exc:
            raise ValidationFlowError(f"the results in {logs} cannot be read for the ticket: {exc}") \
                from exc
        mine = {r.id: r for r in state.remediations
                if r.node == run.node or (run.host and r.host == run.host)}
        # The machine's whole history: what retention moved to the audit archive too
        # (issue 26; the hot store holds days of it).
        archive = getattr(self.store, "archive_file", None)
        if archive is not None:
            from slurm_heal.store import archived

            for only in ({"node": run.node}, {"host": run.host} if run.host else {}):
                if only:
                    for r in archived(archive, **only):
                        mine.setdefault(r.id, r)
        rems = sorted(mine.values(), key=lambda r: r.created)
        identity = {"node": run.node}
        if run.host:
            identity["host"] = run.host
        try:
            info = self.slurm.node(run.node)
        except HealError:
            info = None
        if info is not None:
            identity.update(_identity(info, now))
        led, led_line = self._ledger(run, state, now)
        ticket = Ticket(
            id=run.id, node=run.node, identity=identity, ledger=led, ledger_summary=led_line,
            summary=f"{run.node} failed validation: {run.summary}",
            faults=tuple({"fault": r.fault, "severity": r.severity.value,
                          "action": r.action.value, "phase": r.phase.value,
                          "remediation": r.id, "at": r.created.isoformat()} for r in rems),
            escalation=tuple(r.action.value for r in rems),
            results=results, created=now.isoformat())
        sinks = sinks_from(cfg.tickets)
        if not sinks:
            return (f"no ticket sink configured ([[validation.tickets]]); the results and "
                    f"logs stay in {logs}"), ""
        refs = [sink.file(ticket, logs) for sink in sinks]
        return f"ticket {run.id} filed: {', '.join(refs)}", ", ".join(refs)


def _closed(state: State, node: str) -> frozenset[str]:
    """The ids of the node's remediations that have ended."""
    return frozenset(r.id for r in state.remediations if r.node == node and r.phase.terminal)


def _check_faults(node: NodeInfo | None, now: datetime | None) -> frozenset[str] | None:
    """The faults the node check publishes as active on ``node`` (its Extra); None when
    it publishes nothing that can be read (no check data: not known)."""
    if node is None:
        return None
    from datetime import timezone

    from slurm_heal import extra

    data = extra.read_check_data(node.name, node.extra, now or datetime.now(timezone.utc))
    if data.problem or data.checked_at is None:
        return None
    return frozenset(a.fault for a in data.alerts)


def _identity(info: NodeInfo, now: datetime) -> dict[str, str]:
    """The machine's identity as Slurm and the node check know it: the GPU serials and
    the machine id the node check published in Extra, Slurm's InstanceId and hostname."""
    from slurm_heal import extra

    out: dict[str, str] = {}
    data = extra.read_check_data(info.name, info.extra, now)
    if data.host:
        out["machine"] = data.host
    ours = (info.extra or {}).get(extra.KEY)
    machine = ours.get("machine") if isinstance(ours, dict) else None
    serials = machine.get("gpu_serials") if isinstance(machine, dict) else None
    if isinstance(serials, list) and serials:
        out["gpu_serials"] = ",".join(str(s) for s in serials)
    if info.instance_id:
        out["instance_id"] = info.instance_id
    if info.hostname and info.hostname != info.name:
        out["hostname"] = info.hostname
    return out


def _from_command(cmd: Command, now: datetime) -> ValidationRun:
    node = cmd.node or ""
    return ValidationRun(id=flow.run_id(node, "request", cmd.id), node=node,
                         origin="request", requested_by=cmd.by, reason=cmd.reason,
                         level=cmd.level, created=now, updated=now)
