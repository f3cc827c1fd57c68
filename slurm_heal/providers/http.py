"""The `http` provider: our documented JSON REST API (docs/provider-api.json) that any
cloud or in-house tool can implement.

    POST /v1/nodes/{node}/actions    {"action": "reboot"}   Idempotency-Key: K
         -> 201 (created) / 200 (that key was seen: the same operation) {"operation": {...}}
    GET  /v1/operations/{id}                                -> {"operation": {...}}
    GET  /v1/operations?idempotency_key=K                   -> {"operations": [...]}

Every call has (connect, read) timeouts and an overall deadline (``call_timeout``,
default 60 s, retries included: a server that trickles its answer cannot hold a call
past it), and is retried with exponential backoff and jitter on connection errors,
timeouts, 429 (honouring Retry-After) and 5xx, a bounded number of times. An answer
that is not what the API documents (not JSON, nested too deeply, truncated, the wrong
shape) is a ProviderError for that call. A create is retried only with the same Idempotency-Key, so the server
executes it at most once (SPEC S6). Other 4xx answers are ProviderError with the
server's message.

``requests`` is imported lazily: the node-side check imports the providers package
(never this module) and must stay light.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from slurm_heal.errors import ProviderError, ProviderRefused, ProviderTimeout
from slurm_heal.providerconf import CALL_TIMEOUT as CALL_TIMEOUT
from slurm_heal.providerconf import HTTP_ACTIONS as HTTP_ACTIONS
from slurm_heal.providerconf import HttpSettings as HttpSettings
from slurm_heal.providerconf import SimulatorSettings as SimulatorSettings
from slurm_heal.providers._records import not_enabled, require_key
from slurm_heal.providers._transport import Answer, Deadline, TransportError, exchange
from slurm_heal.providers.base import Operation, OperationStatus
from slurm_heal.types import Action

_STATUSES: tuple[OperationStatus, ...] = ("pending", "running", "succeeded", "failed")
# Never sleep longer than this between two tries, whatever Retry-After says.
MAX_BACKOFF = 30.0


class TokenFile:
    """A bearer token kept in a file, re-read when the file changes (token rotation)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self._lock = threading.Lock()

    def get(self) -> str:
        """The current token; ProviderError when the file is missing or empty."""
        with self._lock:
            try:
                st = self.path.stat()
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    token = self.path.read_text().strip()
                    if not token:
                        raise ProviderError(f"token file {self.path} is empty")
                    self._token, self._stamp = token, stamp
            except OSError as exc:
                raise ProviderError(f"cannot read token file {self.path}: {exc}") from exc
            return self._token


class HttpProvider:
    """Client of our provider API."""

    name = "http"

    def __init__(self, url: str, *, token_file: str | os.PathLike[str] | None = None,
                 connect_timeout: float = 3.0, read_timeout: float = 10.0,
                 attempts: int = 5, backoff: float = 0.5, max_backoff: float = MAX_BACKOFF,
                 call_timeout: float = CALL_TIMEOUT,
                 actions: frozenset[Action] = HTTP_ACTIONS,
                 sleep: Callable[[float], None] = time.sleep):
        import requests  # lazy: see the module docstring

        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self.url = url.rstrip("/")
        self.token = TokenFile(token_file) if token_file is not None else None
        self.timeout = (connect_timeout, read_timeout)
        self.attempts = attempts
        self.call_timeout = call_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.actions = actions
        self._sleep = sleep
        self._session = requests.Session()
        self._session.headers["Accept"] = "application/json"
        self._session.headers["User-Agent"] = "slurm-heal"

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    def supports(self, action: Action) -> bool:
        """Actions the API defines (reboot, rebuild, migrate, power_cycle)."""
        return action in self.actions

    def submit(self, node: str, action: Action, key: str) -> Operation:
        """Create ``action`` on ``node`` with Idempotency-Key ``key`` (same key: same op)."""
        if not self.supports(action):
            raise not_enabled(self.name, action, self.actions)
        require_key(key)
        body = self._call("POST", f"/v1/nodes/{quote(node, safe='')}/actions",
                          json_body={"action": action.value}, headers={"Idempotency-Key": key})
        op = _operation(_field(body, "operation", dict), f"POST /v1/nodes/{node}/actions")
        if op.key and op.key != key:
            raise ProviderError(f"provider answered with an operation for key {op.key!r}, "
                                f"not {key!r}")
        return op

    def status(self, key: str) -> Operation | None:
        """The operation created with ``key`` (looked up by key, so it works after a crash)."""
        body = self._call("GET", "/v1/operations", params={"idempotency_key": key})
        ops = _field(body, "operations", list)
        where = "GET /v1/operations"
        found = [_operation(o, where) for o in ops]
        found = [o for o in found if o.key == key]
        return found[0] if found else None

    def operation(self, op_id: str) -> Operation:
        """The operation with the provider's id ``op_id``."""
        body = self._call("GET", f"/v1/operations/{quote(op_id, safe='')}")
        return _operation(_field(body, "operation", dict), f"GET /v1/operations/{op_id}")

    # --- transport --------------------------------------------------------------------
    def _call(self, method: str, path: str, *, json_body: Any = None,
              headers: dict[str, str] | None = None,
              params: dict[str, str] | None = None) -> Any:
        url = self.url + path
        what = f"{method} {path}"
        last: str = ""
        timed_out = False
        deadline = Deadline(self.call_timeout)
        tries = 0
        for attempt in range(self.attempts):
            hdrs = dict(headers or {})
            if self.token is not None:
                hdrs["Authorization"] = f"Bearer {self.token.get()}"
            delay = None
            tries += 1
            try:
                resp = exchange(self._session, method, url, deadline=deadline,
                                timeout=self.timeout, what=f"{self.url}: {what}",
                                json=json_body, headers=hdrs, params=params)
            except ProviderTimeout as exc:
                timed_out, last = True, str(exc)
                if deadline.expired():
                    break
            except TransportError as exc:
                timed_out, last = False, str(exc)
            else:
                if resp.status_code < 400:
                    return _decode(resp, what)
                message = _server_message(resp)
                if resp.status_code == 429 or resp.status_code >= 500:
                    timed_out = resp.status_code == 504
                    last = f"HTTP {resp.status_code}: {message}"
                    delay = _retry_after(resp.headers.get("Retry-After"))
                elif resp.status_code in (401, 403):
                    raise ProviderError(f"{self.url}: {what}: HTTP {resp.status_code} "
                                        f"(check the token file): {message}")
                elif resp.status_code == 408:
                    last = f"HTTP 408: {message}"
                else:
                    # A definite no (400, 404, 409 key reused, 422...): nothing ran, and
                    # asking again would get the same answer.
                    raise ProviderRefused(f"{self.url}: {what}: HTTP {resp.status_code}: "
                                          f"{message}")
            if attempt + 1 < self.attempts:
                if delay is None:
                    # Exponential backoff with full jitter: replicas retrying together
                    # must not hammer the API in lock step.
                    delay = random.uniform(0, self.backoff * (2 ** attempt))  # noqa: S311
                delay = min(delay, self.max_backoff)
                if delay >= deadline.left():
                    timed_out = True
                    last += f"; the call's deadline of {self.call_timeout:g}s leaves no " \
                            "time for another try"
                    break
                self._sleep(delay)
        error = ProviderTimeout if timed_out else ProviderError
        raise error(f"{self.url}: {what}: gave up after {tries} tries: {last}")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        # HTTP-date form: honour it roughly.
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


def _server_message(resp: Answer) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if body.get("message"):
            return str(body["message"])
    return json.dumps(body)[:300]


def _decode(resp: Answer, what: str) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise ProviderError(f"{what}: answer is not JSON (HTTP {resp.status_code}; {exc}): "
                            f"{resp.text[:200]!r}") from exc


def _field(body: Any, name: str, kind: type) -> Any:
    if not isinstance(body, dict) or name not in body:
        raise ProviderError(f"malformed answer: expected a JSON object with {name!r}, got "
                            f"{json.dumps(body)[:200]}")
    value = body[name]
    if not isinstance(value, kind):
        raise ProviderError(f"malformed answer: {name!r} should be a {kind.__name__}, got "
                            f"{json.dumps(value)[:200]}")
    return value


def _operation(raw: Any, where: str) -> Operation:
    """Parse one operation object, naming what is wrong with it."""
    if not isinstance(raw, dict):
        raise ProviderError(f"{where}: malformed operation: not an object: {raw!r}"[:300])
    missing = [k for k in ("id", "node", "action", "status") if not isinstance(raw.get(k), str)]
    if missing:
        raise ProviderError(f"{where}: malformed operation: missing or non-string "
                            f"{', '.join(missing)}: {json.dumps(raw)[:200]}")
    status = raw["status"]
    if status not in _STATUSES:
        raise ProviderError(f"{where}: malformed operation: status {status!r} is not one of "
                            f"{', '.join(_STATUSES)}")
    try:
        action = Action(raw["action"])
    except ValueError as exc:
        raise ProviderError(f"{where}: malformed operation: unknown action "
                            f"{raw['action']!r}") from exc
    return Operation(id=raw["id"], key=str(raw.get("idempotency_key") or ""), node=raw["node"],
                     action=action, status=status, detail=str(raw.get("detail") or ""),
                     previous_host=str(raw.get("previous_host") or ""))



# -- the [provider] section of type "http" (issue 21: the provider owns its settings) ----
