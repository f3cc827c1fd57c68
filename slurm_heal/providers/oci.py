"""The `oci` provider: Oracle Cloud instances through the oci SDK (SPEC L2, E4, S6, D11;
issue 41).

Actions and the Core Services calls they use:

- reboot -> ``InstanceAction SOFTRESET`` (the OS is asked to shut down, then the
  instance is powered off and on; it keeps its host, its local NVMe and its IPs);
- power_cycle (E4) -> ``InstanceAction RESET`` (power off and on at once, same host);
- rebuild -> boot volume replacement: ``UpdateInstance`` with ``sourceDetails`` (the
  instance's own image, or ``image``), the old boot volume not kept unless
  ``preserve_boot_volume``; progress from its work request (``GetWorkRequest``);
- migrate -> ``InstanceAction REBOOTMIGRATE`` (to new hardware) where OCI offers it for
  the instance: when it has a maintenance reboot due (``timeMaintenanceRebootDue``).
  Otherwise, with ``migrate_relaunch = true``, terminate and relaunch it with the same
  launch details in ``compute_cluster_id`` (`_oci_relaunch`: a new OCID, new local NVMe,
  a new public IP); without it refused with the reason.
  A dense shape's local NVMe is lost in the move: sent with ``deleteLocalStorage`` only
  where ``delete_local_storage = true``.

node -> instance: Slurm's InstanceId when it is an instance OCID, else the ``instances``
table, else the instance whose display name is the node in ``compartment_id``; an OCID
that a relaunch recorded here replaced is followed to its replacement. The instance OCID
is the machine identity (D11).

Idempotency (SPEC S6): every POST and PUT carries an ``opc-retry-token`` derived from our
key and the step: OCI answers a repeat with the first answer for 24 hours, so a lost
answer is resolved by sending the same request again, and every call may be retried
(429 with ``Retry-After``, 5xx, a lost connection) within the deadline. The key is also
recorded locally before anything is sent (`SteppedOperations`). The SDK's own retries
and circuit breaker are off (``NoneRetryStrategy``, ``NoCircuitBreakerStrategy``): ours
keep to our deadlines, and each SDK call runs in a worker thread waited for at most
``deadline``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providerconf import OCI_ACTIONS as OCI_ACTIONS
from slurm_heal.providerconf import OciSettings as OciSettings
from slurm_heal.providers import _oci_relaunch
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers._transport import (
    Deadline,
    Retryable,
    Spent,
    call_within,
    plain_reason,
    retrying,
)
from slurm_heal.providers.base import Operation, slurm_instance_id
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

CALLS = {Action.REBOOT: "SOFTRESET", Action.POWER_CYCLE: "RESET",
         Action.MIGRATE: "REBOOTMIGRATE", Action.REBUILD: "replaceBootVolume"}
_NAMESPACE = uuid.UUID("0c1e4b6a-3f2d-4e8b-9d61-7a5c2e9f0b43")
# An instance action OCI accepted whose instance is RUNNING at every look, never seen
# leaving it (a reset between two polls), is taken as done after this long: the health
# check after the return says whether it helped (SPEC L5).
UNSEEN_WAIT = 600.0
T = TypeVar("T")


def retry_token(key: str, step: str) -> str:
    """The opc-retry-token of one step of the operation of ``key`` (at most 64 characters,
    stable across restarts)."""
    return "sh-" + str(uuid.uuid5(_NAMESPACE, f"{key}/{step}"))


class OciProvider(SteppedOperations):
    """Core Services client (oci SDK) for reboot / power_cycle / rebuild / migrate."""

    name = "oci"

    def __init__(self, *, config: Mapping[str, Any], signer: Any,
                 endpoint: str | None = None, instances: Mapping[str, str] | None = None,
                 compartment_id: str | None = None, image: str | None = None,
                 preserve_boot_volume: bool = False, delete_local_storage: bool = False,
                 migrate_relaunch: bool = False, compute_cluster_id: str | None = None,
                 slurm: SlurmClient | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 30.0,
                 deadline: float = 60.0, attempts: int = 4, backoff: float = 0.5,
                 actions: frozenset[Action] = OCI_ACTIONS,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time):
        import oci  # lazy: the node side never needs it

        self.instances = dict(instances or {})
        self.compartment_id, self.image = compartment_id, image
        self.preserve_boot_volume = preserve_boot_volume
        self.delete_local_storage = delete_local_storage
        self.migrate_relaunch, self.compute_cluster_id = migrate_relaunch, compute_cluster_id
        self.slurm, self.actions = slurm, actions
        self.deadline, self.attempts, self.backoff = deadline, max(1, attempts), backoff
        self._sleep, self._clock = sleep, clock
        self._config, self._signer = dict(config), signer
        self._kwargs: dict[str, Any] = {
            "retry_strategy": oci.retry.NoneRetryStrategy(),
            "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
            "timeout": (connect_timeout, read_timeout)}
        if endpoint:
            self._kwargs["service_endpoint"] = endpoint.rstrip("/")
        self._clients: tuple[Any, Any, Any] | None = None
        self._lock = threading.Lock()
        self.records = KeyRecords(Path(state_dir) / "oci-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Nothing to release (the clients hold plain HTTP sessions)."""

    @property
    def _compute(self) -> Any:
        return self._made()[0]

    @property
    def _work(self) -> Any:
        return self._made()[1]

    @property
    def _network(self) -> Any:
        return self._made()[2]

    def _made(self) -> tuple[Any, Any, Any]:
        """The SDK clients, made at the first call: an instance principal's signer asks
        the instance metadata service, which `policy check` off OCI must not wait for.
        ``signer`` may be such a factory (a callable without arguments)."""
        import oci

        with self._lock:
            if self._clients is None:
                signer = self._signer
                if callable(signer) and not hasattr(signer, "do_request_sign"):
                    try:
                        signer = signer()
                    except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds
                        raise ProviderError(f"oci: no instance principal: {exc}") from exc
                    self._config.setdefault("region", getattr(signer, "region", None))
                kwargs = dict(self._kwargs, signer=signer)
                self._clients = (oci.core.ComputeClient(dict(self._config), **kwargs),
                                 oci.work_requests.WorkRequestClient(dict(self._config),
                                                                     **kwargs),
                                 oci.core.VirtualNetworkClient(dict(self._config), **kwargs))
            return self._clients

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start ``action`` on the instance of ``node`` (retry tokens from ``key``)."""
        known = self._repeat(key, node, action)
        if known is not None:
            return known
        ocid = self.instance_id(node)
        inst = self._call(f"GetInstance {ocid}",
                          lambda: self._compute.get_instance(ocid).data, refusal=True)
        state = str(getattr(inst, "lifecycle_state", ""))
        if state in ("TERMINATING", "TERMINATED"):
            raise ProviderRefused(f"oci provider: {ocid} is {state}")
        image = ""
        if action == Action.MIGRATE and not getattr(inst, "time_maintenance_reboot_due", None):
            if self.migrate_relaunch:
                return self._begin(key, self._relaunch_record(node, inst))
            raise ProviderRefused(
                f"oci provider: OCI offers no reboot migration for {ocid} "
                f"({getattr(inst, 'shape', '?')}) now: it has no maintenance reboot due "
                "(timeMaintenanceRebootDue), and terminate-and-relaunch is off "
                "(migrate_relaunch; a new OCID, new local disks): rebuild it, turn "
                "migrate_relaunch on, or ask Oracle support to take the host out")
        if action == Action.REBUILD:
            source = getattr(inst, "source_details", None)
            image = self.image or str(getattr(source, "image_id", "") or
                                      getattr(inst, "image_id", "") or "")
            if not image:
                raise ProviderRefused(f"oci provider: {ocid} boots from a volume without an "
                                      "image to replace it from; set [provider] image")
        rec: dict[str, Any] = {"id": "oci-" + uuid.uuid4().hex[:12], "node": node,
                               "action": action.value, "instance": ocid,
                               "call": CALLS[action], "image": image, "sent": False,
                               "seen_busy": False, "work_request": "", "status": "running",
                               "detail": "",
                               "submitted": datetime.now(timezone.utc).isoformat()}
        return self._begin(key, rec)

    def _relaunch_record(self, node: str, inst: Any) -> dict[str, Any]:
        """The record of a terminate-and-relaunch, its LaunchInstance body read now
        (ProviderRefused, nothing sent, where something it needs cannot be read)."""
        return {"id": "oci-" + uuid.uuid4().hex[:12], "node": node,
                "action": Action.MIGRATE.value, "instance": str(inst.id),
                "call": _oci_relaunch.CALL, "phase": "terminate", "sent": False,
                "launch": _oci_relaunch.launch_body(self, inst), "new_instance": "",
                "preserve_boot_volume": self.preserve_boot_volume, "work_request": "",
                "status": "running", "detail": "",
                "submitted": datetime.now(timezone.utc).isoformat()}

    def instance_id(self, node: str) -> str:
        """The instance OCID of ``node`` (its machine identity, SPEC D11), followed past
        every relaunch recorded here."""
        found = self._mapped(node)
        with self.records.locked() as records:  # also after migrate_relaunch is off again
            return _oci_relaunch.replaced(records, found)

    def _mapped(self, node: str) -> str:
        if (found := slurm_instance_id(self.slurm, node)).startswith("ocid1.instance."):
            return found
        if node in self.instances:
            return self.instances[node]
        if self.compartment_id:
            compartment = self.compartment_id
            found_all = self._call(f"ListInstances {node}", lambda: [
                i for i in self._compute.list_instances(compartment, display_name=node).data
                if str(getattr(i, "lifecycle_state", "")) not in ("TERMINATED",
                                                                  "TERMINATING")])
            if len(found_all) == 1:
                return str(found_all[0].id)
            raise ProviderRefused(f"oci provider: expected exactly one instance named {node} "
                                  f"in {compartment}, found {len(found_all)}; map it in "
                                  "[provider] instances")
        raise ProviderRefused(f"oci provider: no instance OCID for {node}: Slurm has no "
                              "InstanceId for it; map it in [provider] instances or set "
                              "compartment_id")

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        try:
            if rec["call"] == _oci_relaunch.CALL:
                _oci_relaunch.advance(self, key, rec, retry_token(key, "LaunchInstance"))
            elif not rec["sent"]:
                self._send(key, rec)
            if rec["status"] == "running" and rec["sent"] and \
                    rec["call"] != _oci_relaunch.CALL:
                self._poll(rec)
        except ProviderRefused as exc:
            rec.update(status="failed", detail=str(exc))
        except ProviderError:
            self.records.put(key, rec)
            raise
        self.records.put(key, rec)
        return operation(key, rec)

    def _send(self, key: str, rec: dict[str, Any]) -> None:
        """Send the recorded call under its retry token (safe to repeat: OCI answers a
        repeat with the first answer)."""
        import oci

        ocid, call = str(rec["instance"]), str(rec["call"])
        token = retry_token(key, call)
        if call == "replaceBootVolume":
            details = oci.core.models.UpdateInstanceDetails(
                source_details=oci.core.models.UpdateInstanceSourceViaImageDetails(
                    source_type="image", image_id=str(rec["image"]),
                    is_preserve_boot_volume_enabled=self.preserve_boot_volume))
            response = self._call(f"UpdateInstance (boot volume) {ocid}",
                                  lambda: self._compute.update_instance(
                                      ocid, details, opc_retry_token=token))
            work = str(response.headers.get("opc-work-request-id") or "")
            if not work:
                raise ProviderError(f"oci: UpdateInstance {ocid}: no opc-work-request-id in "
                                    "the answer")
            rec.update(sent=True, work_request=work,
                       detail=f"oci boot volume replacement of {ocid} from {rec['image']} "
                              f"accepted (work request {work})")
            return
        extra: dict[str, Any] = {}
        if call == "REBOOTMIGRATE":
            extra["instance_power_action_details"] = \
                oci.core.models.RebootMigrateActionDetails(
                    action_type="rebootMigrate",
                    delete_local_storage=self.delete_local_storage)
        response = self._call(f"InstanceAction {call} {ocid}",
                              lambda: self._compute.instance_action(
                                  ocid, call, opc_retry_token=token, **extra))
        state = str(getattr(response.data, "lifecycle_state", ""))
        rec.update(sent=True, seen_busy=state not in ("RUNNING", ""), sent_at=self._clock(),
                   detail=f"oci {call} of {ocid} accepted ({state})")

    def _poll(self, rec: dict[str, Any]) -> None:
        ocid = str(rec["instance"])
        if rec["work_request"]:
            work = self._call(f"GetWorkRequest {rec['work_request']}",
                              lambda: self._work.get_work_request(rec["work_request"]).data)
            status = str(getattr(work, "status", ""))
            where = f"oci boot volume replacement of {ocid} (work request {rec['work_request']})"
            if status == "SUCCEEDED":
                rec.update(status="succeeded", detail=f"{where} succeeded")
            elif status in ("FAILED", "CANCELED"):
                rec.update(status="failed", detail=f"{where} {status}")
            else:
                rec["detail"] = f"{where} is {status} ({getattr(work, 'percent_complete', '?')}%)"
            return
        inst = self._call(f"GetInstance {ocid}", lambda: self._compute.get_instance(ocid).data)
        state = str(getattr(inst, "lifecycle_state", ""))
        if state != "RUNNING":
            rec["seen_busy"] = True
        if state in ("TERMINATING", "TERMINATED"):
            rec.update(status="failed", detail=f"oci: {ocid} is {state}")
        elif state == "RUNNING" and rec["seen_busy"]:
            rec.update(status="succeeded", detail=f"oci {rec['call']} of {ocid} done: "
                                                  "RUNNING again")
        elif state == "RUNNING" and \
                self._clock() - float(rec.get("sent_at", 0.0)) >= UNSEEN_WAIT:
            rec.update(status="succeeded", detail=f"oci {rec['call']} of {ocid} accepted; "
                       f"the instance was RUNNING at every look for {UNSEEN_WAIT:g}s (the "
                       "reset fell between two looks)")
        else:
            rec["detail"] = f"oci {rec['call']} of {ocid}: the instance is {state}"

    # --- calls ------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T], *, refusal: bool = False) -> T:
        """One SDK call, retried with backoff on 429, 5xx and lost connections within
        the deadline (safe: every write carries its retry token). A 4xx is
        ProviderRefused (nothing ran), 401 a ProviderError about the credentials."""
        return retrying(lambda d: self._try(what, fn, d), deadline=Deadline(self.deadline),
                        attempts=self.attempts, backoff=self.backoff, sleep=self._sleep,
                        give_up=lambda n, last: f"oci: {what}: gave up after {n} tries: "
                                                f"{last}")

    @staticmethod
    def _try(what: str, fn: Callable[[], T], deadline: Deadline) -> T:
        """One try of `_call`; a call still running at the deadline is not tried again."""
        left = deadline.left()
        if left <= 0:
            raise Spent
        call = call_within(fn, left, "oci-call")
        if not call.done:
            raise Retryable(f"no complete answer within the deadline of "
                            f"{deadline.seconds:g}s", timed_out=True, final=True)
        if call.error is not None:
            raise _classify(what, call.error) from call.error
        return cast(T, call.value)


def _classify(what: str, exc: BaseException) -> ProviderError:
    import oci

    prefix = f"oci: {what}"
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, oci.exceptions.ServiceError):
        status, code, message = int(exc.status or 0), str(exc.code), str(exc.message)[:300]
        text = f"{prefix}: HTTP {status} {code}: {message}"
        if status == 429 or status >= 500 or status == 0:
            headers = exc.headers or {}
            value = str(headers.get("retry-after") or headers.get("Retry-After") or "")
            return Retryable(text, retry_after=float(value)
                             if value.replace(".", "", 1).isdigit() else None)
        if status == 401:
            return ProviderError(f"{text} (OCI refused the credentials: check the API key "
                                 "or the instance principal's dynamic group)")
        return ProviderRefused(text)
    if isinstance(exc, (oci.exceptions.RequestException, oci.exceptions.ConnectTimeout,
                        OSError)):
        return Retryable(f"{prefix}: connection failed: {plain_reason(exc)}",
                         timed_out="timed out" in plain_reason(exc))
    if isinstance(exc, Exception):
        return ProviderError(f"{prefix}: {exc.__class__.__name__}: {str(exc)[:300]}")
    raise exc


