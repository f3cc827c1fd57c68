"""Run a validation suite on the machine under test, inside the Slurm job (SPEC V1, V3).

``python -m slurm_heal.validation.runner --spec SPEC.json --out DIR`` runs each step of
the spec (written by the controller: node, peer, vendor, the steps and the placeholders'
values) with its timeout, keeps each step's output in ``DIR/<step>.log`` and writes
``DIR/results.json`` (a `SuiteResult`) atomically at the end, and after each step, so an
interrupted job leaves what it had. Exit status: 0 pass, 1 clear failure, 2 error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from slurm_heal import fsio
from slurm_heal.validation.suite import Step, StepResult, SuiteResult, evaluate, verdict

RESULTS = "results.json"
OUTPUT_CAP = 4 * 1024 * 1024  # bytes of a step's output read back for judging


class RunSpec(BaseModel):
    """What the controller hands the job: the machine, its peer and the steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    peer: str = ""
    vendor: str
    steps: tuple[Step, ...]
    values: dict[str, str] = Field(default_factory=dict)  # placeholder -> value


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _argv(step: Step, values: dict[str, str]) -> list[str]:
    """The step's argv with its placeholders filled in; KeyError names one without a value."""
    return [arg.format_map(values) for arg in step.command]


def count_gpus(dev: Path = Path("/dev"),
               environ: dict[str, str] | None = None) -> str:
    """The {gpus} placeholder when the config does not set it: Slurm's SLURM_GPUS_ON_NODE
    for the job, else the NVIDIA device files (/dev/nvidia0, 1, ...), else the AMD render
    nodes the kfd driver made (/dev/dri/renderD*) when /dev/kfd is there, else 0."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return env["SLURM_GPUS_ON_NODE"]
    nvidia = [p for p in dev.glob("nvidia*") if p.name[len("nvidia"):].isdigit()]
    if nvidia:
        return str(len(nvidia))
    if (dev / "kfd").exists():
        return str(len(list((dev / "dri").glob("renderD*"))))
    return "0"


def _write(out: Path, result: SuiteResult) -> None:
    fsio.atomic_write(out / RESULTS, json.dumps(result.model_dump(mode="json"), indent=1) + "\n",
                      0o644)


def run_step(step: Step, values: dict[str, str], out: Path) -> StepResult:
    """Run one step with its timeout; its stdout+stderr go to ``out/<name>.log``."""
    log = f"{step.name}.log"
    start = time.monotonic()
    try:
        argv = _argv(step, values)
    except KeyError as exc:
        (out / log).write_text(f"placeholder {{{exc.args[0]}}} has no value for this run\n")
        return StepResult(name=step.name, kind=step.kind, outcome="error", log=log,
                          reason=f"placeholder {{{exc.args[0]}}} has no value for this run")
    rc: int | None
    timed_out = False
    with open(out / log, "wb") as fh:
        try:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            fh.write(f"{step.command[0]}: not found\n".encode())
            rc = 127
        except OSError as exc:
            fh.write(f"{step.command[0]}: {exc.strerror}\n".encode())
            rc = 126
        else:
            try:
                rc = proc.wait(timeout=step.timeout.total_seconds())
            except subprocess.TimeoutExpired:
                timed_out = True
                rc = None
                _kill(proc)
    with open(out / log, "rb") as fh:
        output = fh.read(OUTPUT_CAP).decode("utf-8", "replace")
    return evaluate(step, rc, output, timed_out=timed_out,
                    duration_s=round(time.monotonic() - start, 3), log=log)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # pragma: no cover - it ended just then
        pass
    proc.wait()


def run(spec: RunSpec, out: Path) -> SuiteResult:
    """Run every step in order; results.json is rewritten after each one."""
    out.mkdir(parents=True, exist_ok=True)
    values = {"node": spec.node, "out": str(out), **spec.values}
    if spec.peer:
        values["peer"] = spec.peer
    values.setdefault("gpus", count_gpus())
    started = _now()
    done: list[StepResult] = []

    def result(final: bool) -> SuiteResult:
        outcome = verdict(done) if final else "error"
        return SuiteResult(node=spec.node, peer=spec.peer, vendor=spec.vendor,
                           outcome=outcome, steps=tuple(done), started=started,
                           finished=_now() if final else "")

    for step in spec.steps:
        done.append(run_step(step, values, out))
        _write(out, result(final=False))
    final = result(final=True)
    _write(out, final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurm_heal.validation.runner")
    parser.add_argument("--spec", required=True, help="the run spec (JSON) the controller wrote")
    parser.add_argument("--out", required=True, help="the results directory")
    args = parser.parse_args(argv)
    try:
        data: Any = json.loads(Path(args.spec).read_text())
        spec = RunSpec.model_validate(data)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"slurm-heal validation: cannot read the run spec {args.spec}: "
                         f"{exc}\n")
        return 2
    outcome = run(spec, Path(args.out)).outcome
    return {"pass": 0, "fail": 1}.get(outcome, 2)


if __name__ == "__main__":  # pragma: no cover - run as the job's command
    sys.exit(main())
