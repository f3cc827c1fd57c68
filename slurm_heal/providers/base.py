"""The provider port: whatever repairs a node (cloud API, bare-metal API, scripts, Slurm).

Every call carries an idempotency key derived from the remediation and the step
(`slurm_heal.models.idempotency_key`): submitting the same key twice never executes the
action twice (SPEC S6); `status(key)` answers what happened to an earlier submit, which
is how a restarted controller resolves an attempt left in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from slurm_heal.types import SLURM_REBOOT_TIMEOUT as SLURM_REBOOT_TIMEOUT
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

OperationStatus = Literal["pending", "running", "succeeded", "failed"]

# SLURM_REBOOT_TIMEOUT (imported above, re-exported): the slurm provider's default reboot
# timeout, which `install-node` reads on a node install (no pydantic, issue 38); it lives
# with the values (types.py), where the provider's table (providerconf.py) reads it too.


@dataclass(frozen=True, slots=True)
class Operation:
    """A provider's record of one action on one node."""

    id: str
    key: str  # the idempotency key it was created with
    node: str
    action: Action
    status: OperationStatus
    detail: str = ""  # provider's message / script output excerpt (kept in the audit)
    # migrate: the host the node left, which goes to validation (SPEC L2, V1); "" when
    # the provider does not say
    previous_host: str = ""
    # True: a person ended it (their scancel of our GPU reset job, SPEC S8): a person's
    # hand, not a failure of the action
    by_person: bool = False

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed")


@runtime_checkable
class Provider(Protocol):
    """Executes actions on nodes. Errors raise `slurm_heal.errors.ProviderError` subclasses
    (`ProviderRefused` for an action this provider cannot do)."""

    name: str

    def supports(self, action: Action) -> bool:
        """Whether this provider can carry out ``action`` at all."""
        ...

    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start ``action`` on ``node``. Same ``key`` again: the same operation, not a new one."""
        ...

    def status(self, key: str) -> Operation | None:
        """The operation created with ``key``; None when the provider never saw it."""
        ...


def slurm_instance_id(slurm: SlurmClient | None, node: str) -> str:
    """Slurm's InstanceId of ``node`` (its machine identity, SPEC D11), or "" where there
    is no Slurm client or it cannot say: a cloud provider's own table of nodes stands
    without it (aws, oci and azure each read it so)."""
    if slurm is None:
        return ""
    try:
        return slurm.node(node).instance_id or ""
    except Exception:  # noqa: BLE001 - the provider's table is the fallback
        return ""
