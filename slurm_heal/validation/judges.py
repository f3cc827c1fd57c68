"""Per-tool judges: parse a tool's output and hold it against the step's criteria (V3).

Each judge turns the tool's output into ``measured`` figures and compares them with the
step's ``criteria``; output it cannot read is an ``error`` (nothing concluded), never a
pass or a fail.
"""

from __future__ import annotations

from typing import Any

from slurm_heal.validation.suite import Step, StepResult


def judge(step: Step, rc: int, output: str, base: dict[str, Any]) -> StepResult:
    """Judge ``step`` by its kind. Kinds without a judge yet conclude nothing."""
    return StepResult(**base, outcome="error", reason=f"no judge for kind {step.kind!r}")
