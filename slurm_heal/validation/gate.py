"""The post-repair gate's settings: the ``[gate]`` section of the policy file (SPEC V4).

After an action and the node's health check (L5), before the node is resumed, a short
suite runs as a Slurm job in a maintenance reservation on the node: the validation
suite's own steps and judges (`steps.Step`, `judges`), run by the same flow
(`flow`, ``origin = "gate"``), optionally with one healthy idle peer of the same pool
for a step across two machines. Off unless enabled.

What the gate's answer does is the life cycle's (`slurm_heal.policy.postgate`): pass ->
resumed; a clear failure -> the remediation fails (L5) and E1 follows; interrupted (the
job cancelled, timed out, the node or the peer gone) -> tried again ``retries`` times,
then a person. This module holds only the section; the job's Python, user, results
directory and placeholders' values come from ``[validation]``.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, field_validator, model_validator

from slurm_heal.durations import format_duration
from slurm_heal.validation.steps import Duration, Model, Step, unique_step_names

# SPEC V4 "time-boxed": the longest a gate may be given. A gate is a short suite before
# a node takes jobs again, not the vacated-machine validation (V1) of hours.
MAX_TIMEOUT = timedelta(hours=2)


class Gate(Model):
    """The ``[gate]`` section (docs/policy.md "Post-repair gate")."""

    enabled: bool = False
    vendor: str = "nvidia"  # whose suite runs; "default" is the fallback suite
    suites: dict[str, tuple[Step, ...]] = Field(default_factory=dict)  # vendor -> steps
    # The whole gate, from its request to its verdict: the job's time limit (sbatch
    # --time, Slurm ends it: TIMEOUT) and the longest it waits for the node (or a peer).
    timeout: Duration = timedelta(minutes=10)
    # An interrupted gate (nothing concluded) is run again this many times, then the
    # remediation goes to a person. A clear failure is never run again.
    retries: int = Field(default=1, ge=0, le=3)
    reservation_prefix: str = Field(default="slurm-heal-gate-", pattern=r"^[A-Za-z0-9_.-]+$")

    @field_validator("suites")
    @classmethod
    def _unique(cls, value: dict[str, tuple[Step, ...]]) -> dict[str, tuple[Step, ...]]:
        return unique_step_names(value)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta) -> timedelta:
        if value < timedelta(minutes=1):
            raise ValueError("must be at least 1m (sbatch --time counts whole minutes)")
        if value > MAX_TIMEOUT:
            raise ValueError("more than the 2h a post-repair gate may take (SPEC V4: a short "
                             "suite; the vacated-machine validation is [validation])")
        return value

    @model_validator(mode="after")
    def _steps_when_enabled(self) -> Gate:
        for vendor, steps in self.suites.items():
            for i, step in enumerate(steps):
                if step.timeout > self.timeout:
                    # Slurm ends the job at gate.timeout: such a step could only ever be
                    # interrupted, never judged.
                    raise ValueError(
                        f"suites.{vendor}[{i}] ({step.name}): its timeout "
                        f"{format_duration(step.timeout)} is longer than gate.timeout "
                        f"{format_duration(self.timeout)} (the job's time limit); give the "
                        "step a shorter timeout (a step's default is 30m) or the gate a "
                        "longer one")
        if self.enabled and not self.steps():
            raise ValueError(f"gate.enabled = true but no suite for vendor {self.vendor!r} "
                             f"(nor a \"default\" one): add [[gate.suites.{self.vendor}]] "
                             "steps, or turn the gate off")
        return self

    def steps(self) -> tuple[Step, ...]:
        """The steps for the gate's vendor, else the ``default`` suite, else none."""
        return self.suites.get(self.vendor, self.suites.get("default", ()))

    @property
    def needs_peer(self) -> bool:
        return any(s.peer for s in self.steps())
