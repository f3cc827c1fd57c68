"""The controller's ports (ARCHITECTURE "ports and adapters", house style 15; issue 33):
what the short imperative cycle asks of the store, the pure core and the validation flow,
as Protocols, so that the composition is typed (``mypy --strict``) and a test double is
held to the same shape as the real adapter.

Slurm (`slurm.base.SlurmClient`) and the providers (`providers.base.Provider`) have
their own Protocols beside their adapters; these three had none (the controller took
``Any``). Each names only what the controller calls:

* `StatePort`: the JSON store (`store.Store`): load, apply a plan and record intents,
  record outcomes and provider errors, follow the clock, retention (SPEC I5, S6, L1).
* `DecidePort`: the pure core, ``decide(view, state, now, policy) -> Plan`` (its catalog bound)
  (`policy.incremental.Decide`, or `policy.decide` with the catalog its caller loaded).
* `ValidatorPort`: the validation flow of vacated machines and the post-repair gate
  (`validation.service.Validator`, SPEC V1, V2, V4).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, Protocol

from slurm_heal.clock import Frame
from slurm_heal.config import Policy
from slurm_heal.models import Effect, Plan, State, ValidationRun
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action, ClusterView

Outcome = Literal["ok", "failed", "running"]  # `store.OutcomeKind`


class StatePort(Protocol):
    """The store as the controller uses it (SPEC I5, S6)."""

    def load(self) -> State: ...

    def apply(self, plan: Plan, now: datetime) -> tuple[State, tuple[Effect, ...]]: ...

    def record_outcome(self, remediation_id: str, key: str, outcome: Outcome,
                       now: datetime, operation: str | None = None, detail: str = "",
                       sent: bool = True, by_person: bool = False) -> State: ...

    def record_provider_error(self, remediation_id: str, key: str, error: str,
                              now: datetime) -> State: ...

    def follow_clock(self, frame: Frame, now: datetime) -> tuple[State, timedelta | None]: ...

    def prune(self, now: datetime, keep: timedelta = ..., command_ttl: timedelta = ...,
              archive: bool = False) -> State: ...


class DecidePort(Protocol):
    """The pure core: the same inputs give the same Plan (SPEC S6); no I/O, no clock."""

    def __call__(self, view: ClusterView, state: State, now: datetime,
                 policy: Policy, /) -> Plan: ...


class ValidatorPort(Protocol):
    """The validation flow (SPEC V1, V2, V4): run once per cycle, fed by the controller."""

    def cycle(self, view: ClusterView, now: datetime, policy: Policy) -> None: ...

    def vacated(self, *, remediation: str, node: str, action: Action, op: Operation,
                now: datetime, policy: Policy) -> ValidationRun | None: ...

    def gate(self, *, remediation: str, node: str, key: str, now: datetime,
             why: str = "") -> ValidationRun: ...
