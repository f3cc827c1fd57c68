"""The WSGI application of `slurm-heal serve`: JSON endpoints under ``/api/v1/`` and the
console's server-rendered pages (SPEC O5, Q1, P2, P4, D7, O2, S5).

It never decides and never acts. Reads go through `views` (the CLI's own code); every
write is one inbox command made by `operations.new_command` and queued by
`operations.queue`, exactly as the CLI does, and the daemon consumes it.

Errors are JSON problem objects (RFC 9457, ``application/problem+json``) with a
``detail`` a person understands, a ``kind`` (the error class, as the CLI's ``--json``
says) and, for bad input, ``errors`` naming each field. Bad input is a 4xx, never a 500.

The console works without JavaScript: every action is a form with a CSRF token and an
idempotency key (a double submit makes one command), and pages say who you are.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from slurm_heal import isotime, operations
from slurm_heal.api import receiver, views
from slurm_heal.api.auth import Authenticator, Principal
from slurm_heal.api.bodies import MAX_REASON, NODE_NAME
from slurm_heal.api.bodies import Body as _Body
from slurm_heal.api.bodies import DecisionBody as DecisionBody
from slurm_heal.api.bodies import PauseBody as PauseBody
from slurm_heal.api.bodies import ReasonBody as ReasonBody
from slurm_heal.api.bodies import RequestBody as RequestBody
from slurm_heal.api.idempotency import Kept, Keys, command_id, fingerprint, key_problem
from slurm_heal.api.memo import Memo, Same
from slurm_heal.api.receiver import MAX_SOURCE_BODY
from slurm_heal.api.settings import ApiSettings
from slurm_heal.errors import (
    CatalogError,
    ConfigError,
    HealError,
    NotFound,
    ProviderError,
    ReasonError,
    ScenarioError,
    SlurmError,
    StoreError,
)
from slurm_heal.location import Location
from slurm_heal.models import Command
from slurm_heal.readmodel import words
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.sources.settings import Sources
from slurm_heal.types import Action

log = logging.getLogger("slurm_heal.api")

MAX_BODY = 64 * 1024
SESSION_COOKIE = "slurm_heal_session"
LOGIN_COOKIE = "slurm_heal_login"
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
Kind = Literal["approve", "deny", "cancel", "request", "reset_breaker", "pause", "unpause",
               "close_incident"]


# --------------------------------------------------------------------------- problems


class Problem(Exception):
    """An answer that is not a success, with a message for a person."""

    def __init__(self, status: int, detail: str, *, kind: str | None = None,
                 errors: list[dict[str, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind or HTTPStatus(status).phrase.replace(" ", "")
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "about:blank", "title": HTTPStatus(self.status).phrase,
                               "status": self.status, "detail": self.detail, "kind": self.kind}
        if self.errors:
            out["errors"] = self.errors
        return out


def status_for(exc: HealError) -> int:
    """The HTTP status of one of our errors (the API's `errors.EXIT_CODES`)."""
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, (ConfigError, ReasonError, ScenarioError, CatalogError)):
        return 422
    if isinstance(exc, StoreError):  # locked, corrupt, no controller reads it
        return 503
    if isinstance(exc, (SlurmError, ProviderError)):
        return 502
    return 500


def _validation_problem(exc: ValidationError) -> Problem:
    errors = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required"
        elif err["type"] == "string_pattern_mismatch" and where == "node":
            msg = "not a node name (letters, digits, . _ -)"
        elif err["type"] == "string_pattern_mismatch":
            msg = "not a token (letters, digits, . _ -, at most 64)"
        errors.append({"field": where, "message": msg})
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return Problem(422, f"the request is not valid: {detail}", kind="ValidationError",
                   errors=errors)


# --------------------------------------------------------------------------- sessions


@dataclass
class Session:
    """A console login (in memory: a restart of serve logs everyone out)."""

    name: str
    digest: bytes  # the token's SHA-256: its role is looked up again on every request
    csrf: str
    expires: float
    created: float = field(default_factory=time.time)


def _sid_key(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


def _safe_next(value: str | None) -> str:
    """Only a path on this server (no open redirect). Issue 22: browsers drop tabs and
    newlines from a URL and read a backslash as a slash, so ``/%09/host`` becomes
    ``//host`` (another server): any control character, space, backslash or non-ASCII
    character refuses the whole value, as does anything that parses with a scheme or a
    host; a newline would also break the Location header."""
    if not value or not value.startswith("/") or value.startswith("//"):
        return "/"
    if any(c <= " " or c == "\x7f" or c == "\\" or not c.isascii() for c in value):
        return "/"
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


FLASH = {
    "approve": "Approval queued: the controller acts on it at its next cycle.",
    "deny": "Denial queued: the controller acts on it at its next cycle.",
    "cancel": "Cancel queued: the controller acts on it at its next cycle.",
    "request": "Request queued: the controller takes it at its next cycle, under the same "
               "checks as an alert (evidence, capacity, limits).",
    "reset_breaker": "Breaker reset queued for the controller's next cycle.",
    "pause": "Pause queued: nothing disruptive starts once the controller has read it.",
    "unpause": "Unpause queued: work resumes at the controller's next cycle.",
    "breaker_closed": "The breaker is closed; nothing to reset.",
    "close_incident": "Close queued: the held remediations go on by their own rules at the "
                      "controller's next cycle.",
}


# --------------------------------------------------------------------------- the app


class ApiApp:
    """The WSGI application. ``slurm`` makes the Slurm client (default: the one the
    daemon's ``[controller]`` section names, made once); ``clock``, monotonic seconds,
    ages what is served from memory (`views.FRESH_S`)."""

    def __init__(self, settings: ApiSettings, loc: Location,
                 slurm: Callable[[], SlurmClient] | None = None,
                 policy_file: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.loc = loc
        self.auth = Authenticator(settings)
        self.keys = Keys(loc.state_dir)
        self.policy_file = policy_file
        self._slurm_factory = slurm
        self._client: SlurmClient | None = None
        self._client_lock = threading.Lock()
        self.src = views.Sources(loc, self.slurm, clock=clock,  # clock: what ages memory
                                 topology_conf=self._topology_conf, lemon=self._lemon)
        # The overview's and status's JSON text, encoded once per value `views` keeps
        # (10,000 nodes are megabytes to encode; issue 34 item 3).
        self._bodies: Memo[bytes] = Memo(self.src.fresh, self.src.clock)
        # The fleet map's SVG, drawn once per map (the same for everyone: nothing in it is
        # the person's; issue 42): the template's output is the map's and whether the
        # page is filtered, so it is kept while they are equal, however old.
        self._maps: Memo[Markup] = Memo(math.inf, self.src.clock)
        self.secret = secrets.token_bytes(32)
        self.slack_settings: Any = None  # [notify.slack] (SPEC O7): read when first pressed
        self._interactions: Any = None
        self.sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()
        self.jinja = Environment(loader=PackageLoader("slurm_heal.api", "templates"),
                                 autoescape=select_autoescape(["html"]), trim_blocks=True,
                                 lstrip_blocks=True)
        self.jinja.filters["ts"] = _ts
        self.jinja.filters["ago"] = _ago
        self.jinja.filters["dur"] = lambda s: words.elapsed(float(s))  # "1h 5m"
        from slurm_heal.readmodel import badges, rulewords  # the console's words (issue 25)

        self.jinja.globals.update(rule_words=rulewords.short, step_badge=badges.step_badge,
                                  rem_badge=badges.rem_badge)
        self.url_map = Map([
            Rule("/healthz", endpoint="healthz", methods=["GET"]),
            Rule("/api/v1/openapi.json", endpoint="openapi", methods=["GET"]),
            Rule("/api/v1/whoami", endpoint="api_whoami", methods=["GET"]),
            Rule("/api/v1/overview", endpoint="api_overview", methods=["GET"]),
            Rule("/api/v1/status", endpoint="api_status", methods=["GET"]),
            Rule("/api/v1/nodes", endpoint="api_nodes", methods=["GET"]),
            Rule("/api/v1/nodes/<node>", endpoint="api_node", methods=["GET"]),
            Rule("/api/v1/nodes/<node>/history", endpoint="api_history", methods=["GET"]),
            Rule("/api/v1/machines", endpoint="api_machines", methods=["GET"]),
            Rule("/api/v1/machines/<target>", endpoint="api_machine", methods=["GET"]),
            Rule("/api/v1/alerts", endpoint="api_alerts", methods=["GET"]),
            Rule("/api/v1/approvals", endpoint="api_approvals", methods=["GET"]),
            Rule("/api/v1/remediations", endpoint="api_remediations", methods=["GET"]),
            Rule("/api/v1/remediations/<target>", endpoint="api_remediation",
                 methods=["GET"]),
            Rule("/api/v1/remediations/<target>/<any(approve, deny, cancel):kind>",
                 endpoint="api_decide", methods=["POST"]),
            Rule("/api/v1/requests", endpoint="api_request", methods=["POST"]),
            Rule("/api/v1/breaker", endpoint="api_breaker", methods=["GET"]),
            Rule("/api/v1/breaker/reset", endpoint="api_breaker_reset", methods=["POST"]),
            Rule("/api/v1/pause", endpoint="api_pause_show", methods=["GET"]),
            Rule("/api/v1/pause", endpoint="api_pause", methods=["POST"]),
            Rule("/api/v1/unpause", endpoint="api_unpause", methods=["POST"]),
            Rule("/api/v1/policy", endpoint="api_policy", methods=["GET"]),
            Rule("/api/v1/history", endpoint="api_repairs", methods=["GET"]),
            Rule("/api/v1/incidents", endpoint="api_incidents", methods=["GET"]),
            Rule("/api/v1/incidents/<target>", endpoint="api_incident", methods=["GET"]),
            Rule("/api/v1/incidents/<target>/close", endpoint="api_incident_close",
                 methods=["POST"]),
            Rule("/api/v1/slack/interactions", endpoint="api_slack", methods=["POST"]),
            # SPEC D13: the site's own monitors (api/receiver.py)
            Rule("/api/v1/sources", endpoint="api_sources", methods=["GET"]),
            Rule("/api/v1/sources/alertmanager", endpoint="api_source_alertmanager",
                 methods=["POST"]),
            # the console
            Rule("/", endpoint="page_overview", methods=["GET"]),
            Rule("/login", endpoint="page_login", methods=["GET", "POST"]),
            Rule("/logout", endpoint="page_logout", methods=["POST"]),
            Rule("/approvals", endpoint="page_approvals", methods=["GET"]),
            Rule("/nodes/<node>", endpoint="page_node", methods=["GET"]),
            Rule("/nodes/<node>/request", endpoint="page_request", methods=["POST"]),
            Rule("/remediations", endpoint="page_remediations", methods=["GET"]),
            Rule("/remediations/<rid>", endpoint="page_remediation", methods=["GET"]),
            Rule("/remediations/<rid>/<any(approve, deny, cancel):kind>",
                 endpoint="page_decide", methods=["POST"]),
            Rule("/history", endpoint="page_history", methods=["GET"]),
            Rule("/controls", endpoint="page_controls", methods=["GET"]),
            Rule("/controls/<any('breaker-reset', pause, unpause):what>",
                 endpoint="page_control", methods=["POST"]),
            Rule("/static/console.css", endpoint="static_css", methods=["GET"]),
        ], strict_slashes=False)

    # ----------------------------------------------------------------- plumbing

    def slurm(self) -> SlurmClient:
        """The Slurm client, made once (an error is raised again at the next ask)."""
        with self._client_lock:
            if self._client is None:
                factory = self._slurm_factory or (
                    lambda: operations.slurm_client(self.loc.controller))
                self._client = factory()
            return self._client

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        request.max_content_length = MAX_SOURCE_BODY if request.path.startswith(
            "/api/v1/sources/") else MAX_BODY  # an Alertmanager group can be large
        response = self.dispatch(request)
        for name, value in self._security_headers(request).items():
            response.headers.setdefault(name, value)
        result: Iterable[bytes] = response(environ, start_response)
        return result

    def _security_headers(self, request: Request) -> dict[str, str]:
        return {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                "X-Frame-Options": "DENY", "Content-Security-Policy": CSP,
                "Cache-Control": "no-store"}

    def _api(self, request: Request) -> bool:
        return request.path.startswith("/api/") or request.path == "/healthz"

    def dispatch(self, request: Request) -> Response:
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
            handler: Callable[..., Response] = getattr(self, f"on_{endpoint}")
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                self._same_origin(request)
            return handler(request, **args)
        except Problem as exc:
            return self._problem(request, exc)
        except RequestEntityTooLarge:
            return self._problem(request, Problem(
                413, f"the request body is larger than {MAX_BODY // 1024} KiB"))
        except HTTPException as exc:
            if exc.code is not None and 300 <= exc.code < 400:  # routing redirects
                return exc.get_response(request.environ)
            code = exc.code or 500
            detail = {404: f"nothing at {request.path}", 405: f"{request.method} is not "
                      f"allowed on {request.path}"}.get(code, exc.description or "")
            headers = {}
            if code == 405:
                valid = getattr(exc, "valid_methods", None) or []
                headers["Allow"] = ", ".join(valid)
            return self._problem(request, Problem(code, detail or HTTPStatus(code).phrase,
                                                  headers=headers))
        except HealError as exc:
            code = status_for(exc)
            if code >= 500 and code not in (502, 503):
                log.error("%s %s: %s: %s", request.method, request.path,
                          type(exc).__name__, exc)
            return self._problem(request, Problem(code, str(exc), kind=type(exc).__name__))
        except Exception:
            ref = secrets.token_hex(4)
            log.exception("%s %s failed unexpectedly (ref %s)", request.method, request.path,
                          ref)
            return self._problem(request, Problem(
                500, f"internal error (ref {ref}); the server's log has the details",
                kind="InternalError"))

    def _same_origin(self, request: Request) -> None:
        """Issue 34 item 2 (SPEC O5): no write from another site's page. A browser says
        where a request comes from (Sec-Fetch-Site; Origin on every POST): a write that
        another site's page sends, a form or a fetch carrying the person's proxy login or
        session cookie, is refused before anything is read. Clients that are no browser
        send neither and are judged by their credentials (and, through the proxy, by
        the JSON content type: `_api_write`)."""
        site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
        if site and site not in ("same-origin", "none"):
            raise Problem(403, f"a write from another site's page is refused (Sec-Fetch-Site: "
                          f"{site[:40]}): open the console itself to act", kind="CrossSite")
        origin = request.headers.get("Origin")
        if origin is None or site == "same-origin":
            return
        from urllib.parse import urlsplit

        here = {request.host.lower()}
        if self.auth.trusted_proxy(request.remote_addr):  # the host the browser asked for
            here.update(h.strip().lower() for h in
                        request.headers.get("X-Forwarded-Host", "").split(",") if h.strip())
        try:
            theirs = urlsplit(origin.strip()).netloc.lower()
        except ValueError:
            theirs = ""
        if not theirs or theirs not in here:
            raise Problem(403, f"a write from another site's page is refused (Origin "
                          f"{origin[:80]!r} is not this server): open the console itself "
                          "to act; behind a proxy, pass the host the browser asked for "
                          "(nginx: proxy_set_header Host $host)", kind="CrossSite")

    def _problem(self, request: Request, problem: Problem) -> Response:
        if self._api(request):
            resp = Response(json.dumps(problem.body(), indent=1), status=problem.status,
                            mimetype="application/problem+json")
        else:
            principal = self._console_principal(request)
            resp = self._render(request, "error.html", principal, status=problem.status,
                                problem=problem.body())
        for k, v in problem.headers.items():
            resp.headers[k] = v
        return resp

    def _json(self, data: Any, status: int = 200, headers: dict[str, str] | None = None
              ) -> Response:
        return Response(json.dumps(data, indent=1, default=str), status=status,
                        mimetype="application/json", headers=headers)

    def _json_kept(self, slot: str, data: dict[str, Any]) -> Response:
        """``data``, a value `views` keeps in memory, as `_json` says it: encoded once
        while views answers the same value."""
        body = self._bodies.get(slot, (Same(data),), lambda: json.dumps(
            data, indent=1, default=str).encode())
        return Response(body, mimetype="application/json")

    # ----------------------------------------------------------------- who

    def _api_principal(self, request: Request) -> Principal:
        principal = (self.auth.from_proxy(request.remote_addr, request.headers)
                     or self.auth.from_bearer(request.headers.get("Authorization")))
        if principal is None:
            raise Problem(401, "no valid credentials: send Authorization: Bearer <token> "
                          "(a token from the server's token file)", kind="Unauthorized",
                          headers={"WWW-Authenticate": 'Bearer realm="slurm-heal"'})
        return principal

    def _session(self, request: Request) -> Session | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        key = _sid_key(cookie)
        with self._sessions_lock:
            sess = self.sessions.get(key)
            if sess is not None and sess.expires < time.time():
                del self.sessions[key]
                sess = None
        return sess

    def _console_principal(self, request: Request) -> Principal | None:
        proxied = self.auth.from_proxy(request.remote_addr, request.headers)
        if proxied is not None:
            return proxied
        sess = self._session(request)
        if sess is None or self.auth.tokens is None:
            return None
        # Looked up again each time: a token removed from the file ends its sessions.
        entry = next((e for e in self.auth.tokens.entries()
                      if hmac.compare_digest(e.digest, sess.digest)), None)
        if entry is None or entry.name != sess.name:
            return None
        return Principal(entry.name, entry.role, "token")

    def _csrf(self, request: Request, principal: Principal) -> str:
        sess = self._session(request)
        if sess is not None:
            return sess.csrf
        # A proxy's user has no session of ours: a token bound to the user and this
        # process's secret.
        return hmac.new(self.secret, f"csrf|{principal.name}".encode(),
                        hashlib.sha256).hexdigest()

    def _check_csrf(self, request: Request, principal: Principal) -> None:
        sent = request.form.get("csrf_token", "")
        if not sent or not hmac.compare_digest(sent, self._csrf(request, principal)):
            raise Problem(403, "the form's CSRF token is missing or stale: reload the page "
                          "and submit again", kind="CSRF")

    @staticmethod
    def _require_operator(principal: Principal, what: str) -> None:
        if not principal.operator:
            raise Problem(403, f"{principal.name} has the viewer role, which may only look; "
                          f"{what} needs an operator", kind="Forbidden")

    # ----------------------------------------------------------------- writes

    def write(self, principal: Principal, kind: Kind, *, target: str | None = None,
              node: str | None = None, action: Action | None = None,
              detector: str | None = None, request_id: str | None = None,
              reason: str = "", idem_key: str | None = None,
              fp: str = "", incident: str | None = None,
              channel: operations.Channel = "api",
              generation: str | None = None) -> tuple[int, dict[str, Any]]:
        """Queue one inbox command exactly as the CLI does (SPEC O5); with an
        idempotency key, a retry gets the first answer back and never a second command.
        Returns (HTTP status, answer)."""
        self._require_operator(principal, {"reset_breaker": "a breaker reset"}.get(
            kind, f"to {kind}"))
        self.loc.check_writable()  # NoController: a word no daemon would read (503)

        def run(cid: str | None) -> tuple[int, dict[str, Any]]:
            if kind == "reset_breaker" and not (state := self.src.state()).breaker.open:
                return 200, {"queued": None, "message": FLASH["breaker_closed"],
                             "breaker": state.breaker.model_dump(mode="json")}
            if kind == "request" and node:
                self._check_node(node)
            cmd = operations.new_command(kind, principal.name, node=node or target,
                                         action=action, detector=detector,
                                         request_id=request_id, reason=reason,
                                         command_id=cid, incident=incident,
                                         channel=channel, generation=generation)
            stored: Command = operations.queue(self.loc, cmd, force=True)  # checked above
            log.info("queued %s %s by %s (command %s)", stored.kind,
                     stored.remediation or stored.node or "cluster", stored.by, stored.id)
            return 202, views.queued(stored, self.src.state())

        if not idem_key:
            return run(None)
        with self.keys.held() as held:
            kept = held.get(principal.name, idem_key)
            if kept is not None:
                if kept.fingerprint != fp:
                    raise Problem(422, "this Idempotency-Key was already used for a different "
                                  "request; use a new key for a new request",
                                  kind="IdempotencyKeyReused")
                return kept.status, {**kept.body, "replayed": True}
            status, body = run(command_id(principal.name, idem_key))
            held.keep(principal.name, idem_key, Kept(fp, status, body))
            return status, body

    def _check_node(self, node: str) -> None:
        """A typo'd node is caught now when Slurm answers (NotFound, 404); without Slurm
        the request is queued and the controller reports it, as the CLI does."""
        try:
            self.slurm().node(node)
        except NotFound:
            raise NotFound(f"Slurm does not know a node {node!r}") from None
        except HealError as exc:
            log.warning("could not check %s with Slurm (%s); queued anyway", node, exc)

    def _api_body(self, request: Request, model: type[_Body]) -> tuple[Any, Any]:
        """The JSON body validated by ``model``; (model instance, raw JSON)."""
        raw_bytes = request.get_data(cache=True)
        if not raw_bytes.strip():
            raw: Any = {}
        else:
            if request.mimetype != "application/json":
                raise Problem(415, "send the body as JSON (Content-Type: application/json)")
            from slurm_heal import jsonsafe

            try:  # issue 22: nested past any use is a 400, never a RecursionError (500)
                raw = jsonsafe.loads(raw_bytes)
            except (ValueError, UnicodeDecodeError) as exc:
                raise Problem(400, f"the body is not valid JSON: {exc}",
                              kind="MalformedJSON") from None
        if not isinstance(raw, dict):
            raise Problem(422, "the body must be a JSON object", kind="ValidationError")
        try:
            return model.model_validate(raw), raw
        except ValidationError as exc:
            raise _validation_problem(exc) from None

    def _api_write(self, request: Request, principal: Principal, kind: Kind, body: Any,
                   raw: Any, *, required_key: bool = False, **kw: Any) -> Response:
        if principal.via == "proxy" and request.mimetype != "application/json":
            # Issue 34 item 2 (SPEC O5): the proxy's login rides along with any request the
            # person's browser sends, a cross-site form's too; such a form cannot send JSON.
            raise Problem(415, "a write through the proxy's login needs a JSON body "
                          "(Content-Type: application/json; {} when there is nothing to say)",
                          kind="JSONRequired")
        key = request.headers.get("Idempotency-Key")
        if key is not None and (problem := key_problem(key)):
            raise Problem(400, problem, kind="BadIdempotencyKey")
        if required_key and not key:
            raise Problem(400, "a create needs an Idempotency-Key header (any unique string "
                          "of yours, e.g. a UUID): a retried POST with the same key never "
                          "makes two requests", kind="MissingIdempotencyKey")
        status, answer = self.write(principal, kind, idem_key=key,
                                    fp=fingerprint(request.method, request.path, raw), **kw)
        headers = {"Idempotent-Replayed": "true"} if answer.get("replayed") else {}
        queued = answer.get("queued") or {}
        if queued.get("remediation"):
            headers["Location"] = f"/api/v1/remediations/{queued['remediation']}"
        return self._json(answer, status, headers)

    # ----------------------------------------------------------------- API: reads

    def on_healthz(self, request: Request) -> Response:
        return self._json({"ok": True})

    def on_openapi(self, request: Request) -> Response:
        from slurm_heal.api.openapi import document

        return self._json(document())

    def on_api_whoami(self, request: Request) -> Response:
        p = self._api_principal(request)
        return self._json({"name": p.name, "role": p.role, "via": p.via})

    def on_api_overview(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json_kept("overview", views.overview(self.src))

    def on_api_status(self, request: Request) -> Response:
        """What ``slurm-heal status --json`` prints (docs/api.md: the CLI's twin)."""
        self._api_principal(request)
        return self._json_kept("status", views.status(self.src, self._policy))

    def _policy(self) -> Any:
        """serve's config's policy, as `status` reads its config's; None without one."""
        from slurm_heal.config import load_policy

        return load_policy(self.policy_file) if self.policy_file else None

    def on_api_nodes(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.nodes(self.src))

    def on_api_node(self, request: Request, node: str) -> Response:
        self._api_principal(request)
        return self._json(views.node_with_machine(self.src, _node_name(node), self._lemon()))

    def on_api_history(self, request: Request, node: str) -> Response:
        self._api_principal(request)
        return self._json(views.history(self.src, _node_name(node)))

    def on_api_machines(self, request: Request) -> Response:
        self._api_principal(request)
        raw = (request.args.get("limit") or "").strip()
        if raw and (not raw.isdigit() or int(raw) < 1):
            raise Problem(422, f"limit must be a whole number from 1, not {raw[:40]!r}",
                          kind="BadInput")
        return self._json(views.machines(self.src, self._lemon(), int(raw) if raw else None))

    def on_api_machine(self, request: Request, target: str) -> Response:
        self._api_principal(request)
        return self._json(views.machine(self.src, self._lemon(), target[:200]))

    def _topology_conf(self) -> Any:
        """The policy's [topology] (SPEC S7), for the fleet map; None: the defaults."""
        from slurm_heal.config import load_policy

        return load_policy(self.policy_file).topology if self.policy_file else None

    def _lemon(self) -> Any:
        """The policy's escalation.lemon (SPEC E7); the defaults without --config."""
        from slurm_heal.config import Lemon, load_policy

        return load_policy(self.policy_file).escalation.lemon if self.policy_file else Lemon()

    def on_api_alerts(self, request: Request) -> Response:
        self._api_principal(request)
        node = request.args.get("node")
        return self._json(views.alerts(self.src, _node_name(node) if node else None))

    def on_api_approvals(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.approvals(self.src))

    def on_api_remediations(self, request: Request) -> Response:
        self._api_principal(request)
        show_all = _flag(request.args.get("all"), "all")
        node = request.args.get("node")
        return self._json(views.remediations(self.src, show_all,
                                             _node_name(node) if node else None))

    def on_api_remediation(self, request: Request, target: str) -> Response:
        self._api_principal(request)
        return self._json(views.remediation(self.src, target))

    def on_api_breaker(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.breaker(self.src))

    def on_api_pause_show(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.pause(self.src))

    def on_api_policy(self, request: Request) -> Response:
        self._api_principal(request)
        if not self.policy_file:
            raise Problem(404, "serve runs without a config file (--config): no policy to show",
                          kind="NotFound")
        from slurm_heal.config import load_policy
        from slurm_heal.readmodel.words import plain as _plain

        p = load_policy(self.policy_file)
        return self._json({"file": self.policy_file,
                           "policy": _plain(p.model_dump(mode="python", exclude_none=False))})

    def on_api_repairs(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.repairs(self.src, _days(request.args.get("days"))))

    def on_api_incidents(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(views.incidents(self.src, _flag(request.args.get("all"), "all")))

    def on_api_incident(self, request: Request, target: str) -> Response:
        self._api_principal(request)
        return self._json(views.incident(self.src, target))

    # ----------------------------------------------------------------- API: writes

    def on_api_incident_close(self, request: Request, target: str) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, ReasonBody)
        inc = views.incident(self.src, target)["incident"]
        if inc["state"] != "open":
            raise NotFound(f"no open incident {target!r}: {inc['id']} already ended "
                           f"({inc['resolution']})")
        return self._api_write(request, principal, "close_incident", body, raw,
                               reason=body.reason, incident=inc["id"])

    def on_api_decide(self, request: Request, target: str,
                      kind: Literal["approve", "deny", "cancel"]) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, DecisionBody)
        return self._api_write(request, principal, kind, body, raw, target=target,
                               reason=body.reason)

    def on_api_request(self, request: Request) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, RequestBody)
        action = Action(body.action)
        problem = operations.request_problem(action, body.reason, body.detector, body.id)
        if problem:
            raise Problem(422, problem, kind="ValidationError")
        return self._api_write(request, principal, "request", body, raw, required_key=True,
                               node=body.node, action=action, detector=body.detector,
                               request_id=body.id, reason=body.reason.strip())

    def on_api_breaker_reset(self, request: Request) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, ReasonBody)
        return self._api_write(request, principal, "reset_breaker", body, raw,
                               reason=body.reason)

    def on_api_pause(self, request: Request) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, PauseBody)
        return self._api_write(request, principal, "pause", body, raw, reason=body.reason)

    def on_api_unpause(self, request: Request) -> Response:
        principal = self._api_principal(request)
        body, raw = self._api_body(request, ReasonBody)
        return self._api_write(request, principal, "unpause", body, raw, reason=body.reason)

    # ----------------------------------------------------------------- Slack (O7)

    def on_api_slack(self, request: Request) -> Response:
        """A press of a Slack button (`slurm_heal.api.slack`): 401 unless Slack signed it;
        200 otherwise, whatever the press decided (the message tells the outcome)."""
        inter = self._slack()
        body = request.get_data(cache=True)  # the raw body: what Slack signed
        if not inter.verified(body, request.headers.get("X-Slack-Request-Timestamp"),
                              request.headers.get("X-Slack-Signature")):
            log.warning("a Slack interaction from %s refused: its signature does not "
                        "verify (or is older than five minutes)", request.remote_addr)
            raise Problem(401, "the request's Slack signature does not verify, or its "
                          "timestamp is more than five minutes away", kind="BadSignature")
        inter.handle(body)
        return Response("", status=200)

    def _slack(self) -> Any:
        with self._client_lock:
            if self._interactions is None:
                from slurm_heal.api.slack import Interactions

                if self.slack_settings is None and self.policy_file:
                    from slurm_heal.config import load_policy

                    self.slack_settings = load_policy(self.policy_file).notify.slack
                if self.slack_settings is None:
                    raise Problem(404, "Slack is not configured here ([notify.slack] in "
                                  "serve's config file)", kind="NotFound")
                self._interactions = Interactions(self, self.slack_settings)
            return self._interactions
    # ----------------------------------------------------------------- SPEC D13

    def on_api_sources(self, request: Request) -> Response:
        self._api_principal(request)
        return self._json(receiver.listing(self.src.state().data))

    def on_api_source_alertmanager(self, request: Request) -> Response:
        """Alertmanager's webhook (version 4): an operator's token, like every write."""
        principal = self._api_principal(request)
        self._require_operator(principal, "to send alerts")
        self.loc.check_writable()
        if request.mimetype != "application/json":
            raise Problem(415, "send Alertmanager's webhook message as JSON "
                          "(Content-Type: application/json)")
        from slurm_heal import jsonsafe

        try:
            raw = jsonsafe.loads(request.get_data(cache=True))
        except (ValueError, UnicodeDecodeError) as exc:
            raise Problem(400, f"the body is not valid JSON: {exc}",
                          kind="MalformedJSON") from None
        policy = self._policy()
        try:
            status, answer = receiver.receive(raw, policy.sources if policy else Sources(),
                                              self.loc, self.slurm)
        except ValueError as exc:
            raise Problem(422, str(exc), kind="ValidationError") from None
        return self._json(answer, status)

    # ----------------------------------------------------------------- console

    def _render(self, request: Request, template: str, principal: Principal | None,
                status: int = 200, **context: Any) -> Response:
        flash = FLASH.get(request.args.get("queued", ""))
        html = self.jinja.get_template(template).render(
            me=principal, csrf=self._csrf(request, principal) if principal else "",
            flash=flash, path=request.path, new_key=lambda: secrets.token_urlsafe(16),
            **context)
        return Response(html, status=status, mimetype="text/html")

    def _page_principal(self, request: Request) -> Principal | Response:
        principal = self._console_principal(request)
        if principal is None:
            target = request.full_path.rstrip("?") if request.method == "GET" else "/"
            return _redirect(f"/login?next={_quote(target)}")
        return principal

    def on_static_css(self, request: Request) -> Response:
        from importlib.resources import files

        css = files("slurm_heal.api").joinpath("static/console.css").read_bytes()
        resp = Response(css, mimetype="text/css")
        resp.headers["Cache-Control"] = "max-age=3600"
        return resp

    def on_page_login(self, request: Request) -> Response:
        nxt = _safe_next(request.values.get("next"))
        if request.method == "GET":
            if self._console_principal(request) is not None:
                return _redirect(nxt)
            nonce = secrets.token_urlsafe(16)
            resp = self._render(request, "login.html", None, login_csrf=nonce, next=nxt)
            resp.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="Strict",
                            secure=self.settings.tls, max_age=3600)
            return resp
        sent, cookie = request.form.get("login_csrf", ""), request.cookies.get(LOGIN_COOKIE, "")
        if not sent or not cookie or not hmac.compare_digest(sent, cookie):
            raise Problem(403, "the login form is stale: reload the page and try again",
                          kind="CSRF")
        token = request.form.get("token", "").strip()
        principal = self.auth.from_token(token) if token else None
        if principal is None:
            log.info("console login refused from %s", request.remote_addr)
            nonce = secrets.token_urlsafe(16)
            resp = self._render(request, "login.html", None, status=401, login_csrf=nonce,
                                next=nxt, error="That token is not known to this server.")
            resp.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="Strict",
                            secure=self.settings.tls, max_age=3600)
            return resp
        from slurm_heal.api.auth import digest

        cookie_value = secrets.token_urlsafe(32)
        sess = Session(name=principal.name, digest=digest(token),
                       csrf=secrets.token_urlsafe(32),
                       expires=time.time() + self.settings.session_ttl.total_seconds())
        with self._sessions_lock:
            now = time.time()
            for k in [k for k, s in self.sessions.items() if s.expires < now]:
                del self.sessions[k]
            self.sessions[_sid_key(cookie_value)] = sess
        log.info("console login: %s (%s)", principal.name, principal.role)
        resp = _redirect(nxt)
        resp.set_cookie(SESSION_COOKIE, cookie_value, httponly=True, samesite="Strict",
                        secure=self.settings.tls,
                        max_age=int(self.settings.session_ttl.total_seconds()))
        resp.delete_cookie(LOGIN_COOKIE)
        return resp

    def on_page_logout(self, request: Request) -> Response:
        principal = self._console_principal(request)
        if principal is not None:
            self._check_csrf(request, principal)
            cookie = request.cookies.get(SESSION_COOKIE)
            if cookie:
                with self._sessions_lock:
                    self.sessions.pop(_sid_key(cookie), None)
        resp = _redirect("/login")
        resp.delete_cookie(SESSION_COOKIE)
        return resp

    def on_page_overview(self, request: Request) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        from slurm_heal.readmodel.nodepage import parse_query

        o = views.overview(self.src, parse_query(request.args))
        fleet = o.get("map")
        drawn = self._maps.get(("map",), (fleet, bool(o["page"]["filtered"])), lambda: Markup(
            self.jinja.get_template("fleetmap.html").render(o=o))) if fleet else Markup("")
        return self._render(request, "overview.html", p, o=o, fleet_map=drawn)

    def on_page_approvals(self, request: Request) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        return self._render(request, "approvals.html", p, a=views.approvals(self.src))

    def on_page_node(self, request: Request, node: str) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        name = _node_name(node)
        return self._render(request, "node.html", p, n=views.node_with_machine(self.src, name, self._lemon()),
                            actions=[a.value for a in operations.REQUEST_ACTIONS])

    def on_page_remediations(self, request: Request) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        show_all = _flag(request.args.get("all"), "all")
        return self._render(request, "remediations.html", p, show_all=show_all,
                            r=views.remediations(self.src, show_all, None))

    def on_page_remediation(self, request: Request, rid: str) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        r = views.remediation(self.src, rid)
        link = request.args.get("link")
        note, token = (None, None) if link is None else self._link_words(link, rid)
        return self._render(request, "remediation.html", p, r=r, link_note=note,
                            link_token=token, link_given=link is not None)

    # ----------------------------------------------------------------- links (O7)

    def _link_secret(self) -> bytes | str:
        """The key links are signed with, or why there is none (words)."""
        from slurm_heal.links import read_secret, secret_path

        path = secret_path(self.settings.link_secret_file, self.loc.state_dir)
        try:
            return read_secret(path)
        except ConfigError as exc:
            log.warning("notification links cannot be checked: %s", exc)
            return ("this server cannot check notification links (its key is missing or "
                    "unreadable; the daemon makes it with its first link): decide from this "
                    "page without the link")

    def _link_words(self, token: str, rid: str) -> tuple[str, str | None]:
        """(what the page says about the link, the token when it may decide): a link is
        good for its proposal only while that one waits (SPEC O7); a GET never acts."""
        from slurm_heal import links

        secret = self._link_secret()
        if isinstance(secret, str):
            return secret, None
        claims = links.verify(secret, token, datetime.now(timezone.utc))
        if isinstance(claims, str):
            return claims, None
        rem = self.remediation_of(rid)
        why = links.stale(claims, rem) if rem is not None else f"no remediation {rid!r}"
        if why is not None:
            return why, None
        return (f"This link is for the proposal to {claims.action} {claims.node} "
                f"({rem.id if rem else rid}, proposal {claims.generation}). Opening it "
                "changed nothing: approve or deny below."), token

    def remediation_of(self, rid: str) -> Any:
        """The remediation ``rid`` (open or archived) as stored; None when unknown."""
        state = self.src.state()
        rem = state.get(rid)
        return rem if rem is not None else self.src.history(remediation=rid).get(rid)

    def _link_generation(self, request: Request, rid: str) -> str | None:
        """A decision posted from a link's page: the generation the person saw, once the
        link is checked again (409 with words when it no longer decides)."""
        token = request.form.get("link")
        if not token:
            return None
        note, good = self._link_words(token, rid)
        if good is None:
            raise Problem(409, f"{note}. Nothing was done.", kind="StaleLink")
        from slurm_heal import links

        secret = self._link_secret()
        claims = links.verify(secret, token, datetime.now(timezone.utc)) \
            if isinstance(secret, bytes) else None
        return claims.generation if isinstance(claims, links.Claims) else None

    def on_page_history(self, request: Request) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        from slurm_heal.readmodel.repairs import WINDOWS, charts

        h = views.repairs(self.src, _days(request.args.get("days")))
        return self._render(request, "history.html", p, h=h, c=charts(h), windows=WINDOWS)

    def on_page_controls(self, request: Request) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        return self._render(request, "controls.html", p, b=views.breaker(self.src),
                            pause=views.pause(self.src),
                            controller=views.controller_info(self.loc, datetime.now(
                                timezone.utc)))

    def _form_write(self, request: Request, principal: Principal, kind: Kind,
                    done: str, **kw: Any) -> Response:
        self._check_csrf(request, principal)
        reason = request.form.get("reason", "").strip()
        if len(reason) > MAX_REASON:
            raise Problem(422, f"the comment is longer than {MAX_REASON} characters",
                          kind="ValidationError")
        if kind == "pause" and not reason:
            raise Problem(422, "say why you pause (it is shown to everyone, SPEC O2)",
                          kind="ValidationError")
        key = request.form.get("idempotency_key") or None
        if key is not None and (problem := key_problem(key)):
            raise Problem(400, problem, kind="BadIdempotencyKey")
        if key is not None:  # one form, two buttons (approve, deny): one key per action
            key = f"{key}|{request.path}"
        fields = {k: v for k, v in request.form.items() if k not in ("csrf_token",)}
        _status, answer = self.write(principal, kind, reason=reason, idem_key=key,
                                     fp=fingerprint("POST", request.path, fields),
                                     channel="console", **kw)
        flash = "breaker_closed" if answer.get("queued") is None else kind
        return _redirect(f"{done}?queued={flash}")

    def on_page_decide(self, request: Request, rid: str,
                       kind: Literal["approve", "deny", "cancel"]) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        self._check_csrf(request, p)  # before the link's words are shown to anyone
        generation = self._link_generation(request, rid) if kind != "cancel" else None
        return self._form_write(request, p, kind, f"/remediations/{_quote(rid)}", target=rid,
                                generation=generation)

    def on_page_request(self, request: Request, node: str) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        name = _node_name(node)
        try:
            action = Action(request.form.get("action", ""))
        except ValueError:
            raise Problem(422, "choose an action: " + ", ".join(
                a.value for a in operations.REQUEST_ACTIONS), kind="ValidationError") from None
        problem = operations.request_problem(action, request.form.get("reason", ""), None,
                                             None, names={"reason": "the reason"})
        if problem:
            raise Problem(422, problem, kind="ValidationError")
        return self._form_write(request, p, "request", f"/nodes/{_quote(name)}", node=name,
                                action=action)

    def on_page_control(self, request: Request, what: str) -> Response:
        p = self._page_principal(request)
        if isinstance(p, Response):
            return p
        kind: Kind = {"breaker-reset": "reset_breaker", "pause": "pause",
                      "unpause": "unpause"}[what]  # type: ignore[assignment]
        return self._form_write(request, p, kind, "/controls")


# --------------------------------------------------------------------------- helpers


def _node_name(value: str) -> str:
    if not NODE_NAME.match(value):
        raise Problem(422, f"{value[:80]!r} is not a node name (letters, digits, . _ -)",
                      kind="ValidationError")
    return value


def _days(value: str | None) -> int:
    """The history's window (issue 42): 7, 30 (the default) or 90 days."""
    from slurm_heal.readmodel.repairs import WINDOWS

    raw = (value or "").strip()
    if not raw:
        return 30
    if not raw.isdigit() or int(raw) not in WINDOWS:
        raise Problem(422, f"days must be one of {', '.join(map(str, WINDOWS))}, not "
                      f"{raw[:40]!r}", kind="ValidationError")
    return int(raw)


def _flag(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise Problem(422, f"{name} must be true or false, not {value[:40]!r}",
                  kind="ValidationError")


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="/")


def _redirect(location: str) -> Response:
    return Response("", status=303, headers={"Location": location})


def _instant(value: Any) -> datetime | None:
    """An ISO time (a template's JSON value) as an aware datetime; None when not one."""
    try:
        at = value if isinstance(value, datetime) else isotime.parse(str(value))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _ts(value: Any) -> str:
    """An ISO time as `status` writes it, "2026-01-05 10:00:00Z" (UTC); "-" for none."""
    if not value:
        return "-"
    at = _instant(value)
    return words.stamp(at) if at is not None else str(value)


def _ago(value: Any) -> str:
    """How long ago an ISO time was, in `status`'s words ("12m ago"); "never" for none."""
    if not value:
        return "never"
    at = _instant(value)
    if at is None:
        return str(value)
    return f"{words.elapsed((datetime.now(timezone.utc) - at).total_seconds())} ago"
