"""The `gcp` provider: Compute Engine through google-cloud-compute (SPEC L2, E4, S6).

Actions and the Compute Engine methods they use:

- reboot -> ``instances.reset`` (a hard reset; the VM keeps its host and local SSDs);
- migrate -> ``instances.reportHostAsFaulty`` (the platform's "this host is bad, move me",
  for GPU VMs; disruption IMMEDIATE), and where the platform refuses it for this VM,
  ``instances.stop`` then ``instances.start``;
- power_cycle -> ``instances.stop`` then ``instances.start``;
- rebuild -> ``instanceGroupManagers.recreateInstances`` (recreated from the managed
  instance group's template) when ``instance_group_manager`` is configured; refused
  otherwise.

Every mutating call carries a ``requestId`` derived from our idempotency key and the
step (a UUID, as the API wants): Compute Engine answers a repeat with the same operation,
so every call may be retried safely, and a lost answer is resolved by sending it again
(SPEC S6). Progress comes from ``zoneOperations.get``. Retries (429, 5xx, lost
connections) back off within the overall deadline.

node -> instance: the ``instances`` map (``name`` or ``zone/name``), else an instance named
like the node in the configured zone. Credentials: Application Default Credentials or a
service-account key file, never in our config file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from slurm_heal.errors import ProviderError, ProviderRefused, ProviderTimeout
from slurm_heal.providerconf import FAULT_BEHAVIORS as FAULT_BEHAVIORS
from slurm_heal.providerconf import GCP_ACTIONS as GCP_ACTIONS
from slurm_heal.providerconf import GcpSettings as GcpSettings
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action

_NAMESPACE = uuid.UUID("6f3c1a52-8d1e-4c3b-9a57-2f0e5d7c4b11")


def request_id(key: str, step: str) -> str:
    """The requestId for one step of the operation of ``key`` (stable across restarts)."""
    return str(uuid.uuid5(_NAMESPACE, f"{key}/{step}"))


class GcpProvider(SteppedOperations):
    """Compute Engine client for reboot / migrate / power_cycle / rebuild."""

    name = "gcp"

    def __init__(self, *, project: str, zone: str,
                 instances: Mapping[str, str] | None = None,
                 instance_group_manager: str | None = None,
                 fault_behavior: str = "UNRECOVERABLE_GPU_ERROR",
                 api_endpoint: str | None = None, credentials: Any = None,
                 credentials_file: str | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 read_timeout: float = 30.0, deadline: float = 90.0, backoff: float = 0.5,
                 actions: frozenset[Action] = GCP_ACTIONS):
        from google.cloud import compute_v1  # lazy: the node side never needs it

        self.project, self.zone = project, zone
        self.instances = dict(instances or {})
        self.group = instance_group_manager
        self.fault_behavior = fault_behavior
        self.read_timeout, self.deadline, self.backoff = read_timeout, deadline, backoff
        self.actions = actions
        if credentials is None and credentials_file is not None:
            from google.oauth2 import service_account

            credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                credentials_file, scopes=["https://www.googleapis.com/auth/compute"])
        options = {"api_endpoint": api_endpoint} if api_endpoint else None
        kwargs: dict[str, Any] = {"credentials": credentials, "transport": "rest",
                                  "client_options": options}
        self._instances = compute_v1.InstancesClient(**kwargs)
        self._operations = compute_v1.ZoneOperationsClient(**kwargs)
        self._groups = compute_v1.InstanceGroupManagersClient(**kwargs)
        self.records = KeyRecords(Path(state_dir) / "gcp-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Nothing to release (the clients hold plain HTTP sessions)."""

    def supports(self, action: Action) -> bool:
        """reboot, migrate, power_cycle; rebuild with an instance group manager."""
        if action == Action.REBUILD and self.group is None:
            return False
        return action in self.actions

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start ``action`` on the VM of ``node`` (requestIds from ``key``)."""
        if action == Action.REBUILD and self.group is None and action in self.actions:
            raise ProviderRefused("gcp provider: rebuild recreates the VM from its managed "
                                  "instance group's template; set [provider] "
                                  "instance_group_manager")
        known = self._repeat(key, node, action)
        if known is not None:
            return known
        zone, instance = self._instance(node)
        steps = {Action.REBOOT: ["reset"], Action.MIGRATE: ["reportHostAsFaulty"],
                 Action.POWER_CYCLE: ["stop", "start"], Action.REBUILD: ["recreate"]}[action]
        rec: dict[str, Any] = {"id": "gce-" + uuid.uuid4().hex[:12], "node": node,
                               "action": action.value, "zone": zone, "instance": instance,
                               "steps": steps, "step": 0, "operation": "",
                               "status": "running", "detail": "",
                               "submitted": datetime.now(timezone.utc).isoformat()}
        return self._begin(key, rec)

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        try:
            while rec["status"] == "running":
                step = rec["steps"][rec["step"]]
                if not rec["operation"]:
                    # Never sent, or its answer was lost: the same requestId is safe.
                    try:
                        rec["operation"] = self._send(key, rec, step)
                    except ProviderRefused as exc:
                        if step != "reportHostAsFaulty":
                            raise
                        # Not available for this VM: move it by stopping and starting.
                        rec.update(steps=["stop", "start"], step=0,
                                   note=f"reportHostAsFaulty refused ({exc}); by stop and "
                                        "start instead: ")
                        continue
                state, error = self._operation(rec)
                where = f"{rec.get('note', '')}gce {step} of {rec['zone']}/{rec['instance']}"
                if state != "DONE":
                    rec["detail"] = f"{where}: operation {rec['operation']} is {state}"
                    break
                if error:
                    rec.update(status="failed", detail=f"{where} failed: {error}")
                    break
                if rec["step"] + 1 < len(rec["steps"]):
                    rec.update(step=rec["step"] + 1, operation="")
                    continue
                rec.update(status="succeeded",
                           detail=f"{rec.get('note', '')}gce {' then '.join(rec['steps'])} of "
                                  f"{rec['instance']} "
                                  f"done (operation {rec['operation']})")
        except ProviderRefused as exc:
            rec.update(status="failed", detail=str(exc))
        except ProviderError:
            self.records.put(key, rec)
            raise
        self.records.put(key, rec)
        return operation(key, rec)

    def _send(self, key: str, rec: dict[str, Any], step: str) -> str:
        from google.cloud import compute_v1

        common = {"project": self.project, "zone": rec["zone"],
                  "request_id": request_id(key, f"{rec['step']}:{step}")}
        inst = rec["instance"]
        if step == "reset":
            op = self._call(self._instances.reset, compute_v1.ResetInstanceRequest(
                instance=inst, **common))
        elif step == "stop":
            op = self._call(self._instances.stop, compute_v1.StopInstanceRequest(
                instance=inst, **common))
        elif step == "start":
            op = self._call(self._instances.start, compute_v1.StartInstanceRequest(
                instance=inst, **common))
        elif step == "reportHostAsFaulty":
            body = compute_v1.InstancesReportHostAsFaultyRequest(
                disruption_schedule="IMMEDIATE",
                fault_reasons=[compute_v1.InstancesReportHostAsFaultyRequestFaultReason(
                    behavior=self.fault_behavior,
                    description=f"slurm-heal: {rec['node']} failed its health check")])
            op = self._call(self._instances.report_host_as_faulty,
                            compute_v1.ReportHostAsFaultyInstanceRequest(
                                instance=inst,
                                instances_report_host_as_faulty_request_resource=body,
                                **common))
        elif step == "recreate":
            url = f"projects/{self.project}/zones/{rec['zone']}/instances/{inst}"
            op = self._call(self._groups.recreate_instances,
                            compute_v1.RecreateInstancesInstanceGroupManagerRequest(
                                instance_group_manager=self.group,
                                instance_group_managers_recreate_instances_request_resource=(
                                    compute_v1.InstanceGroupManagersRecreateInstancesRequest(
                                        instances=[url])),
                                **common))
        else:
            raise ProviderRefused(f"unknown step {step!r} in the record")
        name = getattr(op, "name", "")
        if not isinstance(name, str) or not name:
            raise ProviderError(f"gce {step}: malformed answer without an operation name")
        return name

    def _operation(self, rec: dict[str, Any]) -> tuple[str, str]:
        from google.cloud import compute_v1

        op = self._call(self._operations.get, compute_v1.GetZoneOperationRequest(
            project=self.project, zone=rec["zone"], operation=rec["operation"]))
        status = op.status
        state = str(getattr(status, "name", status))
        error = ""
        if op.error and op.error.errors:
            error = "; ".join(f"{e.code}: {e.message}" for e in op.error.errors)
        elif op.http_error_message:
            error = op.http_error_message
        return state, error

    def _call(self, method: Any, request: Any) -> Any:
        """One API call, retried with backoff on 429/5xx/lost connections until the
        deadline (safe: every mutating call carries its requestId)."""
        import requests
        from google.api_core import exceptions as gx
        from google.api_core import retry as gr

        transient = (gx.TooManyRequests, gx.ServiceUnavailable, gx.InternalServerError,
                     gx.BadGateway, gx.GatewayTimeout, requests.ConnectionError,
                     requests.Timeout)
        policy = gr.Retry(predicate=gr.if_exception_type(*transient), initial=self.backoff,
                          maximum=30.0, multiplier=2.0, timeout=self.deadline)
        try:
            return method(request=request, retry=policy, timeout=self.read_timeout)
        except gx.RetryError as exc:
            raise ProviderTimeout(f"gce: gave up after {self.deadline:g}s: "
                                  f"{exc.cause or exc}") from exc
        except (gx.Unauthenticated, gx.PermissionDenied) as exc:
            raise ProviderError(f"gce: {exc.message} (check the service account's roles, "
                                "docs/providers.md)") from exc
        except gx.GoogleAPICallError as exc:
            code = int(exc.code or 0)
            if 400 <= code < 500:
                raise ProviderRefused(f"gce: HTTP {code}: {exc.message}") from exc
            raise ProviderError(f"gce: HTTP {code}: {exc.message}") from exc
        except transient as exc:
            raise ProviderError(f"gce: {exc}") from exc
        except Exception as exc:
            from google.auth import exceptions as ga

            if isinstance(exc, ga.DefaultCredentialsError):
                raise ProviderError(f"gce: no credentials: {exc}") from exc
            raise

    def _instance(self, node: str) -> tuple[str, str]:
        target = self.instances.get(node, node)
        zone, _, name = target.rpartition("/")
        return (zone or self.zone), name



