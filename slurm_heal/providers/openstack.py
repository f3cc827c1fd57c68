"""The `openstack` provider: Nova server actions through openstacksdk (SPEC L2, S6).

- auth: openstacksdk's Connection (keystoneauth): Keystone v3 password with project scope,
  or a Keystone application credential; both also from a clouds.yaml entry. The compute
  endpoint comes from the token's catalog (the configured interface and region) unless
  ``compute_url`` is set; keystoneauth reads Nova's version document there and the SDK
  negotiates each call's compute microversion against it. An expired token is renewed by
  keystoneauth on a 401.
- actions, each one call of the SDK's compute proxy:
  reboot -> ``reboot_server(server, "HARD")`` (``reboot = "hard"``, the default), or
  ``"SOFT"`` first (``reboot = "soft"``) and ``"HARD"`` when the server is still
  rebooting after ``soft_reboot_timeout``; rebuild -> ``rebuild_server(server, image)``
  from the server's own image (``image`` overrides it; a server booted from a volume has
  none: refused); migrate -> ``migrate_server`` (cold), confirmed with
  ``confirm_server_resize`` once the server reaches ``VERIFY_RESIZE``, or with
  ``live = true`` ``live_migrate_server(host=None, block_migration="auto")``, which the
  SDK sends at compute microversion 2.30 (2.25 on an older Nova; below that it is
  refused). power_cycle is refused.
- node -> server id: the configured ``servers`` map, else ``servers(name="^NODE$")``
  (exactly one match required).
- idempotency (SPEC S6): Nova has no idempotency key, so every key is recorded locally
  (``SteppedOperations``) *before* anything is posted, and a recorded key is never posted
  again. Each action carries a global request id derived from the key
  (``X-OpenStack-Request-ID: req-UUID``), which Nova logs with the action: an operator
  can find the Nova side of a remediation, and the simulator counts executions by it.

Timeouts and retries are ours, not the SDK's: the Connection is made with
``connect_retries = 0``, ``status_code_retries = 0`` and ``api_timeout = read_timeout``,
because keystoneauth retries a connection failure of any request, a POST included (an
action whose answer was lost would run twice), and its per-request timeout is per socket
read (a server that trickles its answer holds it as long as it likes). Each SDK call
runs in a worker thread the caller waits for at most ``call_timeout`` (retries included).
Reads and auth are retried on connection errors, timeouts, 429 and 5xx with backoff
(``Retry-After`` honoured); an action POST is retried only when it certainly did not run
(429, 503, connection refused, connect timeout). Another 4xx is a refusal (nothing ran:
the operation fails); a lost answer or another 5xx is an unknown outcome: the operation
stays running and ``status`` asks the server what happened, never posting again.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providerconf import OpenStackSettings as OpenStackSettings
from slurm_heal.providers._records import KeyRecords, SteppedOperations, operation
from slurm_heal.providers._transport import (
    Deadline,
    Retryable,
    plain_reason,
    retrying,
    try_within,
)
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action

OPENSTACK_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE})
REBOOT_MODES = ("hard", "soft")
LIVE_MIGRATE_MICROVERSION = "2.25"  # block_migration "auto" and host null
# The request ids Nova accepts as a global request id (others it ignores).
_NAMESPACE = uuid.UUID("6f1c3d57-4f0e-4f7e-9a55-2f1c0de5a1e0")
T = TypeVar("T")


def nova_request_id(key: str, call: str = "") -> str:
    """The global request id sent with the action of idempotency key ``key`` (and its
    follow-up ``call``: "hard", "confirm"): ``req-`` + a UUID derived from them."""
    return "req-" + str(uuid.uuid5(_NAMESPACE, key + (f"#{call}" if call else "")))


class _Refused(ProviderError):
    """Nova answered with a refusal (4xx): nothing ran."""


class _Unknown(ProviderError):
    """The request may have reached Nova and its answer was lost."""


class OpenStackProvider(SteppedOperations):
    """Nova client (openstacksdk) for reboot / rebuild / migrate."""

    name = "openstack"
    actions = OPENSTACK_ACTIONS  # reboot, rebuild (from the server's image), migrate

    def __init__(self, *, auth_url: str, username: str = "", password: str = "",
                 project_name: str = "", user_domain: str = "Default",
                 project_domain: str = "Default", compute_url: str | None = None,
                 interface: str = "public", region: str | None = None,
                 image: str | None = None, live: bool = False, reboot: str = "hard",
                 soft_reboot_timeout: float = 300.0,
                 servers: Mapping[str, str] | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 read_timeout: float = 15.0, attempts: int = 4, backoff: float = 0.5,
                 call_timeout: float = 60.0, verify: bool | str = True,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time,
                 application_credential_id: str | None = None,
                 application_credential_secret: str | None = None):
        if reboot not in REBOOT_MODES:
            raise ValueError(f"reboot must be one of {', '.join(REBOOT_MODES)}, not {reboot!r}")
        # Keystone application credentials (scoped by Keystone itself) or user + password
        self.app_credential = (application_credential_id, application_credential_secret) \
            if application_credential_id else None
        self.auth_url = auth_url.rstrip("/")
        self.username, self.password = username, password
        self.project_name = project_name
        self.user_domain, self.project_domain = user_domain, project_domain
        self.compute_url = compute_url.rstrip("/") if compute_url else None
        self.interface, self.region = interface, region
        self.image, self.live = image, live
        self.reboot, self.soft_reboot_timeout = reboot, soft_reboot_timeout
        self.servers = dict(servers or {})
        self.read_timeout, self.verify = read_timeout, verify
        self.attempts, self.backoff = max(1, attempts), backoff
        self.call_timeout = call_timeout
        self._sleep, self._clock = sleep, clock
        self._conn: Any = None
        self._conn_lock = threading.Lock()
        self.records = KeyRecords(Path(state_dir) / "openstack-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Close the SDK connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- the protocol -------------------------------------------------------------------
    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Start the Nova action for ``node`` once per ``key``."""
        known = self._repeat(key, node, action)
        if known is not None:
            return known
        server = self._server_id(node)
        image = ""
        if action == Action.REBOOT:
            call = "reboot:SOFT" if self.reboot == "soft" else "reboot:HARD"
        elif action == Action.REBUILD:
            call, image = "rebuild", self.image or self._server_image(node, server)
        else:
            call = "live-migrate" if self.live else "migrate"
        rec: dict[str, Any] = {"id": "nova-" + uuid.uuid4().hex[:12], "node": node,
                               "server": server, "action": action.value, "call": call,
                               "image": image, "sent": False, "sent_at": 0.0,
                               "unknown": False, "status": "running", "detail": "",
                               "submitted": datetime.now(timezone.utc).isoformat()}
        return self._begin(key, rec)  # intent first: never posted twice for a key

    # --- the steps ----------------------------------------------------------------------
    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        try:
            if not rec["sent"]:
                self._post(key, rec)
            else:
                self._poll(key, rec)
        except ProviderError:
            self.records.put(key, rec)
            raise
        self.records.put(key, rec)
        return operation(key, rec)

    def _post(self, key: str, rec: dict[str, Any]) -> None:
        """Send the recorded call once; a refusal fails the operation, a lost answer
        leaves it to `_poll`. Raises (record unchanged: not sent) when it never ran."""
        server, call = str(rec["server"]), str(rec["call"])
        rid = nova_request_id(key, "hard" if call == "reboot:HARD" and
                              rec.get("escalated") else "")
        try:
            self._act(f"{call} of {rec['node']}", rid, lambda c: self._send_call(c, rec))
        except _Refused as exc:
            rec.update(status="failed", detail=str(exc))
            return
        except _Unknown as exc:
            rec.update(sent=True, unknown=True, sent_at=self._clock(),
                       detail=f"{exc}; whether it ran is unknown: polling the server, "
                              "never posting again (SPEC S6)")
            return
        rec.update(sent=True, sent_at=self._clock(),
                   detail=f"nova {call} of server {server} accepted ({rid})")

    def _send_call(self, conn: Any, rec: dict[str, Any]) -> None:
        compute, server, call = conn.compute, str(rec["server"]), str(rec["call"])
        if call.startswith("reboot:"):
            compute.reboot_server(server, call.split(":", 1)[1])
        elif call == "rebuild":
            compute.rebuild_server(server, str(rec["image"]))
        elif call == "live-migrate":
            # The SDK picks compute microversion 2.30 (2.25 on an older Nova) for
            # block_migration "auto"; below 2.25 it raises ValueError before sending,
            # which must read as a refusal, not as an unknown outcome.
            from openstack import utils

            if not utils.supports_microversion(compute, LIVE_MIGRATE_MICROVERSION):
                raise _Refused(f"nova: live migration with block_migration \"auto\" needs "
                               f"compute microversion {LIVE_MIGRATE_MICROVERSION}, which "
                               "this Nova does not offer; set live = false")
            compute.live_migrate_server(server, host=None, force=False,
                                        block_migration="auto")
        else:
            compute.migrate_server(server)

    def _poll(self, key: str, rec: dict[str, Any]) -> None:
        server_id, node = str(rec["server"]), str(rec["node"])
        server = self._read(f"GET server {server_id}",
                            lambda c: c.compute.get_server(server_id))
        status, task = getattr(server, "status", None), getattr(server, "task_state", None)
        if not isinstance(status, str):
            raise ProviderError(f"nova: malformed server answer for {server_id}: "
                                f"{str(getattr(server, 'to_dict', lambda: server)())[:200]}")
        updated = getattr(server, "updated_at", None)
        if status != "ACTIVE" or task is not None:
            rec["seen_busy"] = True
        # The server must have changed since the submit, or an ACTIVE server simply has
        # not started the action yet. Nova's "updated" has whole seconds: the submit's
        # own second counts, except after a lost answer, where only a server seen busy
        # or updated in a later second proves the action ran.
        submitted = str(rec["submitted"])[:19]
        stamp = updated[:19] if isinstance(updated, str) else None
        if rec.get("unknown"):
            fresh = bool(rec.get("seen_busy")) or (stamp is not None and stamp > submitted)
        else:
            fresh = stamp is None or stamp >= submitted
        if status == "VERIFY_RESIZE" and rec["action"] == Action.MIGRATE.value:
            # A cold migration stops here on a real Nova until it is confirmed.
            self._confirm_resize(key, rec)
        elif status == "ERROR":
            rec.update(status="failed", detail=f"nova: server {server_id} is in ERROR")
        elif status == "ACTIVE" and task is None and fresh:
            rec.update(status="succeeded",
                       detail=f"nova: server {server_id} ACTIVE after {rec['call']}"
                              + (" (confirmResize)" if rec.get("confirmed") else ""))
        elif (rec["call"] == "reboot:SOFT" and status == "REBOOT"
              and self._clock() - float(rec["sent_at"]) >= self.soft_reboot_timeout):
            # The guest ignored the ACPI signal: Nova lets a HARD reboot supersede it.
            # Recorded before it is sent, so it is sent at most once (SPEC S6).
            rec.update(call="reboot:HARD", sent=False, unknown=False, escalated=True,
                       detail=f"nova: soft reboot of {node} still running after "
                              f"{self.soft_reboot_timeout:g}s; rebooting hard")
            self.records.put(key, rec)
            self._post(key, rec)
        elif rec.get("unknown"):
            rec["detail"] = (f"nova: server {server_id} is {status} (task {task}); the "
                             f"answer to {rec['call']} was lost, waiting for the server")

    def _confirm_resize(self, key: str, rec: dict[str, Any]) -> None:
        """confirmResize for a migrated server in VERIFY_RESIZE. Safe to repeat after a
        lost answer: a confirmed server answers 409, which is taken as done."""
        server = str(rec["server"])
        try:
            self._act(f"confirmResize of {server}", nova_request_id(key, "confirm"),
                      lambda c: c.compute.confirm_server_resize(server))
        except _Refused as exc:
            if "HTTP 409" not in str(exc):
                rec["detail"] = f"nova: confirmResize of {server}: {exc}; again later"
                return
        except (_Unknown, Retryable) as exc:
            rec["detail"] = f"nova: confirmResize of {server}: {exc}; again later"
            return
        rec["detail"] = f"nova: migration of {server} confirmed (confirmResize)"
        rec["confirmed"] = True

    # --- helpers ------------------------------------------------------------------------
    def _server_id(self, node: str) -> str:
        if node in self.servers:
            return self.servers[node]
        pattern = "^" + re.escape(node) + "$"  # Nova's name filter is a regular expression
        found = self._read(f"GET servers named {node}",
                           lambda c: list(c.compute.servers(details=False, name=pattern)))
        ids = [getattr(s, "id", None) for s in found if getattr(s, "name", None) == node]
        if len(ids) != 1 or not isinstance(ids[0], str):
            raise ProviderError(f"nova: expected exactly one server named {node!r}, found "
                                f"{len(ids)}; map it in [provider] servers")
        return ids[0]

    def _server_image(self, node: str, server_id: str) -> str:
        server = self._read(f"GET server {server_id}",
                            lambda c: c.compute.get_server(server_id))
        image = getattr(server, "image", None)
        image_id = image.get("id") if isinstance(image, Mapping) else \
            getattr(image, "id", None)
        if not image_id:
            raise ProviderRefused(f"openstack: server {server_id} of {node} boots from a "
                                  "volume and has no image to rebuild from; set [provider] "
                                  "image")
        return str(image_id)

    def _connection(self) -> Any:
        with self._conn_lock:
            if self._conn is None:
                self._conn = self._connect()
            return self._conn

    def _connect(self) -> Any:
        import warnings

        from openstack import connection

        from slurm_heal import __version__

        if self.app_credential is not None:
            cred_id, secret = self.app_credential
            auth_type = "v3applicationcredential"
            auth: dict[str, Any] = {"auth_url": self.auth_url,
                                    "application_credential_id": cred_id,
                                    "application_credential_secret": secret or ""}
        else:
            auth_type = "password"
            auth = {"auth_url": self.auth_url, "username": self.username,
                    "password": self.password, "project_name": self.project_name,
                    "user_domain_name": self.user_domain,
                    "project_domain_name": self.project_domain}
        extra: dict[str, Any] = {}
        if self.compute_url:
            extra["compute_endpoint_override"] = self.compute_url
        with warnings.catch_warnings():  # the SDK warns about optional metrics backends
            warnings.simplefilter("ignore")
            return connection.Connection(
                auth_type=auth_type, auth=auth, interface=self.interface,
                region_name=self.region, verify=self.verify, app_name="slurm-heal",
                app_version=__version__,
                # Ours, not keystoneauth's: see the module docstring.
                connect_retries=0, status_code_retries=0, api_timeout=self.read_timeout,
                **extra)

    def _read(self, what: str, fn: Callable[[Any], T]) -> T:
        """A read (or the auth and discovery it needs): retried on anything transient."""
        try:
            return self._retrying(
                lambda d: self._call(what, lambda: fn(self._connection()), d, read=True),
                Deadline(self.call_timeout), f"{what}: gave up")
        except _Refused as exc:
            raise ProviderError(str(exc)) from None

    def _act(self, what: str, request_id: str, fn: Callable[[Any], None]) -> None:
        """An action POST with global request id ``request_id``: retried only while it
        certainly did not run; raises _Refused, _Unknown, or ProviderError (never ran)."""
        deadline = Deadline(self.call_timeout)
        # Authenticate and discover first (reads, retried), so that the POST's own
        # failures are about the POST.
        self._read("authenticate", lambda c: c.compute.get_endpoint_data())
        self._retrying(lambda d: self._call(
            what, lambda: fn(self._connection().global_request(request_id)), d, read=False),
            deadline, f"{what}: not sent")

    def _retrying(self, once: Callable[[Deadline], T], deadline: Deadline,
                  gave_up: str) -> T:
        """`retrying` with this provider's tries, back-off and sleep."""
        return retrying(once, deadline=deadline, attempts=self.attempts,
                        backoff=self.backoff, sleep=self._sleep,
                        give_up=lambda n, last: f"openstack: {gave_up} after {n} tries: "
                                                f"{last}")

    def _call(self, what: str, fn: Callable[[], T], deadline: Deadline, *, read: bool) -> T:
        """Run one SDK call in a worker thread, waiting at most until ``deadline``, and
        map what it raised onto _Refused / Retryable / _Unknown / ProviderError."""
        return try_within(fn, deadline, who="openstack", what=what, read=read,
                          unknown=_Unknown, on_timeout=self._drop_connection,
                          classify=lambda exc: _classify(what, exc, read=read))

    def _drop_connection(self) -> None:
        """After a call that did not end in time: the worker keeps only its own thread
        until requests' read timeout ends it, and the connection it holds: keystoneauth's
        auth plugin locks while it fetches a token, so a trickled token answer would block
        every later call. The next call builds a fresh connection."""
        with self._conn_lock:
            self._conn = None


def _classify(what: str, exc: BaseException, *, read: bool) -> ProviderError:
    """What an exception from the SDK (or keystoneauth under it) means for us."""
    from keystoneauth1 import exceptions as ksa
    from openstack import exceptions as sdk

    prefix = f"openstack: {what}"
    if isinstance(exc, ProviderError):  # ours, raised in the call (before sending)
        return exc
    if isinstance(exc, RecursionError):
        if read:
            return ProviderError(f"{prefix}: the answer is nested too deeply")
        # Nova answered the action (and may have run it) with a body we cannot read.
        return _Unknown(f"{prefix}: the answer is nested too deeply")
    if isinstance(exc, (sdk.HttpException, ksa.HttpError)):
        code = int(getattr(exc, "status_code", None) or getattr(exc, "http_status", 0) or 0)
        message = _message(exc)
        if code in (429, 503) or (read and (code >= 500 or code == 408)):
            return Retryable(f"{prefix}: HTTP {code}: {message}",
                             retry_after=_retry_after(exc))
        if code == 401:
            return _Refused(f"{prefix}: HTTP 401 (Keystone refused the credentials): "
                            f"{message}")
        if 400 <= code < 500:
            return _Refused(f"{prefix}: HTTP {code}: {message}")
        return _Unknown(f"{prefix}: HTTP {code}: {message}")
    if isinstance(exc, ksa.DiscoveryFailure) and "HTTP 5" in str(exc):
        return Retryable(f"{prefix}: {exc}")
    if isinstance(exc, ksa.SSLError):
        return _Refused(f"{prefix}: TLS failed ({exc}); set [provider] verify to a CA bundle")
    if isinstance(exc, ksa.ConnectTimeout):
        return Retryable(f"{prefix}: connect timed out: {plain_reason(exc)}", timed_out=True)
    if isinstance(exc, ksa.ConnectFailure) and (read or _never_sent(exc)):
        return Retryable(f"{prefix}: connection failed: {plain_reason(exc)}")
    if isinstance(exc, ksa.ConnectionError):
        # A reset or a read timeout after the request went out.
        if read:
            return Retryable(f"{prefix}: {exc}", timed_out="imed out" in str(exc))
        return _Unknown(f"{prefix}: no answer ({exc})")
    if isinstance(exc, (ksa.EndpointNotFound, sdk.EndpointNotFound)):
        return _Refused(f"{prefix}: no compute endpoint ({exc}); check interface and "
                        "region, or set [provider] compute_url")
    if isinstance(exc, (ksa.ClientException, sdk.SDKException, ValueError, KeyError,
                        TypeError, AttributeError)):
        # An answer that is not what Nova or Keystone sends (not JSON, the wrong shape).
        if read:
            return ProviderError(f"{prefix}: unexpected answer: "
                                 f"{exc.__class__.__name__}: {str(exc)[:300]}")
        return _Unknown(f"{prefix}: unexpected answer: {exc.__class__.__name__}: "
                        f"{str(exc)[:300]}")
    if isinstance(exc, Exception):
        text = f"{prefix}: {exc.__class__.__name__}: {str(exc)[:300]}"
        return ProviderError(text) if read else _Unknown(text)
    raise exc  # KeyboardInterrupt, SystemExit: not ours to turn into an error


def _message(exc: BaseException) -> str:
    details = getattr(exc, "details", None) or getattr(exc, "message", None) or str(exc)
    return str(details).strip()[:300]


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    value = str(headers.get("Retry-After", "") or getattr(exc, "retry_after", "") or "")
    return float(value) if value.replace(".", "", 1).isdigit() else None


def _never_sent(exc: BaseException) -> bool:
    """A connection refused / name not resolved: the request never reached Nova."""
    text = repr(exc)
    return any(s in text for s in ("NewConnectionError", "Connection refused",
                                   "Name or service not known", "NameResolutionError"))

