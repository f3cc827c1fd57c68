"""The `azure` provider: Azure VMs and scale set VMs through azure-mgmt-compute (SPEC L2,
E4, S6, D11; issue 41).

Actions and the Azure Resource Manager operations they use (each a long-running
operation):

- reboot -> ``restart`` (the VM keeps its host, its disks, the local NVMe and its IPs);
- migrate -> ``redeploy`` (the VM moves to a new host: the local NVMe and the temporary
  disk are emptied, dynamic public IPs may change);
- rebuild -> ``reimage``: of a scale set VM (from the scale set's model), or of a VM
  whose OS disk has an image to come from (an ephemeral OS disk is reset to its image,
  a managed one replaced from it). A VM whose OS disk was attached (``createOption
  Attach``: a specialized disk, no image) cannot be reimaged: refused, with the reason;
- power_cycle (E4) -> ``deallocate`` then ``start`` (the VM gets other hardware), only
  where the operator allows it (``power_cycle = true``): deallocating empties the local
  NVMe and releases a dynamic public IP.

node -> VM: the ``vms`` table (``name`` or ``scale-set/instance-id``), else the VM whose
tag ``tag`` is the node's name, else the ``vm_name`` template (``{node}``; with
``scale_set`` it names the instance id). The VM's ``vmId`` is the machine's identity
(D11): it is recorded with the operation, and where Slurm's InstanceId of the node is
set it must be the vmId of the VM found (a name reused by another VM is refused).

Idempotency (SPEC S6): ARM has no idempotency key for these POSTs, so every key is
recorded locally (`SteppedOperations`) before anything is sent and a recorded step is
never sent again. The operation's ``Azure-AsyncOperation`` URL and the SDK poller's
continuation token are recorded with it: `status` (also that of a restarted controller)
asks the operation where it stands through azure-mgmt-core's ARMPolling, one poll per
call, within our deadline. A step whose answer was lost is resolved from the VM's
instance view (an operation that ended after we sent it), never by sending it again.

Retries are ours, not the SDK's: the client is built with ``retry_total = 0`` because
azure-core resends a POST answered 500, 503 or 504 (an action whose answer was lost
would run twice). Reads are retried on 429 (``Retry-After`` honoured), 5xx and
connection errors; an action only while it certainly did not run (429, 503, a
connection never made). Token requests are azure-identity's own (a token refused is an
error naming the credentials, and nothing is sent). Every SDK call runs in a worker
thread the caller waits for at most ``deadline``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providerconf import AZURE_ACTIONS as AZURE_ACTIONS
from slurm_heal.providerconf import AzureSettings as AzureSettings
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers._transport import (
    Deadline,
    Retryable,
    plain_reason,
    retrying,
    try_within,
)
from slurm_heal.providers.base import Operation, slurm_instance_id
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

STEPS = {Action.REBOOT: ["restart"], Action.MIGRATE: ["redeploy"],
         Action.REBUILD: ["reimage"], Action.POWER_CYCLE: ["deallocate", "start"]}
# A step whose answer was lost and that the VM does not show ended within this long is
# reported failed (unknown, never sent again).
UNKNOWN_WAIT = 900.0
T = TypeVar("T")


class _Refused(ProviderError):
    """ARM answered no (4xx): nothing ran."""


class _Unknown(ProviderError):
    """The action may have reached ARM and its answer was lost."""


def _stepping_polling() -> Any:
    """azure-mgmt-core's ARMPolling, stepped by us: LROPoller runs a polling method in a
    thread of its own until the operation ends; this one's ``run`` returns at once, and
    `AzureProvider._poll` asks for the status one `update_status` at a time."""
    from azure.mgmt.core.polling.arm_polling import ARMPolling

    class Stepped(ARMPolling):
        def run(self) -> None:
            return None

    return Stepped(0)


class AzureProvider(SteppedOperations):
    """Azure Resource Manager client (azure-mgmt-compute) for reboot / rebuild / migrate /
    power_cycle."""

    name = "azure"

    def __init__(self, *, subscription_id: str, resource_group: str,
                 credential: Any, vm_name: str = "{node}", tag: str | None = None,
                 scale_set: str | None = None, vms: Mapping[str, str] | None = None,
                 power_cycle: bool = False, base_url: str | None = None,
                 verify: bool | str = True, slurm: SlurmClient | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 read_timeout: float = 30.0, deadline: float = 60.0, attempts: int = 4,
                 backoff: float = 0.5, actions: frozenset[Action] = AZURE_ACTIONS,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time):
        from azure.mgmt.compute import ComputeManagementClient  # lazy

        if "{node}" not in vm_name:
            raise ValueError(f"vm_name must contain {{node}}, not {vm_name!r}")
        self.subscription_id, self.resource_group = subscription_id, resource_group
        self.vm_name, self.tag, self.scale_set = vm_name, tag, scale_set
        self.vms = dict(vms or {})
        self.power_cycle = power_cycle
        self.slurm = slurm
        self.read_timeout, self.deadline = read_timeout, deadline
        self.attempts, self.backoff = max(1, attempts), backoff
        self.actions = actions
        self._sleep, self._clock = sleep, clock
        kwargs: dict[str, Any] = {"retry_total": 0, "connection_timeout": min(10.0, read_timeout),
                                  "read_timeout": read_timeout, "polling_interval": 0}
        if base_url:
            kwargs["base_url"] = base_url.rstrip("/")
            # The token's audience stays Azure Resource Manager's.
            kwargs["credential_scopes"] = ["https://management.azure.com/.default"]
        if verify is not True:
            kwargs["connection_verify"] = verify
        self._client = ComputeManagementClient(credential, subscription_id, **kwargs)
        self._lock = threading.Lock()
        self.records = KeyRecords(Path(state_dir) / "azure-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def supports(self, action: Action) -> bool:
        """reboot, rebuild, migrate; power_cycle where the operator allowed it."""
        if action == Action.POWER_CYCLE and not self.power_cycle:
            return False
        return action in self.actions

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start ``action`` on the VM of ``node`` once per ``key``."""
        if action == Action.POWER_CYCLE and action in self.actions and not self.power_cycle:
            raise ProviderRefused("azure provider: power_cycle deallocates the VM (its local "
                                  "NVMe is emptied, a dynamic public IP released) and starts "
                                  "it on other hardware; allow it with [provider] "
                                  "power_cycle = true")
        known = self._repeat(key, node, action)
        if known is not None:
            return known
        target = self.target(node)
        vm = self._get_vm(target)
        vm_id = str(getattr(vm, "vm_id", "") or "")
        self._check_identity(node, vm_id, target)
        kind = self._reimage_kind(target, vm) if action == Action.REBUILD else ""
        rec: dict[str, Any] = {"id": "arm-" + uuid.uuid4().hex[:12], "node": node,
                               "action": action.value, "target": target, "vm_id": vm_id,
                               "steps": STEPS[action], "step": 0, "token": "",
                               "operation": "", "unknown": False, "sent_at": 0.0,
                               "kind": kind, "status": "running", "detail": "",
                               "submitted": datetime.now(timezone.utc).isoformat()}
        return self._begin(key, rec)

    def target(self, node: str) -> dict[str, str]:
        """Where ``node`` lives: resource group, VM name, and for a scale set VM the scale
        set and instance id."""
        rg = self.resource_group
        mapped = self.vms.get(node)
        if mapped is not None:
            ss, _, iid = mapped.rpartition("/")
            return {"rg": rg, "vm": mapped, "scale_set": ss, "instance": iid if ss else ""}
        if self.tag is not None:
            return {"rg": rg, "vm": self._by_tag(node), "scale_set": "", "instance": ""}
        name = self.vm_name.replace("{node}", node)
        if self.scale_set:
            return {"rg": rg, "vm": f"{self.scale_set}/{name}", "scale_set": self.scale_set,
                    "instance": name}
        return {"rg": rg, "vm": name, "scale_set": "", "instance": ""}

    def identity(self, node: str) -> str:
        """The vmId of the VM under ``node`` (its machine identity, SPEC D11)."""
        return str(getattr(self._get_vm(self.target(node)), "vm_id", "") or "")

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        try:
            while rec["status"] == "running":
                step = rec["steps"][rec["step"]]
                if not rec["token"]:
                    if rec["unknown"]:
                        if not self._resolve_unknown(rec, step):
                            break
                    else:
                        self._send(rec, step)
                        if not rec["token"]:
                            break  # refused or unknown: recorded in rec
                    if rec["status"] != "running" or not rec["token"]:
                        continue
                state, error = self._poll(rec)
                where = f"azure {step} of {_where(rec)}"
                if state not in ("Succeeded", "Failed", "Canceled"):
                    rec["detail"] = f"{where}: operation {rec['operation']} is {state}"
                    break
                if state != "Succeeded":
                    rec.update(status="failed", detail=f"{where}: operation {state}: "
                                                       f"{error or 'no error given'}")
                    break
                self._next_step(rec, step)
        except ProviderError:
            self.records.put(key, rec)
            raise
        self.records.put(key, rec)
        return operation(key, rec)

    def _next_step(self, rec: dict[str, Any], step: str) -> None:
        if rec["step"] + 1 < len(rec["steps"]):
            rec.update(step=rec["step"] + 1, token="", operation="", unknown=False)
            return
        what = " then ".join(rec["steps"])
        kind = f" ({rec['kind']})" if rec.get("kind") else ""
        rec.update(status="succeeded", detail=f"azure {what}{kind} of {_where(rec)} done "
                                              f"(vmId {rec['vm_id']}, operation "
                                              f"{rec['operation'] or 'seen in the VM'})")

    def _send(self, rec: dict[str, Any], step: str) -> None:
        """Send ``step`` once. Refused: the operation fails; answer lost: unknown (the VM
        is asked); raises ProviderError when it certainly never ran (sent next poll)."""
        target = rec["target"]
        ops = self._client.virtual_machine_scale_set_vms if target["scale_set"] \
            else self._client.virtual_machines
        args = (target["rg"], target["scale_set"], target["instance"]) \
            if target["scale_set"] else (target["rg"], target["vm"])
        begin = getattr(ops, "begin_" + step)
        rec["sent_at"] = self._clock()
        try:
            poller = self._act(f"{step} of {_where(rec)}",
                               lambda: begin(*args, polling=_stepping_polling()))
        except _Refused as exc:
            rec.update(status="failed", detail=str(exc))
            return
        except _Unknown as exc:
            rec.update(unknown=True, detail=f"{exc}; whether it ran is unknown: asking the "
                                            "VM, never sending it again (SPEC S6)")
            return
        method = poller.polling_method()
        headers = method._initial_response.http_response.headers
        rec.update(token=poller.continuation_token(), operation=str(
            headers.get("Azure-AsyncOperation") or headers.get("Location") or ""),
            detail=f"azure {step} of {_where(rec)} accepted")

    def _poll(self, rec: dict[str, Any]) -> tuple[str, str]:
        """One look at the recorded operation through the SDK's ARMPolling."""
        from azure.mgmt.core.polling.arm_polling import ARMPolling

        def look() -> tuple[str, str]:
            client, initial, callback = ARMPolling.from_continuation_token(
                rec["token"], client=self._client.virtual_machines._client,
                deserialization_callback=lambda response: None)
            method = ARMPolling(0)
            method.initialize(client, initial, callback)
            if not method.finished():
                method.update_status()
            status = str(method.status())
            error = ""
            if status in ("Failed", "Canceled"):
                error = _operation_error(method)
            return status, error

        return self._read(f"operation of {_where(rec)}", look)

    def _resolve_unknown(self, rec: dict[str, Any], step: str) -> bool:
        """A step whose answer was lost: the VM's instance view says whether an operation
        ended after we sent it. True: the step is done (the loop goes on)."""
        target = rec["target"]
        view = self._read(f"instanceView of {_where(rec)}", lambda: (
            self._client.virtual_machine_scale_set_vms.get_instance_view(
                target["rg"], target["scale_set"], target["instance"])
            if target["scale_set"] else
            self._client.virtual_machines.instance_view(target["rg"], target["vm"])))
        provisioning, ended, power = "", None, ""
        for s in getattr(view, "statuses", None) or []:
            code = str(getattr(s, "code", "") or "")
            if code.startswith("ProvisioningState/"):
                provisioning, ended = code.split("/", 1)[1], getattr(s, "time", None)
            elif code.startswith("PowerState/"):
                power = code.split("/", 1)[1]
        after = isinstance(ended, datetime) and ended.timestamp() >= float(rec["sent_at"])
        wanted = {"deallocate": "deallocated"}.get(step, "running")
        where = f"azure {step} of {_where(rec)}"
        if provisioning == "succeeded" and after and power == wanted:
            rec.update(unknown=False, operation="", detail=f"{where}: the answer was lost; "
                       f"the VM shows an operation that ended after it ({power})")
            self._next_step(rec, step)
            return bool(rec["status"] == "running")
        if provisioning == "failed" and after:
            rec.update(status="failed", detail=f"{where}: the answer was lost and the VM's "
                                               "last operation failed")
            return False
        if self._clock() - float(rec["sent_at"]) > UNKNOWN_WAIT:
            rec.update(status="failed", detail=f"{where}: the answer was lost and the VM "
                       f"shows no operation ended since ({provisioning}, {power}); whether "
                       "it ran is unknown, not sent again (SPEC S6)")
            return False
        rec["detail"] = (f"{where}: the answer was lost; the VM is {provisioning or '?'} / "
                         f"{power or '?'}, waiting for it (never sent again, SPEC S6)")
        return False

    # --- mapping and checks -------------------------------------------------------------
    def _get_vm(self, target: dict[str, str]) -> Any:
        what = f"GET {target['vm']}"
        if target["scale_set"]:
            return self._read(what, lambda: self._client.virtual_machine_scale_set_vms.get(
                target["rg"], target["scale_set"], target["instance"]), refusal=True)
        return self._read(what, lambda: self._client.virtual_machines.get(
            target["rg"], target["vm"]), refusal=True)

    def _by_tag(self, node: str) -> str:
        assert self.tag is not None
        found = self._read(f"list VMs of {self.resource_group}", lambda: [
            vm for vm in self._client.virtual_machines.list(self.resource_group)
            if (getattr(vm, "tags", None) or {}).get(self.tag) == node])
        if len(found) != 1:
            raise ProviderRefused(f"azure provider: expected exactly one VM in "
                                  f"{self.resource_group} tagged {self.tag}={node}, found "
                                  f"{len(found)}; map it in [provider] vms")
        return str(found[0].name)

    def _check_identity(self, node: str, vm_id: str, target: dict[str, str]) -> None:
        """Slurm's InstanceId of the node, where set, is the vmId of the VM we act on."""
        known = slurm_instance_id(self.slurm, node)  # "": the mapping stands without it
        if known and vm_id and known.lower() != vm_id.lower():
            raise ProviderRefused(f"azure provider: {target['vm']} has vmId {vm_id}, but "
                                  f"Slurm's InstanceId of {node} is {known}: another VM "
                                  "under this name; fix the mapping ([provider] vms, tag "
                                  "or vm_name) or the node's InstanceId")

    @staticmethod
    def _reimage_kind(target: dict[str, str], vm: Any) -> str:
        """What a reimage does here, or ProviderRefused where it cannot be done."""
        if target["scale_set"]:
            return "scale set VM reimaged from the scale set's model"
        storage = getattr(vm, "storage_profile", None)
        os_disk = getattr(storage, "os_disk", None)
        create = str(getattr(os_disk, "create_option", "") or "")
        if create.lower().endswith("attach"):
            raise ProviderRefused(
                f"azure provider: {target['vm']} cannot be reimaged: its OS disk was "
                "attached (createOption Attach, a specialized disk) and has no image to "
                "come from; rebuild it from an image by hand, or use a scale set")
        if getattr(os_disk, "diff_disk_settings", None) is not None:
            return "ephemeral OS disk reset to its image"
        return "OS disk replaced from its image"

    # --- calls ------------------------------------------------------------------------
    def _read(self, what: str, fn: Callable[[], T], *, refusal: bool = False) -> T:
        """A read: retried on anything transient within the deadline; a 4xx is a
        ProviderRefused when ``refusal`` (a VM that is not there), else a ProviderError."""
        try:
            return self._retrying(lambda d: self._call(what, fn, d, read=True),
                                  f"{what}: gave up")
        except _Refused as exc:
            raise (ProviderRefused if refusal else ProviderError)(str(exc)) from None

    def _act(self, what: str, fn: Callable[[], T]) -> T:
        """An action POST: retried only while it certainly did not run."""
        return self._retrying(lambda d: self._call(what, fn, d, read=False),
                              f"{what}: not sent")

    def _retrying(self, once: Callable[[Deadline], T], gave_up: str) -> T:
        """`retrying` with this provider's deadline, tries, back-off and sleep."""
        return retrying(once, deadline=Deadline(self.deadline), attempts=self.attempts,
                        backoff=self.backoff, sleep=self._sleep,
                        give_up=lambda n, last: f"azure: {gave_up} after {n} tries: {last}")

    @staticmethod
    def _call(what: str, fn: Callable[[], T], deadline: Deadline, *, read: bool) -> T:
        return try_within(fn, deadline, who="azure", what=what, read=read, unknown=_Unknown,
                          classify=lambda exc: _classify(what, exc, read=read))


def _where(rec: dict[str, Any]) -> str:
    target = rec["target"]
    if target["scale_set"]:
        return f"{target['rg']}/{target['scale_set']}/{target['instance']}"
    return f"{target['rg']}/{target['vm']}"


def _operation_error(method: Any) -> str:
    try:
        body = method._pipeline_response.http_response.json()
    except Exception:  # noqa: BLE001 - the status alone is still said
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code', '')}: {error.get('message', '')}"[:300]
    return ""


def _classify(what: str, exc: BaseException, *, read: bool) -> ProviderError:
    """What an exception from azure-core / azure-identity means for us."""
    from azure.core import exceptions as az

    prefix = f"azure: {what}"
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, az.ClientAuthenticationError):
        status = getattr(exc, "status_code", None)
        lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
        first = lines[0][:300] if lines else ""
        if status in (401, 403) or status is None:
            # Nothing was sent: the token was refused, or ARM refused the token.
            return ProviderError(f"{prefix}: Azure refused the credentials ({first}); "
                                 "check the app registration or managed identity and its "
                                 "role (docs/providers.md)")
    if isinstance(exc, az.HttpResponseError):
        code = int(getattr(exc, "status_code", 0) or 0)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        message = _arm_message(exc)
        if code in (429, 503) or (read and (code >= 500 or code == 408)):
            return Retryable(f"{prefix}: HTTP {code}: {message}",
                             retry_after=_seconds(headers.get("Retry-After")))
        if code == 403:
            return ProviderError(f"{prefix}: HTTP 403: {message} (the role lacks this "
                                 "action: docs/providers.md)")
        if 400 <= code < 500:
            return _Refused(f"{prefix}: HTTP {code}: {message}")
        return _Unknown(f"{prefix}: HTTP {code}: {message}") if not read else \
            Retryable(f"{prefix}: HTTP {code}: {message}")
    if isinstance(exc, az.ServiceRequestError):  # the request never left
        return Retryable(f"{prefix}: connection failed: {plain_reason(exc)}",
                         timed_out="timed out" in plain_reason(exc))
    if isinstance(exc, az.ServiceResponseError):  # sent, no (complete) answer
        if read:
            return Retryable(f"{prefix}: no answer: {plain_reason(exc)}")
        return _Unknown(f"{prefix}: no answer ({plain_reason(exc)})")
    if isinstance(exc, (az.AzureError, ValueError, KeyError, TypeError, AttributeError)):
        text = f"{prefix}: unexpected answer: {exc.__class__.__name__}: {str(exc)[:300]}"
        return ProviderError(text) if read else _Unknown(text)
    if isinstance(exc, Exception):
        text = f"{prefix}: {exc.__class__.__name__}: {str(exc)[:300]}"
        return ProviderError(text) if read else _Unknown(text)
    raise exc


def _arm_message(exc: BaseException) -> str:
    error = getattr(exc, "error", None)
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if code or message:
        return f"{code}: {message}"[:300]
    return str(getattr(exc, "reason", "") or exc).strip().splitlines()[0][:300]


def _seconds(value: Any) -> float | None:
    text = str(value or "")
    return float(text) if text.replace(".", "", 1).isdigit() else None


