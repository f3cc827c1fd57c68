"""The `openstack` provider: Nova server actions with Keystone v3 token auth.

- auth: ``POST {auth_url}/v3/auth/tokens`` (password method with project scope, or a
  Keystone application credential; both also from a clouds.yaml entry), token
  from the ``X-Subject-Token`` header; the compute endpoint from the token's catalog
  (type ``compute``, the configured interface) unless ``compute_url`` is set. A 401
  from Nova re-authenticates once.
- actions: reboot -> ``{"reboot": {"type": "HARD"}}``; rebuild ->
  ``{"rebuild": {"imageRef": image}}``; migrate -> ``{"migrate": null}``, confirmed
  with ``{"confirmResize": null}`` once the server reaches ``VERIFY_RESIZE``, or
  ``{"os-migrateLive": {...}}`` with ``live = true`` (compute microversion 2.25, which
  ``block_migration: "auto"`` needs). power_cycle is refused.
- node -> server id: the configured ``servers`` map, else ``GET /servers?name=^NODE$``
  (exactly one match required).
- idempotency (SPEC S6): Nova has no idempotency key, so every key is recorded locally
  (key -> server, action, submitted time) *before* the action is posted, and a recorded
  key is never posted again. The key is also sent as an ``Idempotency-Key`` header,
  which Nova ignores and the simulator counts.
- status: polls the server: ACTIVE with no task state after the submit -> succeeded,
  ERROR -> failed.

Every HTTP call has an overall deadline (``call_timeout``, retries included: a server
that trickles its answer cannot hold it past that), and an answer that is not what Nova
or Keystone sends (not JSON, nested too deeply, truncated, the wrong shape) is a
ProviderError for that call. Retries: connection errors, timeouts, 429 and 5xx are
retried with backoff for reads and auth; an action POST is never retried (Nova would run it twice) -- a lost answer
leaves the key recorded, and `status` finds out from the server what happened.
"""

from __future__ import annotations

import os
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from slurm_heal.errors import ProviderError, ProviderRefused, ProviderTimeout
from slurm_heal.providers._records import KeyRecords, operation
from slurm_heal.providers._transport import Answer, Deadline, TransportError, exchange
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action

OPENSTACK_ACTIONS = frozenset({Action.REBOOT, Action.REBUILD, Action.MIGRATE})
# os-migrateLive with block_migration "auto" and host null: compute microversion 2.25+
LIVE_MIGRATE_MICROVERSION = {"OpenStack-API-Version": "compute 2.25",
                             "X-OpenStack-Nova-API-Version": "2.25"}
# Nova status/task state reached after the action: anything else is still running.
_DONE_STATUS = "ACTIVE"


class OpenStackProvider:
    """Nova client for reboot / rebuild / migrate."""

    name = "openstack"

    def __init__(self, *, auth_url: str, username: str = "", password: str = "",
                 project_name: str = "", user_domain: str = "Default",
                 project_domain: str = "Default", compute_url: str | None = None,
                 interface: str = "public", region: str | None = None,
                 image: str | None = None, live: bool = False,
                 servers: Mapping[str, str] | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 connect_timeout: float = 3.0, read_timeout: float = 15.0,
                 attempts: int = 4, backoff: float = 0.5, call_timeout: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep,
                 application_credential_id: str | None = None,
                 application_credential_secret: str | None = None):
        import requests  # lazy: the node side never needs it

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
        self.servers = dict(servers or {})
        self.timeout = (connect_timeout, read_timeout)
        self.attempts, self.backoff = max(1, attempts), backoff
        self.call_timeout = call_timeout
        self._sleep = sleep
        self._token: str | None = None
        self._session = requests.Session()
        self._session.headers["Accept"] = "application/json"
        self.records = KeyRecords(Path(state_dir) / "openstack-provider.json"
                                  if state_dir is not None else None)

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    def supports(self, action: Action) -> bool:
        """reboot, migrate; rebuild only with an image configured."""
        if action == Action.REBUILD:
            return self.image is not None
        return action in OPENSTACK_ACTIONS

    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Post the Nova action for ``node`` once per ``key``."""
        if action not in OPENSTACK_ACTIONS:
            raise ProviderRefused(f"openstack provider cannot {action.value} a node")
        if action == Action.REBUILD and not self.image:
            raise ProviderRefused("openstack provider: rebuild needs [provider] image")
        if not key:
            raise ProviderError("an idempotency key is required")
        existing = self.records.get(key)
        if existing is not None:
            if existing["node"] != node or existing["action"] != action.value:
                raise ProviderError(f"idempotency key {key!r} was used for "
                                    f"{existing['action']} on {existing['node']}")
            op = self.status(key)
            assert op is not None
            return op
        server = self._server_id(node)
        body: dict[str, Any]
        if action == Action.REBOOT:
            body = {"reboot": {"type": "HARD"}}
        elif action == Action.REBUILD:
            body = {"rebuild": {"imageRef": self.image}}
        elif self.live:
            # "auto" needs compute microversion 2.25+ (a 2.1 Nova wants a boolean)
            body = {"os-migrateLive": {"host": None, "block_migration": "auto"}}
        else:
            body = {"migrate": None}
        rec: dict[str, Any] = {"id": "nova-" + uuid.uuid4().hex[:12], "node": node,
                               "server": server, "action": action.value,
                               "submitted": datetime.now(timezone.utc).isoformat(),
                               "status": "running", "detail": ""}
        with self.records.locked() as records:
            if key in records:  # another replica recorded it first
                rec = records[key]
                return operation(key, rec)
            records[key] = rec  # intent first: never post the same key twice
        try:
            headers = {"Idempotency-Key": key}
            if "os-migrateLive" in body:
                headers.update(LIVE_MIGRATE_MICROVERSION)
            resp = self._request("POST", f"/servers/{quote(server, safe='')}/action",
                                 json_body=body, headers=headers, retry=False)
        except ProviderError as exc:
            if _answered(exc):
                # Nova refused it: nothing ran.
                rec.update(status="failed", detail=str(exc))
                self.records.put(key, rec)
                return operation(key, rec)
            # No answer: it may have run. Keep "running"; status() asks the server.
            rec["detail"] = f"no answer to the action ({exc}); polling the server"
            self.records.put(key, rec)
            return operation(key, rec)
        rec["detail"] = f"nova {next(iter(body))} accepted (HTTP {resp.status_code})"
        self.records.put(key, rec)
        return operation(key, rec)

    def status(self, key: str) -> Operation | None:
        """Poll the server of the action recorded for ``key``."""
        rec = self.records.get(key)
        if rec is None:
            return None
        if rec["status"] in ("succeeded", "failed"):
            return operation(key, rec)
        server = self._get_json(f"/servers/{quote(str(rec['server']), safe='')}")
        info = server.get("server") if isinstance(server, dict) else None
        if not isinstance(info, dict) or not isinstance(info.get("status"), str):
            raise ProviderError(f"nova: malformed server answer for {rec['server']}: "
                                f"{str(server)[:200]}")
        status, task = info["status"], info.get("OS-EXT-STS:task_state")
        updated = info.get("updated")
        # The server must have changed since the submit, or an ACTIVE server simply has
        # not started the action yet.
        fresh = not isinstance(updated, str) or updated >= str(rec["submitted"])[:19]
        if status == "VERIFY_RESIZE" and rec["action"] == Action.MIGRATE.value:
            # A cold migration stops here on a real Nova until it is confirmed.
            self._confirm_resize(key, rec)
            return operation(key, rec)
        if status == "ERROR":
            rec.update(status="failed", detail=f"nova: server {rec['server']} is in ERROR")
        elif status == _DONE_STATUS and task is None and fresh:
            rec.update(status="succeeded",
                       detail=f"nova: server {rec['server']} ACTIVE after {rec['action']}"
                              + (" (confirmResize)" if rec.get("confirmed") else ""))
        else:
            return operation(key, rec)
        self.records.put(key, rec)
        return operation(key, rec)

    def _confirm_resize(self, key: str, rec: dict[str, Any]) -> None:
        """POST confirmResize for a migrated server in VERIFY_RESIZE. Safe to repeat
        after a lost answer: a confirmed server answers 409, which is taken as done."""
        server = quote(str(rec["server"]), safe="")
        try:
            self._request("POST", f"/servers/{server}/action",
                          json_body={"confirmResize": None}, retry=False)
        except ProviderError as exc:
            if not (_answered(exc) and "HTTP 409" in str(exc)):
                rec["detail"] = f"nova: confirmResize of {rec['server']}: {exc}; again later"
                self.records.put(key, rec)
                return
        rec["detail"] = f"nova: migration of {rec['server']} confirmed (confirmResize)"
        rec["confirmed"] = True
        self.records.put(key, rec)

    # --- helpers ------------------------------------------------------------------------
    def _server_id(self, node: str) -> str:
        if node in self.servers:
            return self.servers[node]
        body = self._get_json(f"/servers?name={quote('^' + re.escape(node) + '$')}")
        servers = body.get("servers") if isinstance(body, dict) else None
        if not isinstance(servers, list):
            raise ProviderError(f"nova: malformed server list: {str(body)[:200]}")
        ids = [s.get("id") for s in servers if isinstance(s, dict) and s.get("name") == node]
        if len(ids) != 1 or not isinstance(ids[0], str):
            raise ProviderError(f"nova: expected exactly one server named {node!r}, found "
                                f"{len(ids)}; map it in [provider] servers")
        return ids[0]

    def _authenticate(self) -> None:
        body: dict[str, Any]
        if self.app_credential is not None:
            # An application credential carries its own project scope: no "scope".
            cred_id, secret = self.app_credential
            body = {"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": cred_id, "secret": secret or ""}}}}
        else:
            body = {"auth": {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": self.username, "password": self.password,
                    "domain": {"name": self.user_domain}}}},
                "scope": {"project": {"name": self.project_name,
                                      "domain": {"name": self.project_domain}}},
            }}
        url = self.auth_url + ("" if self.auth_url.endswith("/v3") else "/v3") + "/auth/tokens"
        resp = self._send("POST", url, f"POST {url}", retry=True, json=body)
        token = resp.headers.get("X-Subject-Token")
        if not token:
            raise ProviderError(f"keystone: {url} answered without an X-Subject-Token header")
        self._token = token
        if self.compute_url is None:
            try:
                catalog = resp.json()["token"]["catalog"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ProviderError(f"keystone: token without a service catalog ({exc}); "
                                    "set [provider] compute_url") from exc
            self.compute_url = _compute_endpoint(catalog, self.interface, self.region)

    def _get_json(self, path: str) -> Any:
        resp = self._request("GET", path, retry=True)
        try:
            return resp.json()
        except ValueError as exc:
            raise ProviderError(f"nova: GET {path}: answer is not JSON ({exc}): "
                                f"{resp.text[:200]!r}") from exc

    def _request(self, method: str, path: str, *, json_body: Any = None,
                 headers: dict[str, str] | None = None, retry: bool) -> Answer:
        for attempt in (0, 1):
            if self._token is None:
                self._authenticate()
            assert self.compute_url is not None
            hdrs = dict(headers or {}, **{"X-Auth-Token": self._token or ""})
            url = self.compute_url + path
            try:
                return self._send(method, url, f"{method} {path}", retry=retry,
                                  json=json_body, headers=hdrs)
            except _Unauthorized:
                self._token = None  # expired token: authenticate again, once
                if attempt == 1:
                    raise ProviderError(f"nova: {method} {path}: HTTP 401 after a fresh "
                                        "token; check the credentials") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, what: str, *, retry: bool,
              **kwargs: Any) -> Answer:
        tries = self.attempts if retry else 1
        last, timed_out = "", False
        deadline = Deadline(self.call_timeout)
        for attempt in range(tries):
            delay = None
            try:
                resp = exchange(self._session, method, url, deadline=deadline,
                                timeout=self.timeout, what=f"openstack: {what}", **kwargs)
            except ProviderTimeout as exc:
                last, timed_out = str(exc), True
                if deadline.expired():
                    break
            except TransportError as exc:
                last, timed_out = str(exc), False
            else:
                if resp.status_code < 400:
                    return resp
                message = _nova_message(resp)
                if resp.status_code == 401 and "/auth/tokens" not in what:
                    raise _Unauthorized(message)
                if resp.status_code == 429 or resp.status_code >= 500:
                    last, timed_out = f"HTTP {resp.status_code}: {message}", False
                    ra = resp.headers.get("Retry-After", "")
                    delay = float(ra) if ra.replace(".", "", 1).isdigit() else None
                else:
                    raise _Answered(f"openstack: {what}: HTTP {resp.status_code}: {message}")
            if attempt + 1 < tries:
                if delay is None:
                    delay = random.uniform(0, self.backoff * (2 ** attempt))  # noqa: S311
                delay = min(delay, 30.0)
                if delay >= deadline.left():
                    last, timed_out = last + "; no time left for another try", True
                    break
                self._sleep(delay)
        error = ProviderTimeout if timed_out else ProviderError
        raise error(f"openstack: {what}: gave up after {tries} tries: {last}")


class _Unauthorized(ProviderError):
    pass


class _Answered(ProviderError):
    """Nova answered with a 4xx: the request was refused, nothing ran."""


def _answered(exc: ProviderError) -> bool:
    return isinstance(exc, _Answered)


def _nova_message(resp: Answer) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason
    if isinstance(body, dict):
        for value in body.values():  # Nova: {"badRequest": {"message": ..., "code": ...}}
            if isinstance(value, dict) and value.get("message"):
                return str(value["message"])
    return str(body)[:300]


def _compute_endpoint(catalog: Any, interface: str, region: str | None) -> str:
    if isinstance(catalog, list):
        for service in catalog:
            if not isinstance(service, dict) or service.get("type") != "compute":
                continue
            for ep in service.get("endpoints") or []:
                if (isinstance(ep, dict) and ep.get("interface") == interface
                        and (region is None or ep.get("region") == region)
                        and isinstance(ep.get("url"), str)):
                    return str(ep["url"]).rstrip("/")
    raise ProviderError(f"keystone: no compute endpoint with interface {interface!r}"
                        f"{f' in region {region!r}' if region else ''} in the catalog; "
                        "set [provider] compute_url")

