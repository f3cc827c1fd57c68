"""The provider simulator: an HTTP server that implements our provider API
(docs/provider-api.json) and the subset of OpenStack Keystone v3 + Nova that the
`openstack` provider uses, for the lab, the demo and the tests.

Use it in-process::

    with SimulatorServer(port=0, on_action=hook) as sim:
        provider = HttpProvider(sim.url)
        ...
        sim.stats()["executed"]      # {idempotency key: times the action ran}

or in the foreground with ``slurm-heal simulator --port P [--lab-dir DIR]``.

Actions run through a hook ``on_action(node, action, op)`` (in a worker thread, so a
slow lab reboot does not block the API). `LabHook` is the hook for the Slurm lab:
reboot restarts the node's slurmd as after a boot, rebuild also wipes the node's
scratch directory, migrate gives the node a new host identity (in its Extra, key
``slurm_heal_host``) and hands the old host to validation (SPEC L2, V1).

An operation goes pending -> running -> succeeded (or failed) and takes at least
``duration`` seconds. Each idempotency key executes its action at most once, however
often the create is retried (SPEC S6); ``GET /_sim/stats`` proves it.

Faults (``POST /_sim/faults``, each a count of upcoming requests unless noted; the
control endpoints under ``/_sim/`` are never affected):

- ``latency``: seconds added to every request (stays until set to 0);
- ``error_5xx``: the next n requests answer 503 without doing anything;
- ``error_429``: the next n requests answer 429 with ``Retry-After: retry_after``;
- ``timeout``: the next n requests hang for ``hang`` seconds, then the connection is
  closed without an answer; nothing is done;
- ``lose_response``: the next n action creates (ours or Nova's) are carried out, then
  the connection is dropped without an answer;
- ``fail_actions``: the next n actions run and end ``failed``;
- ``never_finish``: the next n actions start and never report an end (they stay
  ``running`` until the simulator stops);
- ``reset``: the next n requests are answered with a TCP reset; nothing is done;
- ``trickle``: the next n answers (status line, headers and body) are sent one byte
  every ``trickle_every`` seconds; the request itself is carried out;
- ``deep_json``: the next n answers are a JSON array nested 100,000 levels deep
  (carried out first, like ``lose_response``);
- ``truncate``: the next n answers announce their full length, send half of it and
  close the connection (carried out first);
- ``wrong_shape``: the next n answers are ``{"unexpected": []}`` (carried out first);
- ``ignore_soft_reboot``: the guests of the next n Nova SOFT reboots ignore the ACPI
  signal: the server stays ``REBOOT`` until a HARD reboot supersedes it.

The Keystone and Nova version discovery documents that openstacksdk (keystoneauth)
reads before it authenticates or picks a microversion (``GET /``, ``GET /v3``,
``GET /compute``, ``GET /compute/v2.1``) are served like control endpoints: never
subject to faults, so a fault hits the API call it was set for.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from slurm_heal import extra
from slurm_heal.errors import ConfigError, ProviderError
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.types import Action

log = logging.getLogger(__name__)

PROVIDER_ACTIONS = (Action.REBOOT, Action.REBUILD, Action.MIGRATE, Action.POWER_CYCLE)
# Extra key where a migrated node's host identity is recorded (see docs/providers.md).
HOST_EXTRA_KEY = extra.HOST_KEY
COMPUTE_PREFIX = "/compute/v2.1"
# Nova's server status / task state while an action runs.
_NOVA_BUSY = {
    Action.REBOOT: ("HARD_REBOOT", "reboot_started_hard"),  # a SOFT one: REBOOT
    Action.POWER_CYCLE: ("HARD_REBOOT", "reboot_started_hard"),
    Action.REBUILD: ("REBUILD", "rebuilding"),
    Action.MIGRATE: ("MIGRATING", "migrating"),
}
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class SimOperation:
    """One action the simulator carries out (mutable: the worker thread advances it)."""

    id: str
    key: str
    node: str
    action: Action
    status: str = "pending"
    detail: str = ""
    created: str = field(default_factory=_now_iso)
    updated: str = field(default_factory=_now_iso)
    host: str = ""  # the node's host identity after the action
    previous_host: str = ""  # migrate: the host the node left (sent to validation)
    source: str = "v1"  # "v1" (our API) or "nova"
    variant: str = ""  # Nova reboot type: "SOFT" or "HARD"
    superseded: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The operation as the HTTP API shows it."""
        out = {"id": self.id, "node": self.node, "action": self.action.value,
               "status": self.status, "detail": self.detail, "idempotency_key": self.key,
               "created": self.created, "updated": self.updated}
        if self.previous_host:
            out["previous_host"] = self.previous_host  # migrate: sent to validation (V1)
        return out


ActionHook = Callable[[str, Action, SimOperation], "str | None"]


@dataclass
class Faults:
    """Injected faults (see the module docstring)."""

    latency: float = 0.0
    error_5xx: int = 0
    error_429: int = 0
    retry_after: float = 1.0
    timeout: int = 0
    hang: float = 3.0
    lose_response: int = 0
    fail_actions: int = 0
    never_finish: int = 0
    reset: int = 0
    trickle: int = 0
    trickle_every: float = 0.5
    deep_json: int = 0
    truncate: int = 0
    wrong_shape: int = 0
    ignore_soft_reboot: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Drop(Exception):
    """Close the connection without an answer (a lost response or a hung request)."""


class _Reply(Exception):
    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def _error(status: int, message: str) -> _Reply:
    return _Reply(status, {"error": {"code": status, "message": message}})


class SimulatorServer:
    """The simulator. ``port=0`` picks a free port; `url` says which one."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 on_action: ActionHook | None = None, duration: float = 1.0,
                 token: str | None = None, os_users: dict[str, str] | None = None,
                 nodes: tuple[str, ...] = (), volume_backed: tuple[str, ...] = (),
                 nova_max_microversion: tuple[int, int] | None = None):
        self._host = host
        self.on_action = on_action
        self.duration = duration
        self.token = token  # bearer token for /v1 (None: no auth)
        self.os_users = os_users  # Keystone name -> password (None: any password)
        self.faults = Faults()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ops: dict[str, SimOperation] = {}
        self._by_key: dict[str, str] = {}
        self._executed: dict[str, int] = {}
        self._hosts: dict[str, str] = {n: f"host-{n}" for n in nodes}
        self._generation = itertools.count(1)
        self._validation: list[dict[str, Any]] = []
        self._tokens: set[str] = set()
        # Nova: servers whose cold migration waits for confirmResize (VERIFY_RESIZE)
        self._unconfirmed: set[str] = set()
        # Nova: servers booted from a volume have no image to rebuild from
        self._volume_backed = set(volume_backed)
        # An older Nova claims less (its version document and its 406 say so).
        self.nova_max = nova_max_microversion or NOVA_MAX_MICROVERSION
        self._nova_calls: list[dict[str, Any]] = []
        self._started = _now_iso()  # what Nova shows as an untouched server's "updated"
        self._requests = 0
        self._workers: list[threading.Thread] = []
        self._thread: threading.Thread | None = None
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True

    # --- life cycle -------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self._host}:{self.port}"

    def start(self) -> SimulatorServer:
        """Serve in a background thread."""
        # A short poll interval: stop() (every test's teardown) returns quickly.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="slurm-heal-simulator", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop` (or KeyboardInterrupt)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._httpd.server_close()

    def stop(self) -> None:
        """Stop serving; hung requests are released."""
        self._stop.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._httpd.server_close()
            self._thread = None
        for w in self._workers:
            w.join(timeout=5)

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- in-process views -------------------------------------------------------------
    def set_faults(self, **values: Any) -> None:
        """Same as ``POST /_sim/faults``."""
        with self._lock:
            self._apply_faults(values)

    def stats(self) -> dict[str, Any]:
        """Same as ``GET /_sim/stats``."""
        with self._lock:
            return {"executed": dict(self._executed), "requests": self._requests,
                    "operations": len(self._ops)}

    def operations(self) -> list[dict[str, Any]]:
        """Every operation, oldest first."""
        with self._lock:
            return [op.to_json() for op in self._ops.values()]

    def nova_calls(self) -> list[dict[str, Any]]:
        """Every Nova server action accepted, oldest first: node, action (the body's
        key), args, microversion ("2.30") and request_id (X-OpenStack-Request-ID)."""
        with self._lock:
            return [dict(c) for c in self._nova_calls]

    def validation(self) -> list[dict[str, Any]]:
        """Hosts vacated by migrate, handed to validation (SPEC V1)."""
        with self._lock:
            return [dict(v) for v in self._validation]

    def host_of(self, node: str) -> str:
        """The node's current host identity."""
        with self._lock:
            return self._hosts.setdefault(node, f"host-{node}")

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no operation is pending or running (tests, demo)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = any(op.status in ("pending", "running") for op in self._ops.values())
            if not busy:
                return True
            time.sleep(0.02)
        return False

    # --- the core ---------------------------------------------------------------------
    def _apply_faults(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            if name not in Faults.__dataclass_fields__:
                raise _error(400, f"unknown fault {name!r}; known: "
                                  f"{', '.join(Faults.__dataclass_fields__)}")
            current = getattr(self.faults, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise _error(400, f"fault {name!r} must be a number >= 0, not {value!r}")
            setattr(self.faults, name, type(current)(value))

    def _answer_fault(self) -> str | None:
        """The fault the next answer carries, if any (consumes one count)."""
        for name in ("trickle", "deep_json", "truncate", "wrong_shape"):
            if self._take(name):
                return name
        return None

    def _take(self, name: str) -> bool:
        """Consume one count of fault ``name``; True when it fires."""
        with self._lock:
            left = getattr(self.faults, name)
            if left > 0:
                setattr(self.faults, name, left - 1)
                return True
            return False

    def _start_action(self, node: str, action: Action, key: str, source: str,
                      variant: str = "") -> tuple[SimOperation, bool]:
        """The operation for ``key``, created (and its action started) when new.
        Returns (operation, created)."""
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                op = self._ops[existing]
                if op.node != node or op.action != action:
                    raise _error(409, f"idempotency key {key!r} was used for {op.action.value} "
                                      f"on {op.node}; a key names exactly one request")
                return op, False
            op = SimOperation(id="op-" + uuid.uuid4().hex[:12], key=key, node=node,
                              action=action, source=source, variant=variant)
            self._ops[op.id] = op
            self._by_key[key] = op.id
            # Counted at dispatch: what S6 forbids is a second execution, and a retry of
            # a lost response must find this count already at 1.
            self._executed[key] = self._executed.get(key, 0) + 1
            host = self._hosts.setdefault(node, f"host-{node}")
            op.host = host
            if action == Action.MIGRATE:
                op.previous_host = host
                op.host = f"host-{node}-m{next(self._generation)}"
                self._hosts[node] = op.host
                self._validation.append({"host": host, "node": node, "operation": op.id,
                                         "at": op.created, "reason": "vacated by migrate"})
            fail = self.faults.fail_actions > 0
            if fail:
                self.faults.fail_actions -= 1
            hang = self.faults.never_finish > 0
            if hang:
                self.faults.never_finish -= 1
            elif variant == "SOFT" and self.faults.ignore_soft_reboot > 0:
                self.faults.ignore_soft_reboot -= 1
                hang = True  # until a HARD reboot supersedes it
        worker = threading.Thread(target=self._run, args=(op, fail, hang), daemon=True,
                                  name=f"sim-{op.id}")
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()
        return op, True

    def _set(self, op: SimOperation, status: str, detail: str | None = None) -> None:
        with self._lock:
            op.status = status
            if detail is not None:
                op.detail = detail
            op.updated = _now_iso()

    def _run(self, op: SimOperation, fail: bool, hang: bool = False) -> None:
        started = time.monotonic()
        self._set(op, "running")
        if hang:
            # Never reports an end (an injected never_finish), unless a HARD reboot
            # supersedes this soft one.
            while not self._stop.wait(0.02):
                if op.superseded.is_set():
                    self._set(op, "superseded", f"{op.action.value} of {op.node}: "
                                                "superseded by a HARD reboot")
                    return
            return
        detail = f"{op.action.value} of {op.node} done"
        ok = True
        try:
            if self.on_action is not None:
                detail = self.on_action(op.node, op.action, op) or detail
        except Exception as exc:  # noqa: BLE001 - any hook failure fails the operation
            log.warning("simulator: %s of %s failed: %s", op.action.value, op.node, exc)
            ok, detail = False, f"{op.action.value} of {op.node} failed: {exc}"
        if fail:
            ok, detail = False, f"{op.action.value} of {op.node} failed (injected fault)"
        remaining = self.duration - (time.monotonic() - started)
        if remaining > 0:
            self._stop.wait(remaining)
        self._set(op, "succeeded" if ok else "failed", detail)

    def _nova_server(self, node: str) -> dict[str, Any]:
        with self._lock:
            host = self._hosts.setdefault(node, f"host-{node}")
            latest = None
            for op in self._ops.values():
                if op.node == node:
                    latest = op
            status, task = "ACTIVE", None
            if latest is not None and latest.status in ("pending", "running"):
                status, task = _NOVA_BUSY[latest.action]
                if latest.variant == "SOFT":
                    status, task = "REBOOT", "reboot_started"
            elif latest is not None and latest.status == "failed":
                status = "ERROR"
            elif node in self._unconfirmed:
                # Real Nova: a cold migration ends in VERIFY_RESIZE until confirmResize
                # (resize_confirm_window is off by default).
                status = "VERIFY_RESIZE"
            image: Any = "" if node in self._volume_backed else {
                "id": image_id(node), "links": []}
            return {"id": server_id(node), "name": node, "status": status,
                    "OS-EXT-STS:task_state": task, "OS-EXT-SRV-ATTR:host": host,
                    "hostId": host, "image": image,
                    "updated": latest.updated if latest else self._started}

    def _known_servers(self) -> list[str]:
        with self._lock:
            return sorted(set(self._hosts) | {op.node for op in self._ops.values()})

    # --- HTTP ---------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "slurm-heal-simulator/1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("simulator: " + format, *args)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._serve("DELETE")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length > 0 else b""
                self.control = self.path.startswith("/_sim/")
                try:
                    sim._route(self, method, raw)
                except _Drop:
                    self.close_connection = True
                except _Reply as reply:
                    try:
                        self._send(reply.status, reply.body, reply.headers)
                    except OSError:  # the client gave up (a trickled answer, a timeout)
                        self.close_connection = True
                except Exception as exc:  # noqa: BLE001 - the server must keep answering
                    log.exception("simulator: internal error")
                    self._send(500, {"error": {"code": 500, "message": f"internal: {exc}"}})

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None
                      ) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                fault = None if getattr(self, "control", False) else sim._answer_fault()
                if fault == "deep_json":
                    data = b"[" * 100_000 + b"]" * 100_000
                elif fault == "wrong_shape":
                    data = b'{"unexpected": []}'
                try:
                    if fault == "trickle":
                        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                                f"Content-Type: application/json\r\n"
                                f"Content-Length: {len(data)}\r\n\r\n").encode()
                        for i in range(len(head) + len(data)):
                            if sim._stop.wait(sim.faults.trickle_every):
                                break
                            self.wfile.write((head + data)[i:i + 1])
                            self.wfile.flush()
                        self.close_connection = True
                        return
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    if body is not None:
                        self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if fault == "truncate":
                        self.wfile.write(data[: len(data) // 2])
                        self.close_connection = True
                        return
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client went away (killed mid-request): nothing to answer.
                    log.debug("simulator: client gone before the answer (%d)", status)
                    self.close_connection = True

        return Handler

    def _route(self, req: BaseHTTPRequestHandler, method: str, raw: bytes) -> None:
        parts = urlsplit(req.path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query)
        if path.startswith("/_sim/"):
            self._route_control(method, path, raw)
        if method == "GET":
            self._route_discovery(path)
        with self._lock:
            self._requests += 1
            latency = self.faults.latency
        if latency > 0:
            self._stop.wait(latency)
        if self._take("timeout"):
            self._stop.wait(self.faults.hang)
            raise _Drop()
        if self._take("reset"):
            # SO_LINGER 0: close() sends a TCP RST, the client sees "connection reset".
            req.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
            raise _Drop()
        if self._take("error_429"):
            raise _Reply(429, {"error": {"code": 429, "message": "too many requests"}},
                         {"Retry-After": f"{self.faults.retry_after:g}"})
        if self._take("error_5xx"):
            raise _error(503, "service unavailable (injected)")
        if path.startswith("/v1/"):
            self._route_v1(req, method, path, query, raw)
        if path == "/v3/auth/tokens" and method == "POST":
            self._keystone_auth(raw)
        if path.startswith(COMPUTE_PREFIX + "/"):
            self._route_nova(req, method, path[len(COMPUTE_PREFIX):], query, raw)
        raise _error(404, f"no such endpoint: {method} {path}")

    def _route_control(self, method: str, path: str, raw: bytes) -> None:
        if path == "/_sim/stats" and method == "GET":
            raise _Reply(200, self.stats())
        if path == "/_sim/faults":
            if method == "POST":
                body = _json_body(raw)
                if not isinstance(body, dict):
                    raise _error(400, "faults body must be a JSON object")
                with self._lock:
                    self._apply_faults(body)
            with self._lock:
                raise _Reply(200, {"faults": self.faults.to_json()})
        if path == "/_sim/config" and method == "POST":
            body = _json_body(raw)
            duration = body.get("duration") if isinstance(body, dict) else None
            if isinstance(duration, bool) or not isinstance(duration, (int, float)) \
                    or duration < 0:
                raise _error(400, "config needs {\"duration\": seconds >= 0}")
            self.duration = float(duration)
            raise _Reply(200, {"duration": self.duration})
        raise _error(404, f"no such control endpoint: {method} {path}")

    # --- our API ------------------------------------------------------------------------
    def _route_v1(self, req: BaseHTTPRequestHandler, method: str, path: str,
                  query: dict[str, list[str]], raw: bytes) -> None:
        if self.token is not None:
            auth = req.headers.get("Authorization", "")
            if auth != f"Bearer {self.token}":
                raise _error(401, "missing or invalid bearer token")
        m = re.fullmatch(r"/v1/nodes/([^/]+)/actions", path)
        if m and method == "POST":
            node = unquote(m.group(1))
            if not _NODE_RE.match(node):
                raise _error(400, f"invalid node name {node!r}")
            key = req.headers.get("Idempotency-Key", "").strip()
            if not key:
                raise _error(400, "the Idempotency-Key header is required")
            body = _json_body(raw)
            action = _parse_action(body.get("action") if isinstance(body, dict) else None)
            op, created = self._start_action(node, action, key, "v1")
            if created and self._take("lose_response"):
                raise _Drop()
            raise _Reply(201 if created else 200, {"operation": self._op_json(op)})
        m = re.fullmatch(r"/v1/operations/([^/]+)", path)
        if m and method == "GET":
            with self._lock:
                found_op = self._ops.get(unquote(m.group(1)))
                if found_op is None:
                    raise _error(404, f"no operation {m.group(1)!r}")
                raise _Reply(200, {"operation": found_op.to_json()})
        if path == "/v1/operations" and method == "GET":
            keys = query.get("idempotency_key")
            with self._lock:
                if keys:
                    found = [self._ops[self._by_key[k]].to_json() for k in keys
                             if k in self._by_key]
                else:
                    found = [op.to_json() for op in self._ops.values()]
            raise _Reply(200, {"operations": found})
        if path == "/v1/validation" and method == "GET":
            raise _Reply(200, {"hosts": self.validation()})
        raise _error(404, f"no such endpoint: {method} {path}")

    def _op_json(self, op: SimOperation) -> dict[str, Any]:
        with self._lock:
            return op.to_json()

    # --- Keystone v3 + Nova subset ------------------------------------------------------
    def _route_discovery(self, path: str) -> None:
        """The version documents keystoneauth reads: Keystone's at ``/`` and ``/v3``,
        Nova's at ``/compute`` and ``/compute/v2.1`` (which carries the microversion
        range the SDK negotiates against)."""
        identity = {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                    "links": [{"rel": "self", "href": self.url + "/v3/"}],
                    "media-types": [{"base": "application/json",
                                     "type": "application/vnd.openstack.identity-v3+json"}]}
        lo, hi = (2, 1), self.nova_max
        compute = {"id": "v2.1", "status": "CURRENT", "updated": "2013-07-23T11:33:21Z",
                   "version": f"{hi[0]}.{hi[1]}", "min_version": f"{lo[0]}.{lo[1]}",
                   "links": [{"rel": "self", "href": self.url + COMPUTE_PREFIX + "/"}]}
        if path == "/":
            raise _Reply(300, {"versions": {"values": [identity]}})
        if path == "/v3":
            raise _Reply(200, {"version": identity})
        if path == "/compute":
            raise _Reply(200, {"versions": [compute]})
        if path == COMPUTE_PREFIX:
            raise _Reply(200, {"version": compute})

    def _keystone_auth(self, raw: bytes) -> None:
        body = _json_body(raw)
        try:
            identity = body["auth"]["identity"]
            if "application_credential" in identity["methods"]:
                # Keystone application credential: id (or name + user) and secret; the
                # checked name is "appcred:ID" in os_users.
                cred = identity["application_credential"]
                name, password = f"appcred:{cred['id']}", str(cred["secret"])
            elif "password" not in identity["methods"]:
                raise KeyError("methods")
            else:
                user = identity["password"]["user"]
                name, password = str(user["name"]), str(user["password"])
        except (KeyError, TypeError) as exc:
            raise _error(400, f"malformed auth request: missing {exc}") from exc
        if self.os_users is not None and self.os_users.get(name) != password:
            raise _error(401, "The request you have made requires authentication.")
        token = "gAAAA" + uuid.uuid4().hex
        with self._lock:
            self._tokens.add(token)
        catalog = [{"type": "compute", "name": "nova", "id": "nova-svc", "endpoints": [
            {"id": f"nova-{interface}", "interface": interface, "region": "RegionOne",
             "region_id": "RegionOne", "url": self.url + COMPUTE_PREFIX}
            for interface in ("public", "internal")]}]
        domain = {"id": "default", "name": "Default"}
        raise _Reply(201, {"token": {
            "methods": identity["methods"], "user": {"id": "u-" + name, "name": name,
                                                     "domain": domain},
            "project": {"id": "p-hpc", "name": "hpc", "domain": domain},
            "roles": [{"id": "r-member", "name": "member"}],
            "issued_at": _now_iso(), "expires_at": "2099-01-01T00:00:00.000000Z",
            "catalog": catalog}}, {"X-Subject-Token": token})

    def _route_nova(self, req: BaseHTTPRequestHandler, method: str, path: str,
                    query: dict[str, list[str]], raw: bytes) -> None:
        with self._lock:
            authorised = req.headers.get("X-Auth-Token", "") in self._tokens
        if not authorised:
            raise _error(401, "The request you have made requires authentication.")
        version = _nova_microversion(req, self.nova_max)  # every call: 400/406 if bad
        if path == "/servers" and method == "GET":
            pattern = (query.get("name") or [""])[0]
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise _error(400, f"invalid name filter {pattern!r}: {exc}") from exc
            names = [n for n in self._known_servers() if rx.search(n)]
            literal = re.fullmatch(r"\^([A-Za-z0-9_.-]+)\$", pattern)
            if not names and literal:
                # Every node of the lab "exists" in this cloud; no set-up step needed.
                names = [literal.group(1)]
                self.host_of(literal.group(1))
            raise _Reply(200, {"servers": [{"id": server_id(n), "name": n, "links": []}
                                           for n in names]})
        m = re.fullmatch(r"/servers/([^/]+)(/action)?", path)
        if not m:
            raise _error(404, f"no such endpoint: {method} {path}")
        node = next((n for n in self._known_servers() if server_id(n) == m.group(1)), None)
        if node is None:
            raise _error(404, f"Instance {m.group(1)} could not be found.")
        if m.group(2) is None and method == "GET":
            raise _Reply(200, {"server": self._nova_server(node)})
        if m.group(2) is None or method != "POST":
            raise _error(405, f"method {method} not allowed here")
        body = _json_body(raw)
        if not isinstance(body, dict) or len(body) != 1:
            raise _error(400, "a server action body has exactly one key")
        (name, args), = body.items()
        if name == "confirmResize":
            with self._lock:
                busy = any(o.node == node and o.status in ("pending", "running")
                           for o in self._ops.values())
                if busy or node not in self._unconfirmed:
                    raise _Reply(409, {"conflictingRequest": {
                        "code": 409, "message": f"Cannot 'confirmResize' instance "
                                                f"{server_id(node)} while it is in vm_state "
                                                f"{'resizing' if busy else 'active'}"}})
                self._unconfirmed.discard(node)
            raise _Reply(204, None)
        if name == "os-migrateLive" and isinstance(args, dict) and \
                args.get("block_migration") == "auto" and version < (2, 25):
            # Nova before microversion 2.25 wants a boolean here.
            raise _error(400, "Invalid input for field/attribute block_migration. Value: "
                              "auto. 'auto' is not of type 'boolean'")
        if name == "os-migrateLive" and isinstance(args, dict) and "force" in args and \
                not (2, 30) <= version < (2, 68):
            raise _error(400, "Invalid input for field/attribute os-migrateLive. "
                              "Additional properties are not allowed ('force' was unexpected)")
        if name == "migrate" and isinstance(args, dict) and version < (2, 56):
            raise _error(400, "Invalid input for field/attribute migrate. Value: "
                              f"{args}. {args} is not of type 'null'")
        variant = ""
        if name == "reboot":
            variant = str(args.get("type", "")).upper() if isinstance(args, dict) else ""
            if variant not in ("SOFT", "HARD"):
                raise _error(400, "Invalid input for field/attribute type. Value: "
                                  f"{variant or None}. It must be one of SOFT, HARD")
        action = {"reboot": Action.REBOOT, "rebuild": Action.REBUILD,
                  "migrate": Action.MIGRATE, "os-migrateLive": Action.MIGRATE}.get(name)
        if action is None:
            raise _error(400, f"unsupported server action {name!r}")
        if action == Action.REBUILD and not (isinstance(args, dict) and args.get("imageRef")):
            raise _error(400, "rebuild needs imageRef")
        current = self._nova_server(node)
        busy = current["OS-EXT-STS:task_state"]
        soft_running: SimOperation | None = None
        if busy is not None and variant == "HARD" and current["status"] == "REBOOT":
            # Nova lets a HARD reboot supersede a soft one that the guest ignores.
            with self._lock:
                soft_running = next((o for o in self._ops.values() if o.node == node
                                     and o.variant == "SOFT"
                                     and o.status in ("pending", "running")), None)
        elif busy is not None:
            raise _Reply(409, {"conflictingRequest": {
                "code": 409, "message": f"Cannot '{name}' instance {server_id(node)} while it "
                                        f"is in task_state {busy}"}})
        # Nova has no idempotency key. What counts executions per request here (SPEC S6
        # tests) is the global request id a client sends (X-OpenStack-Request-ID, as
        # Nova logs it), else an Idempotency-Key header (ignored by a real Nova).
        key = req.headers.get("X-OpenStack-Request-ID", "").strip() or \
            req.headers.get("Idempotency-Key", "").strip() or \
            f"nova:{server_id(node)}:{name}:{uuid.uuid4().hex[:8]}"
        if soft_running is not None:
            soft_running.superseded.set()
        with self._lock:
            self._nova_calls.append({"node": node, "action": name, "args": args,
                                     "microversion": f"{version[0]}.{version[1]}",
                                     "request_id": req.headers.get("X-OpenStack-Request-ID")})
        op, created = self._start_action(node, action, key, "nova", variant)
        if created and name == "migrate":
            with self._lock:
                self._unconfirmed.add(node)
        if created and self._take("lose_response"):
            raise _Drop()
        raise _Reply(202, None, {"X-Operation-Id": op.id})


# The newest compute microversion this simulator claims (Nova 2024.1 "Caracal": 2.96).
NOVA_MAX_MICROVERSION = (2, 96)


def _nova_microversion(req: BaseHTTPRequestHandler,
                       highest: tuple[int, int] = NOVA_MAX_MICROVERSION) -> tuple[int, int]:
    """The compute microversion a request asks for (2.1 when it names none), as Nova
    reads ``OpenStack-API-Version: compute X.Y`` or ``X-OpenStack-Nova-API-Version``;
    ``highest`` is the newest this Nova knows."""
    raw = req.headers.get("OpenStack-API-Version", "")
    m = re.fullmatch(r"\s*compute\s+(\S+)\s*", raw) if raw else None
    value = m.group(1) if m else req.headers.get("X-OpenStack-Nova-API-Version", "2.1")
    if value == "latest":
        return highest
    vm = re.fullmatch(r"(\d+)\.(\d+)", value.strip())
    if not vm:
        raise _error(400, f"Invalid API version request string {value!r}")
    version = (int(vm.group(1)), int(vm.group(2)))
    if not (2, 1) <= version <= highest:
        raise _Reply(406, {"computeFault": {
            "code": 406, "message": f"Version {value} is not supported by the API. Minimum "
                                    f"is 2.1 and maximum is {highest[0]}.{highest[1]}."}})
    return version


def image_id(node: str) -> str:
    """The simulator's Glance image id that ``node``'s server was booted from."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.image.slurm-heal-simulator"))


def server_id(node: str) -> str:
    """The simulator's Nova server id for ``node`` (stable across restarts)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.slurm-heal-simulator"))


def _json_body(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise _error(400, f"request body is not JSON: {exc}") from exc


def _parse_action(value: Any) -> Action:
    try:
        action = Action(value)
    except ValueError:
        action = Action.NONE
    if action not in PROVIDER_ACTIONS:
        raise _error(400, f"action must be one of {', '.join(a.value for a in PROVIDER_ACTIONS)}"
                          f", not {value!r}")
    return action


def lab_script(lab_dir: Path) -> Path:
    """The lab script that made the lab in ``lab_dir`` (issue 36 item 8): the program its
    slurm.conf's RebootProgram names (``"LAB --dir DIR reboot-program"``, written by
    ``lab up``), so an installed slurm-heal (no checkout, no contrib/) reboots the lab's
    nodes too; else this checkout's ``contrib/lab/lab``. ConfigError, naming the
    directory, for one that is not a lab."""
    meta, conf = lab_dir / "lab.json", lab_dir / "etc" / "slurm.conf"
    if not lab_dir.is_dir() or not meta.is_file() or not conf.is_file():
        raise ConfigError(f"{lab_dir} is not a Slurm lab directory (no "
                          f"{'lab.json' if not meta.is_file() else 'etc/slurm.conf'} "
                          "there): give the directory `contrib/lab/lab --dir DIR up` "
                          "started (docs/lab.md)")
    named: Path | None = None
    try:
        for line in conf.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "RebootProgram" and value.strip().strip('"').split():
                named = Path(value.strip().strip('"').split()[0])
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{lab_dir}: cannot read {conf}: {exc}") from None
    checkout = Path(__file__).resolve().parents[2] / "contrib" / "lab" / "lab"
    for found in (named, checkout):
        if found is not None and found.name == "lab" and os.access(found, os.X_OK):
            return found
    raise ConfigError(f"{lab_dir}: the lab script that made this lab is not here "
                      f"({named or 'no RebootProgram in ' + str(conf)}); the simulator "
                      "reboots the lab's nodes with it")


class LabHook:
    """`on_action` for the Slurm lab: real effects that Slurm and the node checks see.

    - reboot / power_cycle: ``LAB --dir LAB_DIR reboot NODE`` (the lab restarts the
      node's slurmd with ``-b``, so Slurm records a new boot);
    - rebuild: wipes ``scratch_root/NODE`` (local data is lost, SPEC L2), then reboots;
    - migrate: records the new host identity in the node's Extra under
      ``slurm_heal_host`` = {"host": new, "previous": old} (when a SlurmClient is given),
      then reboots; the simulator itself lists the old host under ``GET /v1/validation``.
    """

    def __init__(self, lab_dir: str | Path, *, scratch_root: str | Path | None = None,
                 slurm: SlurmClient | None = None, lab_command: str | Path | None = None,
                 timeout: float = 120.0):
        self.lab_dir = Path(lab_dir)
        self.scratch_root = Path(scratch_root) if scratch_root is not None else None
        self.slurm = slurm
        self.lab_command = Path(lab_command) if lab_command is not None else \
            lab_script(self.lab_dir)
        self.timeout = timeout

    def __call__(self, node: str, action: Action, op: SimOperation) -> str:
        notes: list[str] = []
        if action == Action.REBUILD and self.scratch_root is not None:
            scratch = self.scratch_root / node
            if scratch.is_dir():
                for entry in scratch.iterdir():
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
            notes.append(f"wiped {scratch}")
        if action == Action.MIGRATE:
            if self.slurm is not None:
                self.slurm.set_extra(node, HOST_EXTRA_KEY,
                                     {"host": op.host, "previous": op.previous_host})
            notes.append(f"moved from {op.previous_host} to {op.host}; "
                         f"{op.previous_host} sent to validation")
        self._reboot(node)
        notes.insert(0, f"{action.value} of {node}: rebooted")
        return "; ".join(notes)

    def _reboot(self, node: str) -> None:
        from slurm_heal.providers._proc import run

        argv = [str(self.lab_command), "--dir", str(self.lab_dir), "reboot", node]
        try:
            result = run(argv, timeout=self.timeout)
        except OSError as exc:
            raise ProviderError(f"cannot run {argv[0]}: {exc}") from exc
        if result.timed_out:
            raise ProviderError(f"{' '.join(argv)} ran past {self.timeout:g}s: {result.output}")
        if result.returncode != 0:
            raise ProviderError(f"{' '.join(argv)} exited {result.returncode}: "
                                f"{result.output.strip()}")
