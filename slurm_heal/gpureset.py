"""The GPU reset as an operation (SPEC E6): a Slurm job in a maintenance reservation on
the drained node, through the validation flow's Slurm layer (`validation.slurmjobs`):
no ssh, no daemon on the node.

`GpuReset` answers the provider port's ``submit``/``status`` for ``reset_gpu`` (the
controller hands it that action instead of the provider), so the act is recorded before
it runs, polled by its idempotency key and resolved after a restart like any action:

* ``submit``: a MAINT reservation ``slurm-heal-reset-<node>`` holds the node, our drain
  is lifted (Slurm starts no job on a drained node; the reservation keeps every other
  job off it), and the job (`slurm_heal.gpureset_job`) is submitted once per key with a
  time limit; the GPUs are the ones the node's alerts name.
* ``status``: the job still runs: running (one past its limit is cancelled: a hung
  reset is a failed one); it ended: its ``result.json`` is the evidence. Either way the
  node is drained again under the marker it had and the reservation removed before the
  outcome is reported, so the node check's verdict (L5) decides the resume. A job that
  ends CANCELLED although we never cancelled it was cancelled by a person: failed with
  ``by_person`` (SPEC S8: the remediation is handed to them, nothing climbs E1).

Files live in ``<results_dir>/reset/<key>/`` (``[validation] results_dir``: on a file
system the controller and the node share, as for validation).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import catalog as catalog_mod
from slurm_heal import extra, fsio, isotime, reasons
from slurm_heal.config import RESET_RESERVATION_PREFIX
from slurm_heal.errors import HealError, ProviderError, ProviderRefused, SlurmError
from slurm_heal.providers.base import Operation
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Action
from slurm_heal.validation.flow import JOB_DONE
from slurm_heal.validation.slurmjobs import SlurmJobs, job_partitions
from slurm_heal.validation.suite import validation_from

log = logging.getLogger("slurm_heal.gpureset")

PREFIX = RESET_RESERVATION_PREFIX
# Beyond the reset tool's own bound: the node check after it and the job's start.
CHECK_SLACK = timedelta(minutes=3)


def gpus_named(node_extra: dict[str, Any] | None, now: datetime) -> list[int]:
    """The GPU indexes the node's active reset-able alerts name (``[]``: none named, so
    all GPUs are reset)."""
    cat = catalog_mod.load()
    found: set[int] = set()
    for a in extra.read_check_data("", node_extra, now).alerts:
        if a.fault not in cat or not cat.get(a.fault).gpu_reset:
            continue
        for ev in a.evidence:
            idx = (ev.data or {}).get("gpu_index")
            if isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0:
                found.add(idx)
    return sorted(found)


def time_limit(policy: Any) -> timedelta:
    """The reset job's Slurm time limit: the tool's bound plus the node check."""
    tool: timedelta = policy.escalation.gpu_reset_timeout
    return tool + CHECK_SLACK


class GpuReset:
    """``reset_gpu`` as an operation: submit/status by idempotency key."""

    name = "gpu-reset"

    def __init__(self, *, slurm: SlurmClient, policy: Callable[[], Any], state_dir: Path | str,
                 slurm_conf: str | None = None, jobs: SlurmJobs | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.slurm = slurm
        self.policy = policy
        self.state_dir = Path(state_dir)
        self.slurm_conf = slurm_conf
        self._jobs = jobs
        self.clock = clock or (lambda: datetime.now(timezone.utc))

    def supports(self, action: Action) -> bool:
        return action is Action.RESET_GPU

    # ------------------------------------------------------------------ plumbing
    def _cfg(self) -> Any:
        pol = self.policy()
        return validation_from(getattr(pol, "validation", None) or {},
                               str(getattr(pol, "source", "<policy>")))

    def jobs(self) -> SlurmJobs:
        if self._jobs is None:
            self._jobs = SlurmJobs(slurm_conf=self.slurm_conf, user=self._cfg().user)
        return self._jobs

    def dir(self, key: str) -> Path:
        cfg = self._cfg()
        root = Path(cfg.results_dir) if cfg.results_dir else self.state_dir / "validation"
        return root / "reset" / key.replace(":", "-").replace("/", "-")

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return raw if isinstance(raw, dict) else None

    @staticmethod
    def _write(path: Path, data: dict[str, Any]) -> None:
        # The one atomic write (fsync of the file and the directory, house style 13);
        # readable by the job's user, as the validation's own files (its spec.json).
        fsio.atomic_write(path, json.dumps(data, indent=1) + "\n", 0o644)

    def _op(self, key: str, node: str, status: str, detail: str, job: str = "",
            by_person: bool = False) -> Operation:
        return Operation(id=job or key, key=key, node=node, action=Action.RESET_GPU,
                         status=status, detail=detail,  # type: ignore[arg-type]
                         by_person=by_person)

    # ------------------------------------------------------------------ the port
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Reserve the node, lift our drain, submit the reset job (once per key)."""
        if action is not Action.RESET_GPU:
            raise ProviderRefused(f"{self.name} does only reset_gpu, not {action.value}")
        d = self.dir(key)
        before = self._read(d / "run.json")
        if before is not None:
            op = self.status(key)
            if op is not None:
                return op
        pol = self.policy()
        info = self.slurm.node(node)
        held = PREFIX + node in self.jobs().reservations()
        if before is not None and held and not (info.drained or info.down):
            # Sent again after a stop between our lift and sbatch: the node is ours, in
            # our reservation; its marker is the one the first try kept.
            reason = str(before["reason"])
        elif (info.drained or info.down) and reasons.is_ours(info.reason):
            reason = info.reason
        else:
            raise ProviderRefused(f"{node} is not drained by slurm-heal ({info.reason!r}): no "
                                  "GPU reset runs on a node that may take jobs (SPEC P3)")
        now = self.clock()
        gpus = gpus_named(info.extra, now)
        cfg = self._cfg()
        d.mkdir(parents=True, exist_ok=True)
        spec = {"node": node, "vendor": "amd" if cfg.vendor == "amd" else "nvidia",
                "gpus": gpus, "timeout_s": pol.escalation.gpu_reset_timeout.total_seconds(),
                "check_config": pol.escalation.gpu_reset_check_config}
        self._write(d / "spec.json", spec)
        python = cfg.python or sys.executable
        script = d / "job.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"# slurm-heal GPU reset of {node} (SPEC E6), {key}; written by the controller\n"
            f"exec {shlex.quote(python)} -m slurm_heal.gpureset_job "
            f"--spec {shlex.quote(str(d / 'spec.json'))} --out {shlex.quote(str(d))}\n")
        os.chmod(script, 0o755)
        limit = time_limit(pol)
        run = {"node": node, "reason": reason, "reservation": PREFIX + node,
               "job_name": PREFIX + node, "submitted": now.isoformat(),
               "limit_s": limit.total_seconds(), "gpus": gpus, "job": ""}
        self._write(d / "run.json", run)
        jobs = self.jobs()
        try:
            jobs.reserve(PREFIX + node, [node])
            if info.drained and not info.down:
                self.slurm.resume(node)  # the reservation holds the node for the job alone
            job = jobs.submit(name=PREFIX + node, reservation=PREFIX + node, nodes=[node],
                              time_minutes=max(1, -(-int(limit.total_seconds()) // 60)),
                              output=str(d / "job.out"), chdir=str(d), script=str(script),
                              comment=key, partitions=job_partitions(info.partitions))
        except HealError as exc:
            try:
                self._finish(key, d, run, False, f"the reset job could not be started: {exc}")
            except HealError as again:
                log.error("node=%s the GPU reset's reservation could not be undone: %s",
                          node, again)
            raise ProviderRefused(f"the GPU reset job of {node} could not be started: {exc}") \
                from exc
        run["job"] = str(job)
        self._write(d / "run.json", run)
        which = ", ".join(str(g) for g in gpus) if gpus else "all"
        return self._op(key, node, "running", f"reset job {job} submitted on {node} "
                        f"(GPUs {which}) in reservation {PREFIX + node}", str(job))

    def status(self, key: str) -> Operation | None:
        """The reset's state; a finished one is settled (drained again, unreserved). Slurm
        not answering leaves it in flight (asked again next cycle, SPEC S6)."""
        try:
            return self._status(key)
        except SlurmError as exc:
            raise ProviderError(f"the GPU reset could not be followed: {exc}") from exc

    def _status(self, key: str) -> Operation | None:
        d = self.dir(key)
        run = self._read(d / "run.json")
        if run is None:
            return None
        node, job = str(run["node"]), str(run.get("job") or "")
        done = self._read(d / "done.json")
        if done is not None:
            return self._op(key, node, "succeeded" if done.get("ok") else "failed",
                            str(done.get("detail", "")), job, bool(done.get("by_person")))
        if not job:
            return None  # submitted never got as far as sbatch: send it again (same key)
        jobs = self.jobs()
        info = jobs.job(int(job))
        if info is not None and info.state not in JOB_DONE:  # pending, running, completing
            started = isotime.parse(str(run["submitted"]))
            limit = timedelta(seconds=float(run["limit_s"])) + timedelta(minutes=1)
            if self.clock() < started + limit:
                return self._op(key, node, "running", f"reset job {job} is {info.state}", job)
            # Ours to cancel: said before it is sent, so that a CANCELLED job we did not
            # mark is a person's scancel, also after a stop in between.
            self._write(d / "run.json", {**run, "cancelling": True})
            jobs.cancel(int(job))  # a hung reset: bounded, cancelled, failed
            return self._finish(key, d, run, False, f"the reset job {job} did not end within "
                                f"{int(limit.total_seconds())}s ({info.state}): cancelled")
        result = self._read(d / "result.json")
        if result is None and info is not None and info.state == "CANCELLED" \
                and not run.get("cancelling"):
            # SPEC S8 (issue 32 item 10): we never cancelled it: someone did (scancel).
            # A person's hand: the remediation is theirs, nothing climbs to a reboot.
            return self._finish(key, d, run, False, f"the reset job {job} was cancelled by "
                                "someone else (scancel), not by slurm-heal: a person's hand",
                                by_person=True)
        if result is None:
            state = info.state if info is not None else "gone from Slurm"
            tail = ""
            try:
                tail = (d / "job.out").read_text(errors="replace")[-300:].strip()
            except OSError:
                pass
            return self._finish(key, d, run, False, f"the reset job {job} ended ({state}) without "
                                "a result" + (f": {tail}" if tail else ""))
        return self._finish(key, d, run, result.get("outcome") == "ok",
                            str(result.get("detail", ""))[:1500])

    def _finish(self, key: str, d: Path, run: dict[str, Any], ok: bool,
                detail: str, by_person: bool = False) -> Operation:
        """Drain the node again under its marker, remove the reservation, then report."""
        node, job = str(run["node"]), str(run.get("job") or "")
        try:
            info = self.slurm.node(node)
            if not (info.drained or info.down):
                self.slurm.drain(node, str(run["reason"]))
            elif info.drained and reasons.is_ours(info.reason) and info.reason != run["reason"]:
                self.slurm.drain(node, str(run["reason"]))  # the node check's own drain
        except SlurmError as exc:
            # not settled: asked again next cycle (the outcome is reported only once the
            # node is out of service again)
            raise ProviderError(f"{node} could not be drained again after its GPU reset: "
                                f"{exc}") from exc
        self.jobs().unreserve(str(run["reservation"]))
        self._write(d / "done.json", {"ok": ok, "detail": detail, "by_person": by_person,
                                      "at": self.clock().isoformat()})
        return self._op(key, node, "succeeded" if ok else "failed", detail, job, by_person)
