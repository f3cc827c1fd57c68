"""The validation suite: steps, their pass/fail criteria and results (SPEC V1, V3).

The suites live in the ``[validation]`` section of the policy file, one list of steps per
vendor (V3). A step is a command (argv) run on the machine under test with a timeout; its
output is kept and judged against the step's ``criteria`` by `evaluate`:

- ``pass``: the tool ran and every criterion holds;
- ``fail``: a clear failure, the tool ran and a criterion does not hold (ticket, V2);
- ``error``: nothing can be concluded (the tool is missing, timed out, its output cannot be
  read): the machine is restored as it was, never ticketed on a guess (V2).
"""

from __future__ import annotations

import math
from typing import Any

from slurm_heal.sections import Validation as Validation  # its home (issue 21)
from slurm_heal.suitesteps import PLACEHOLDERS as PLACEHOLDERS
from slurm_heal.suitesteps import Duration as Duration
from slurm_heal.suitesteps import Kind as Kind
from slurm_heal.suitesteps import Outcome as Outcome
from slurm_heal.suitesteps import Step as Step
from slurm_heal.suitesteps import StepResult as StepResult
from slurm_heal.suitesteps import SuiteResult as SuiteResult
from slurm_heal.suitesteps import verdict as verdict


def evaluate(step: Step, rc: int | None, output: str, *, timed_out: bool = False,
             duration_s: float = 0.0, log: str = "") -> StepResult:
    """Judge one step from its exit status and output (SPEC V3)."""
    base: dict[str, Any] = {"name": step.name, "kind": step.kind, "rc": rc,
                            "timed_out": timed_out, "duration_s": duration_s, "log": log}
    if timed_out:
        return StepResult(**base, outcome="error",
                          reason=f"timed out after {step.timeout.total_seconds():g}s")
    if rc is None:
        return StepResult(**base, outcome="error", reason="did not run")
    if rc == 127:
        return StepResult(**base, outcome="error", reason=f"{step.command[0]}: not found")
    if step.kind == "command":
        if rc == 0:
            return StepResult(**base, outcome="pass")
        return StepResult(**base, outcome="fail", reason=f"exit status {rc}")
    # The tool-specific judges (parsers + criteria) are in `judges`.
    from slurm_heal.validation import judges
    return judges.judge(step, rc, output, base)


def validation_from(data: Validation | dict[str, Any] | None, source: str = "<dict>") -> Validation:
    """Validate the ``[validation]`` section. Raises ConfigError naming the key."""
    from slurm_heal.config import read_section  # config imports nothing of ours here
    result = read_section(Validation, data, file=source, key="validation", index=".",
                          docs="docs/validation.md")
    # The ticket sinks too, so a typo there is refused at start, not when a machine fails.
    from slurm_heal.validation.tickets import sinks_from
    sinks_from(result.tickets, source)
    return result


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
