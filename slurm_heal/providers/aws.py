"""The `aws` provider: EC2 through boto3 (SPEC L2, E4, S6).

Actions and the EC2 operations they use:

- reboot -> ``RebootInstances`` (the instance keeps its host and its instance store);
- power_cycle -> ``StopInstances(Force=True)`` then ``StartInstances`` once stopped;
- migrate -> ``StopInstances`` then ``StartInstances``: an EBS-backed instance starts on
  other hardware. An instance-store-backed instance cannot be stopped: refused;
- rebuild -> ``CreateReplaceRootVolumeTask`` from the instance's launch image (or the
  configured ``image``), the old root volume deleted; progress from
  ``DescribeReplaceRootVolumeTasks``.

node -> instance id: Slurm's ``InstanceId`` (23.11+) where set, else the ``instances``
map of the config. Credentials come the boto3 way (environment, shared profile, instance
role, SSO), never from our config file.

Idempotency (SPEC S6): only ``CreateReplaceRootVolumeTask`` takes a ``ClientToken``
(derived from our key, so re-sending it returns the same task). Reboot, stop and start
have none, so every key is recorded locally before the call (like the openstack
provider), and such a call is never sent again blindly: when its answer is lost, `status`
first asks EC2 for the instance state and only re-sends a stop/start the state shows did
not happen; a reboot whose answer was lost is reported failed, never repeated.

Every call has connect/read timeouts, an overall deadline and a bounded number of tries
with backoff; throttling (``RequestLimitExceeded`` and friends) and connections that were
never made are retried, a definite "no" (4xx) is ProviderRefused, a lost answer to an
action is an unknown outcome (never retried by botocore: the action client has retries
off).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providerconf import AWS_ACTIONS as AWS_ACTIONS
from slurm_heal.providerconf import AwsSettings as AwsSettings
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers._transport import Deadline, Retryable, retrying
from slurm_heal.providers.base import Operation, slurm_instance_id
from slurm_heal.types import Action

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

# Answers that mean "not now, ask again later": nothing ran.
THROTTLING = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "EC2ThrottledException",
    "SlowDown", "PriorRequestNotComplete"})
# StartInstances may be refused for lack of capacity of a GPU type: retried on the next
# poll, not a failure of the remediation.
CAPACITY = frozenset({"InsufficientInstanceCapacity", "InsufficientHostCapacity",
                      "InsufficientCapacity", "InsufficientReservedInstanceCapacity"})
# ClientToken: at most 64 ASCII characters.
_TOKEN_MAX = 64


def client_token(key: str) -> str:
    """The EC2 ClientToken for idempotency key ``key`` (the key itself when it fits)."""
    if len(key) <= _TOKEN_MAX and key.isascii() and key.isprintable():
        return key
    return "sh-" + hashlib.sha256(key.encode()).hexdigest()[:_TOKEN_MAX - 3]


class _Unknown(ProviderError):
    """The call was sent and its answer lost: it may or may not have run."""


class _Capacity(ProviderError):
    """EC2 has no capacity for the instance type right now."""


class AwsProvider(SteppedOperations):
    """EC2 client for reboot / rebuild / migrate / power_cycle."""

    name = "aws"

    def __init__(self, *, region: str | None = None, profile: str | None = None,
                 endpoint_url: str | None = None,
                 instances: Mapping[str, str] | None = None,
                 slurm: SlurmClient | None = None, image: str | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 connect_timeout: float = 3.0, read_timeout: float = 15.0,
                 attempts: int = 4, deadline: float = 60.0, backoff: float = 0.5,
                 actions: frozenset[Action] = AWS_ACTIONS,
                 sleep: Callable[[float], None] = time.sleep):
        import boto3  # lazy: the node side never needs it
        from botocore.config import Config

        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self.instances = dict(instances or {})
        self.slurm, self.image, self.actions = slurm, image, actions
        self.attempts, self.deadline, self.backoff = attempts, deadline, backoff
        self._sleep = sleep
        session = boto3.session.Session(profile_name=profile, region_name=region)
        timeouts = {"connect_timeout": connect_timeout, "read_timeout": read_timeout,
                    "user_agent_extra": "slurm-heal"}
        # Reads (and ClientToken writes) may be retried by botocore; the standard mode
        # backs off on throttling and transient errors, a bounded number of times.
        self._reads = session.client("ec2", endpoint_url=endpoint_url, config=Config(
            retries={"mode": "standard", "total_max_attempts": attempts}, **timeouts))
        # Actions without a ClientToken: botocore must never re-send them on a lost
        # answer; our own loop retries only what certainly did not run.
        self._acts = session.client("ec2", endpoint_url=endpoint_url, config=Config(
            retries={"mode": "standard", "total_max_attempts": 1}, **timeouts))
        self.records = KeyRecords(Path(state_dir) / "aws-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Close the HTTP connections."""
        for client in (self._reads, self._acts):
            client.close()

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start ``action`` on the instance of ``node`` once per ``key``."""
        known = self._repeat(key, node, action)  # reboot, rebuild, migrate, power_cycle
        if known is not None:
            return known
        instance_id = self.instance_id(node)
        info = self._describe(instance_id)
        if action in (Action.MIGRATE, Action.POWER_CYCLE) and \
                info.get("RootDeviceType") == "instance-store":
            raise ProviderRefused(
                f"aws provider: {instance_id} ({info.get('InstanceType', '?')}) has an "
                f"instance-store root device: EC2 cannot stop it, so {action.value} (stop "
                "and start on other hardware) is impossible; reboot it or replace it")
        if info.get("State", {}).get("Name") in ("terminated", "shutting-down"):
            raise ProviderRefused(f"aws provider: {instance_id} is "
                                  f"{info['State']['Name']}")
        image = self.image or info.get("ImageId")
        if action == Action.REBUILD and not image:
            raise ProviderRefused(f"aws provider: {instance_id} has no launch image; set "
                                  "[provider] image")
        step = {Action.REBOOT: "reboot", Action.REBUILD: "replace"}.get(action, "stop")
        rec: dict[str, Any] = {"id": "ec2-" + uuid.uuid4().hex[:12], "node": node,
                               "instance": instance_id, "action": action.value,
                               "submitted": _now(), "status": "running", "step": step,
                               "image": image or "", "token": client_token(key),
                               "sent": False, "detail": ""}
        return self._begin(key, rec)

    def instance_id(self, node: str) -> str:
        """The EC2 instance id of ``node``: Slurm's InstanceId, else the config map."""
        if (found := slurm_instance_id(self.slurm, node)).startswith("i-"):
            return found
        if node in self.instances:
            return self.instances[node]
        raise ProviderRefused(f"aws provider: no instance id for {node}: Slurm has no "
                              f"InstanceId for it; map it in [provider] instances")

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        """Run or check the current step of ``rec``; record and return where it stands.

        ``sent`` says the step's action call went out; ``unknown`` that its answer was
        lost. A step not sent yet (or throttled until we gave up) is sent at the next poll.
        """
        iid, step = str(rec["instance"]), rec["step"]
        try:
            if step == "reboot":
                if rec.get("unknown"):
                    # EC2 shows no trace of a reboot: a lost answer is never resolved by
                    # sending it again (SPEC S6).
                    rec.update(status="failed", detail=(
                        f"RebootInstances for {iid}: the answer was lost, so whether it "
                        "rebooted is unknown; not sent again (SPEC S6)"))
                elif not rec.get("sent"):
                    self._act(rec, "RebootInstances", InstanceIds=[iid])
                    rec.update(status="succeeded",
                               detail=f"ec2 RebootInstances {iid} accepted")
            elif step == "replace":
                self._replace(rec)
            elif step == "stop":
                self._stop(rec)
            elif step == "start":
                self._start(rec)
            else:
                rec.update(status="failed", detail=f"unknown step {step!r} in the record")
        except _Unknown as exc:
            rec.update(sent=True, unknown=True,
                       detail=f"{exc}; asking EC2 before anything is sent again")
        except _Capacity as exc:
            rec.update(sent=False, detail=f"{exc}; trying again at the next poll")
        except ProviderRefused as exc:
            rec.update(status="failed", detail=str(exc))
        except ProviderError:
            # Throttled or unreachable until we gave up: nothing was sent; the next poll
            # sends it. The controller leaves the attempt in flight meanwhile.
            self._save(key, rec)
            raise
        return self._save(key, rec)

    def _stop(self, rec: dict[str, Any]) -> None:
        iid = str(rec["instance"])
        state = self._state(iid)
        if state == "stopped":
            rec.update(step="start", sent=False, unknown=False,
                       detail=f"{iid} stopped; starting it")
            self._start(rec)
            return
        if state in ("terminated", "shutting-down"):
            rec.update(status="failed", detail=f"{iid} is {state}")
            return
        if not rec.get("sent") or (rec.get("unknown") and state in ("running", "pending")):
            # EC2 shows no stop (asked first): sending it cannot stop the instance twice.
            force = rec["action"] == Action.POWER_CYCLE.value
            self._act(rec, "StopInstances", InstanceIds=[iid], Force=force)
            rec["detail"] = f"ec2 StopInstances {iid}{' (forced)' if force else ''} accepted"
            return
        rec["detail"] = f"{iid} is {state}; waiting for it to stop"

    def _start(self, rec: dict[str, Any]) -> None:
        iid = str(rec["instance"])
        state = self._state(iid)
        if state == "running":
            rec.update(status="succeeded", detail=f"ec2 {iid} running again after "
                                                  f"{rec['action']} (stop and start)")
        elif state == "stopped" and (not rec.get("sent") or rec.get("unknown")):
            # Not started yet, or a start whose answer was lost did not happen (asked first).
            self._act(rec, "StartInstances", InstanceIds=[iid])
            rec["detail"] = f"ec2 StartInstances {iid} accepted"
        elif state in ("terminated", "shutting-down"):
            rec.update(status="failed", detail=f"{iid} is {state}")
        else:
            rec["detail"] = f"{iid} is {state}; waiting for it to run"

    def _replace(self, rec: dict[str, Any]) -> None:
        iid = str(rec["instance"])
        task = rec.get("task")
        if not task:
            # The ClientToken makes a repeat return the same task: safe after a lost answer.
            body = self._read("CreateReplaceRootVolumeTask", InstanceId=iid,
                              ImageId=rec["image"], DeleteReplacedRootVolume=True,
                              ClientToken=rec["token"])
            task_info = body.get("ReplaceRootVolumeTask") or {}
            task = task_info.get("ReplaceRootVolumeTaskId")
            if not isinstance(task, str) or not task:
                raise ProviderError(f"ec2 CreateReplaceRootVolumeTask for {iid}: malformed "
                                    f"answer without a task id: {str(body)[:200]}")
            rec["task"] = task
        body = self._read("DescribeReplaceRootVolumeTasks", ReplaceRootVolumeTaskIds=[task])
        tasks = body.get("ReplaceRootVolumeTasks")
        if not isinstance(tasks, list) or not tasks or not isinstance(tasks[0], dict):
            raise ProviderError(f"ec2 DescribeReplaceRootVolumeTasks {task}: malformed "
                                f"answer: {str(body)[:200]}")
        state = tasks[0].get("TaskState")
        if state == "succeeded":
            rec.update(status="succeeded", detail=f"ec2 root volume of {iid} replaced from "
                                                  f"{rec['image']} (task {task})")
        elif state in ("failed", "failed-detached", "failing"):
            rec.update(status="failed", detail=f"ec2 replace-root-volume task {task} of "
                                               f"{iid} is {state}")
        else:
            rec["detail"] = f"ec2 replace-root-volume task {task} of {iid} is {state}"

    def _save(self, key: str, rec: dict[str, Any]) -> Operation:
        self.records.put(key, rec)
        return operation(key, rec)

    # --- EC2 calls ------------------------------------------------------------------------
    def _describe(self, instance_id: str) -> dict[str, Any]:
        body = self._read("DescribeInstances", InstanceIds=[instance_id])
        try:
            found: dict[str, Any] = body["Reservations"][0]["Instances"][0]
        except (KeyError, IndexError, TypeError):
            raise ProviderRefused(f"aws provider: EC2 has no instance {instance_id}") from None
        return found

    def _state(self, instance_id: str) -> str:
        state = self._describe(instance_id).get("State", {}).get("Name")
        if not isinstance(state, str):
            raise ProviderError(f"ec2 DescribeInstances {instance_id}: no state in the answer")
        return state

    def _read(self, op: str, **params: Any) -> dict[str, Any]:
        """A call that may be repeated (a read, or a write carrying a ClientToken)."""
        return self._call(self._reads, op, params, repeatable=True)

    def _act(self, rec: dict[str, Any], op: str, **params: Any) -> dict[str, Any]:
        """A call without an idempotency key: sent again only when it certainly did not
        run. Marks ``rec`` sent once EC2 answered."""
        body = self._call(self._acts, op, params, repeatable=False)
        rec.update(sent=True, unknown=False)
        return body

    def _call(self, client: Any, op: str, params: dict[str, Any], *,
              repeatable: bool) -> dict[str, Any]:
        method = getattr(client, _snake(op))
        # Repeatable calls are retried inside botocore (standard mode, same bound); ours
        # only where botocore must not: a call without a ClientToken. A pause longer than
        # the time left is cut to it.
        return retrying(lambda d: _try(op, method, params, repeatable=repeatable),
                        deadline=Deadline(self.deadline),
                        attempts=1 if repeatable else self.attempts, backoff=self.backoff,
                        sleep=self._sleep, shorten=True,
                        give_up=lambda n, last: f"{last}; gave up after {n} tries")


def _try(op: str, method: Callable[..., dict[str, Any]], params: dict[str, Any], *,
         repeatable: bool) -> dict[str, Any]:
    """One try of an EC2 call: Retryable where it certainly did not run (or may be
    repeated), _Unknown where an action's answer was lost."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    try:
        return method(**params)
    except NoCredentialsError as exc:
        raise ProviderError(f"aws provider: {exc} (credentials come from the "
                            "environment, a profile or the instance role)") from exc
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        message = f"ec2 {op}: {code}: {err.get('Message', '')}"
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if code in THROTTLING or status == 429:
            raise Retryable(message) from exc  # refused for now: nothing ran
        if code in CAPACITY:
            raise _Capacity(message) from exc
        if code.startswith(("AuthFailure", "UnauthorizedOperation",
                            "InvalidClientTokenId", "SignatureDoesNotMatch")):
            raise ProviderError(f"{message} (check the IAM policy, "
                                "docs/providers.md)") from exc
        if status >= 500 or status == 0:
            if not repeatable:
                raise _Unknown(message) from exc
            raise Retryable(message) from exc
        raise ProviderRefused(message) from exc  # a definite no: nothing ran
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        raise Retryable(f"ec2 {op}: {exc}",
                        timed_out=isinstance(exc, ConnectTimeoutError)) from exc
    except ReadTimeoutError as exc:
        if not repeatable:
            raise _Unknown(f"ec2 {op}: {exc}") from exc
        raise Retryable(f"ec2 {op}: {exc}", timed_out=True) from exc
    except BotoCoreError as exc:
        # A connection reset mid-answer, an answer we cannot parse: it was sent.
        if not repeatable:
            raise _Unknown(f"ec2 {op}: {exc}") from exc
        raise Retryable(f"ec2 {op}: {exc}") from exc


def _snake(op: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(op))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()

