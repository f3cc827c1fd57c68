"""The shared types of the validation suite (SPEC V1, V3): a step, its result, a run's
result and the verdict over its steps.

Their own module so that `validation.suite` (the section, `evaluate`), `validation.judges`
(the tool-specific judging) and `validation.tickets` (the sinks) all build on them without
importing each other; and a low one (pure data, pydantic and the duration rule only), so
that the config's sections (`sections.Validation`, `sections.Gate`) type their steps with
them without importing the validation flow above the engine (issue 33, the layer table
in tests/unit/test_import_layers.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
)

from slurm_heal.durations import format_duration, parse_duration_knob

Kind = Literal["dcgm", "amd", "nccl", "ib", "fio", "mounts", "command"]
Outcome = Literal["pass", "fail", "error"]
# Placeholders a step's argv may use; the runner fills them in (unknown ones are refused).
PLACEHOLDERS = ("node", "peer", "gpus", "scratch", "level", "out")


# Written back as "30m" (not ISO "PT30M", which the knob's parser refuses): the run spec
# the controller writes for the job must read back in the runner.
Duration = Annotated[timedelta, BeforeValidator(parse_duration_knob),
                     PlainSerializer(format_duration, return_type=str, when_used="json")]


class Model(BaseModel):
    """Frozen, no unknown keys: every model of the suite."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Step(Model):
    """One test of the suite: what runs, for how long, and what counts as a pass."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Kind = "command"
    command: tuple[str, ...] = Field(min_length=1)  # argv; "{node}", "{peer}", ... filled in
    timeout: Duration = timedelta(minutes=30)
    peer: bool = False  # needs a known-healthy peer (NCCL across nodes, ib_write_bw)
    criteria: dict[str, Any] = Field(default_factory=dict)  # per kind, see docs/validation.md

    @field_validator("command")
    @classmethod
    def _placeholders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import string
        for arg in value:
            for _, field, _, _ in string.Formatter().parse(arg):
                if field is not None and field not in PLACEHOLDERS:
                    raise ValueError(f"{arg!r} names {{{field}}}; the placeholders are "
                                     + ", ".join("{" + p + "}" for p in PLACEHOLDERS))
        return value

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # Checked against the kind's model when the policy file is loaded, so a typo in a
        # criterion is refused at start, not when a machine is tested (V3).
        from slurm_heal import suitecriteria as criteria
        kind = info.data.get("kind")
        if kind is not None:  # a bad kind is reported on its own
            criteria.parse(kind, value)
        return value


class StepResult(Model):
    """What one step did and how it was judged (kept in results.json and the ticket)."""

    name: str
    kind: Kind
    outcome: Outcome
    reason: str = ""  # why, in words: "busbw 120.5 GB/s < 300 GB/s expected"
    measured: dict[str, Any] = Field(default_factory=dict)
    expected: dict[str, Any] = Field(default_factory=dict)
    rc: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    log: str = ""  # file name of the step's output, relative to the results directory


class SuiteResult(Model):
    """The whole run on one machine: every step's result and the verdict."""

    node: str
    peer: str = ""
    vendor: str
    outcome: Outcome
    steps: tuple[StepResult, ...] = ()
    started: str = ""
    finished: str = ""


def verdict(steps: tuple[StepResult, ...] | list[StepResult]) -> Outcome:
    """The suite's outcome: any clear failure fails; else any error is an error; else pass.

    A suite with no steps concludes nothing: it is an ``error``, never a pass.
    """
    if any(s.outcome == "fail" for s in steps):
        return "fail"
    if not steps or any(s.outcome == "error" for s in steps):
        return "error"
    return "pass"


def unique_step_names(suites: dict[str, tuple[Step, ...]]) -> dict[str, tuple[Step, ...]]:
    """A suite names each step once (the [validation] and [gate] suites alike)."""
    for vendor, steps in suites.items():
        names = [s.name for s in steps]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"suite {vendor!r} names step(s) {', '.join(dup)} twice")
    return suites
