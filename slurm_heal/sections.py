"""The typed sections of the config file that other parts of slurm-heal own (issue 21):
``[controller]``, ``[provider]``, ``[api]``, ``[notify]``, ``[metrics]``,
``[validation]`` and ``[gate]``, as pure pydantic models, plus `read_section`, the one way
to read a section.

A low module: it imports pydantic, the duration rule and the validation suite's step
models (`suitesteps`), nothing that talks to Slurm, a provider, Apprise or Prometheus, and
nothing above it in the layer table (tests/unit/test_import_layers.py). `config.Policy`
types its fields with these models (validated when the policy is loaded, SPEC P), and
each subsystem imports its model from here (re-exported where it always was:
``slurm_heal.controller.ControllerSettings``, ``slurm_heal.api.settings.ApiSettings``,
...). Each section checks itself completely (issue 33), so the policy loader refuses
what `slurm-heal policy check` refuses, in the words the subsystems' readers used: a
route's event kinds and the URLs Apprise must understand (Apprise is imported only for a
section that names a URL), the TLS pair, each ticket sink (`slurm_heal.sinks`). Only the
provider's own table is read where the provider is built (`make_provider`; `policy
check` builds it dry).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from slurm_heal.durations import format_duration, parse_duration_knob, parse_seconds
from slurm_heal.errors import ConfigError
from slurm_heal.sinks import sink_problem
from slurm_heal.suitesteps import Duration as StepDuration
from slurm_heal.suitesteps import Step, unique_step_names

# A duration knob: "30s", "30m", "2h", "7d" in the file (a bare number is refused), a
# timedelta here.
Duration = Annotated[timedelta, BeforeValidator(parse_duration_knob)]
# A duration setting kept in seconds: "30s", "10m", or bare seconds (see parse_seconds).
Seconds = Annotated[float, BeforeValidator(parse_seconds)]


class AtKey(ValueError):
    """A section's own check across its keys that names the key itself, relative to the
    section (``routes[0].kinds``): the words `read_section` gives are then the ones the
    subsystem's reader gave before the section checked it (issue 33)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _dotted(loc: tuple[int | str, ...], index: str = "[]") -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) and index == "[]":
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _problem(exc: ValidationError, prefix: str | None, index: str = "[]",
             docs: str = "docs/policy.md") -> tuple[str | None, str]:
    """The dotted key and the words of a pydantic error: the first problem, with how
    many more there are; our own ValueError's words without pydantic's prefix."""
    errors = exc.errors()
    err = errors[0]
    loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
    named = err.get("ctx", {}).get("error")
    if isinstance(named, AtKey):
        key = ".".join(p for p in (prefix, named.key) if p) or None
    else:
        key = ".".join(p for p in (prefix, _dotted(loc, index)) if p) or None
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = f"unknown key ({msg}; {docs} lists the keys)"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return key, msg + more


M = TypeVar("M", bound=BaseModel)


def read_section(model: type[M], raw: Any, *, file: str, key: str,
                 index: str = "[]", docs: str = "docs/policy.md") -> M:
    """The one way to read a config section: validate ``raw`` (the ``[key]`` table of
    ``file``; None or missing: the defaults) as ``model``. A problem is a ConfigError
    naming the file, the dotted key (``notify.routes[0].kinds``) and why, never a
    pydantic traceback. ``index="."`` writes list positions as ``suites.nvidia.0`` (the
    validation suite's messages say it that way). A ``model`` instance (the typed section
    of a loaded `Policy`) is returned as it is."""
    if isinstance(raw, model):  # already read (a typed section of the loaded policy)
        return raw
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a table, got {raw!r}", file=file, key=key)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        where, msg = _problem(exc, key, index, docs)
        raise ConfigError(msg, file=file, key=where) from None




class Section(BaseModel):
    """Frozen, no unknown keys: every typed section."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ControllerSettings(Section):
    """The ``[controller]`` section of the config file."""

    state_dir: str | None = None  # default: beside slurmctld's StateSaveLocation
    interval: Seconds = Field(default=30.0, gt=0, le=3600)  # between cycles: "30s" (or 30)
    slurm_backend: Literal["auto", "cli", "pyslurm", "rest"] = "auto"
    slurm_conf: str | None = None
    slurm_rest_url: str | None = None  # rest backend: slurmrestd, e.g. http://ctl:6820
    slurm_rest_token_file: str | None = None  # rest backend: the JWT, read from this file
    heartbeat: str | None = None  # default: <state_dir>/heartbeat
    notify_file: str | None = None  # default: <state_dir>/notifications.jsonl
    # Before issue 26: how long a closed remediation stayed in state.json. Now every ended
    # remediation is kept for good in the audit archive, where every reader of history
    # finds it, and `hot_retention` says how long it stays in state.json too; this key
    # still loads (validated) and the daemon says that it no longer moves anything.
    audit_retention: Duration = timedelta(days=90)
    # Issue 26: how long an ended remediation stays in the hot store (state.json) before
    # the daemon's retention moves it to the audit archive beside it (docs/store.md);
    # never less than what E1-E3 count (escalation.window, migrate_evidence_window).
    # Typed durations (issue 33: they were kept as text and parsed again by the daemon).
    hot_retention: Duration = timedelta(days=14)

    @field_validator("audit_retention", "hot_retention")
    @classmethod
    def _positive(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        # read by the one rule of every duration, in its words (durations.py, `Duration`)
        if value <= timedelta(0):
            raise ValueError(f"{info.field_name} must be a positive duration, e.g. 14d")
        return value


# The severities of a notification event, lowest first (notify.events re-exports them).
SEVERITIES = ("info", "warning", "critical")
# The kinds of notification event (notify.events re-exports them): what a route may name.
EVENT_KINDS: tuple[str, ...] = ("alert", "approval", "outcome", "person", "support",
                                "breaker", "pause", "incident")


@functools.lru_cache(maxsize=256)
def apprise_understands(url: str) -> bool:
    """Whether Apprise can send to ``url`` (SPEC O3). Apprise is imported only for a
    section that names a URL, and each URL is asked once per process (serve reads its
    config on every status request)."""
    import apprise

    return apprise.Apprise.instantiate(url) is not None


def redact_url(url: str) -> str:
    """A URL as an error may show it: the scheme only (a URL may carry a token)."""
    scheme, sep, _rest = url.partition("://")
    return f"{scheme}://..." if sep else "(not a URL)"


class Routed(Protocol):
    """What a route looks at in an event (`slurm_heal.notify.events.Event`): typed here,
    below notify, so that this low module imports nothing above it (issue 33)."""

    @property
    def kind(self) -> str: ...

    @property
    def severity(self) -> str: ...


class Route(Section):
    """One ``[[notify.routes]]``: where events of these kinds and severities go."""

    urls: list[str] = Field(min_length=1)
    kinds: list[str] = Field(default_factory=lambda: ["*"])
    min_severity: Literal["info", "warning", "critical"] = "info"

    def wants(self, event: Routed) -> bool:
        return (("*" in self.kinds or event.kind in self.kinds)
                and SEVERITIES.index(event.severity) >= SEVERITIES.index(self.min_severity))


SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,30}$")  # a Slack member id (U0123ABC, W...)


class SlackSettings(Section):
    """``[notify.slack]`` (SPEC O7, issue 40): approval requests as Slack messages with
    Approve / Deny buttons, and who may press them. The bot token and the signing secret
    live in files only slurm-heal may read (never in the config file)."""

    token_file: Path  # the bot's OAuth token (xoxb-...): chat.postMessage, chat.update
    channel: str  # the channel id (C0123...) or name the requests go to
    # The app's signing secret: serve checks every button press with it (X-Slack-Signature).
    signing_secret_file: Path | None = None
    # Slack member id -> console user (a name of the token file, or of [api] proxy_users):
    # the press is made as that user, with that user's role; anyone else is refused.
    users: dict[str, str] = Field(default_factory=dict)
    kinds: list[str] = Field(default_factory=lambda: ["approval"])  # what goes to Slack
    base_url: str = "https://slack.com/api/"  # Slack's Web API (a proxy's, a test's)
    timeout: Seconds = Field(default=10.0, gt=0, le=120)

    @field_validator("users")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        for member, name in value.items():
            if not SLACK_USER.match(member):
                raise ValueError(f"{member!r} is not a Slack member id (U0123ABCD: the "
                                 "profile's \"Copy member ID\")")
            if not NAME.match(name):
                raise ValueError(f"{name!r} is not a console user name (letters, digits, "
                                 ". _ @ + -)")
        return value

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        for kind in value:
            if kind != "*" and kind not in EVENT_KINDS:
                raise ValueError(f"unknown event kind {kind!r} (one of "
                                 f"{', '.join(EVENT_KINDS)})")
        return value

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value if value.endswith("/") else value + "/"


class NotifySettings(Section):
    """The ``[notify]`` section."""

    urls: list[str] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    slack: SlackSettings | None = None  # SPEC O7: interactive approvals in Slack
    max_attempts: int = Field(default=8, ge=1, le=100)
    backoff: Seconds = Field(default=30.0, gt=0, le=3600)  # "30s" (or 30), doubled per attempt
    max_backoff: Seconds = Field(default=3600.0, gt=0)
    poll: Seconds = Field(default=2.0, gt=0, le=600)  # how often the sender looks at the queue

    def all_routes(self) -> list[Route]:
        out = list(self.routes)
        if self.urls:
            out.insert(0, Route(urls=list(self.urls)))
        return out

    @model_validator(mode="after")
    def _deliverable(self) -> NotifySettings:
        """SPEC O3: every route names known event kinds and URLs Apprise can send to;
        checked with the section (issue 33: the policy loader refuses what `policy check`
        refuses), in the words and keys the notifier's reader used."""
        shortcut = 1 if self.urls else 0
        for i, route in enumerate(self.all_routes()):
            where = "" if i < shortcut else f"routes[{i - shortcut}]."
            for kind in route.kinds:
                if kind != "*" and kind not in EVENT_KINDS:
                    raise AtKey(f"{where}kinds", f"unknown event kind {kind!r} (one of "
                                f"{', '.join(EVENT_KINDS)})")
            for url in route.urls:
                if not apprise_understands(url):
                    raise AtKey(f"{where}urls", "Apprise does not understand this URL: "
                                f"{redact_url(url)}")
        return self


class MetricsSettings(Section):
    """The ``[metrics]`` section."""

    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = Field(default=9810, ge=0, le=65535)
    # TLS and basic auth: a web config file as Prometheus' exporters take it (issue 38;
    # slurm_heal.webconfig); relative to the config file's directory
    web_config: str | None = None
    # the names replaced in this release, still served beside their new ones (issue 38:
    # slurm_heal_breaker_count); false drops them before the release that removes them
    deprecated_names: bool = True


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8250
Role = Literal["viewer", "operator"]
# Names of people and robots as they appear in the audit record.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")


def split_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[V6]:PORT``) → (host, port); ValueError says what is wrong."""
    m = re.match(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\s]+)):(?P<port>\d{1,5})$", value)
    if not m:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
    port = int(m.group("port"))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return m.group("v6") or m.group("host"), port


class ApiSettings(Section):
    """The ``[api]`` section: everything ``serve`` needs besides the store (found as
    every command finds it); api/settings.py reads it (SPEC O5)."""

    bind: str = f"{DEFAULT_HOST}:{DEFAULT_PORT}"  # HOST:PORT ([v6]:PORT for IPv6)
    tokens: Path | None = None  # the token file (see auth.py); relative to the config file
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Reverse proxies (addresses or networks) whose user header is believed.
    trusted_proxies: tuple[str, ...] = ()
    proxy_user_header: str = "X-Remote-User"
    # Roles of the people the proxy names; anyone else it names gets proxy_default_role
    # ("none": refused).
    proxy_users: dict[str, Role] = Field(default_factory=dict)
    proxy_default_role: Literal["viewer", "operator", "none"] = "viewer"
    # Issue 22: the secret a trusted proxy adds to every request (a file only it and
    # serve may read); without it, the user header is never believed.
    proxy_secret_file: Path | None = None
    proxy_secret_header: str = "X-Slurm-Heal-Proxy-Secret"
    session_ttl: Duration = timedelta(hours=12)  # a console login lasts this long
    # Issue 22 item 7: the WSGI server's bounded worker pool, and how long a request may
    # go without sending (and a keep-alive connection may idle) before it is closed.
    threads: int = Field(default=16, ge=1, le=256)
    timeout: Duration = timedelta(seconds=10)
    # Issue 34 item 3: a request must be all there this long after its first byte (one
    # deadline, not per read: a client dripping a byte a second is cut), and one client
    # address may hold this many connections at once (0: no bound; a trusted proxy is
    # never counted).
    request_timeout: Duration = timedelta(seconds=10)
    max_client_connections: int = Field(default=32, ge=0, le=100_000)
    # SPEC O7 (issue 40): the console's address as people's browsers reach it
    # ("https://heal.example.org"; a path prefix is kept); every notification that needs
    # a person links to its page there. None: notifications carry no link.
    public_url: str | None = None
    # The key a link's token is signed with (HMAC-SHA256), shared by the daemon (which
    # writes links) and serve (which checks them): a file only they may read. None: the
    # state directory's ``link-secret`` (made by the daemon, mode 0600).
    link_secret_file: Path | None = None
    link_ttl: Duration = timedelta(hours=8)  # a link is good this long after it is sent

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
                or parts.fragment:
            raise ValueError(f"{value!r} is not the console's address: give "
                             "https://HOST[:PORT][/PREFIX] (no query, no fragment)")
        return value.strip().rstrip("/")

    @field_validator("link_ttl")
    @classmethod
    def _link_ttl(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=5) <= value <= timedelta(days=7):
            raise ValueError("must be between 5m and 7d: a link is short-lived (SPEC O7)")
        return value

    @field_validator("timeout", "request_timeout")
    @classmethod
    def _timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(minutes=10):
            raise ValueError("must be between 1s and 10m")
        return value

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        split_bind(value)
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network") from None
        return value

    @field_validator("proxy_user_header", "proxy_secret_header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9-]{1,64}$", value):
            raise ValueError(f"{value!r} is not an HTTP header name")
        return value

    @field_validator("proxy_users")
    @classmethod
    def _users(cls, value: dict[str, Role]) -> dict[str, Role]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"{name!r} is not a user name (letters, digits, . _ @ + -)")
        return value

    @property
    def host(self) -> str:
        return split_bind(self.bind)[0]

    @property
    def port(self) -> int:
        return split_bind(self.bind)[1]

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None and self.tls_key is not None

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise AtKey("tls_cert", "tls_cert and tls_key go together")
        return self

    def proxies(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies)


class Validation(Section):
    """The ``[validation]`` section of the policy file (SPEC V1–V3)."""

    enabled: bool = True
    suites: dict[str, tuple[Step, ...]] = Field(default_factory=dict)  # vendor -> steps
    tickets: tuple[dict[str, Any], ...] = ()  # the sinks' settings (`slurm_heal.sinks`)
    # The flow (`flow`, docs/validation.md "The flow"):
    vendor: str = "nvidia"  # whose suite runs (V3); "default" is the fallback suite
    # Where each job writes its results (<results_dir>/<run id>/): on a file system the
    # node writes and the controller reads (a shared FS, as job output is at real sites).
    # Default: <state_dir>/validation.
    results_dir: str | None = None
    reservation_prefix: str = Field(default="slurm-heal-validate-",
                                    pattern=r"^[A-Za-z0-9_.-]+$")
    job_time_limit: StepDuration = timedelta(hours=2)  # sbatch --time; Slurm ends it (TIMEOUT)
    python: str | None = None  # the job's Python (default: the controller's own)
    user: str | None = None  # who the job runs as (default: the controller's user)
    level: int = Field(default=2, ge=1, le=4)  # the {level} placeholder
    scratch: str = "/tmp"  # the {scratch} placeholder: the machine's local scratch directory
    gpus: int = Field(default=0, ge=0)  # the {gpus} placeholder; 0: counted on the machine
    level_after_failure: int = Field(default=3, ge=1, le=4)  # for a machine that failed before
    # The host a provider reports as vacated -> the Slurm node that runs on it, where the
    # host name is not the node name (a host not in Slurm cannot be validated here).
    hosts: dict[str, str] = Field(default_factory=dict)

    @field_validator("suites")
    @classmethod
    def _unique(cls, value: dict[str, tuple[Step, ...]]) -> dict[str, tuple[Step, ...]]:
        return unique_step_names(value)

    @field_validator("tickets")
    @classmethod
    def _sinks(cls, value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """SPEC V2: each ticket sink is checked with the section (issue 33: the policy
        loader refuses what `policy check` refuses), in the words and keys of the sinks'
        reader (`validation.tickets.sinks_from`)."""
        for i, item in enumerate(value):
            key, why, model = sink_problem(i, item)
            if model is None:
                raise AtKey(key, why)
            try:
                model.model_validate(item)
            except ValidationError as exc:
                where, msg = _problem(exc, f"tickets[{i}]", "[]", "docs/validation.md")
                raise AtKey(where or f"tickets[{i}]", msg) from None
        return value

    def suite_for(self, vendor: str) -> tuple[Step, ...]:
        """The steps for ``vendor``, else the ``default`` suite, else none."""
        return self.suites.get(vendor, self.suites.get("default", ()))


# SPEC V4 "time-boxed": the longest a gate may be given. A gate is a short suite before
# a node takes jobs again, not the vacated-machine validation (V1) of hours.
MAX_TIMEOUT = timedelta(hours=2)


class Gate(Section):
    """The ``[gate]`` section of the policy file (SPEC V4, docs/policy.md "Post-repair
    gate").

    After an action and the node's health check (L5), before the node is resumed, a short
    suite runs as a Slurm job in a maintenance reservation on the node: the validation
    suite's own steps and judges (`suitesteps.Step`, `validation.judges`), run by the same
    flow (`validation.flow`, ``origin = "gate"``), optionally with one healthy idle peer of
    the same pool for a step across two machines. Off unless enabled.

    What the gate's answer does is the life cycle's (`slurm_heal.policy.postgate`): pass ->
    resumed; a clear failure -> the remediation fails (L5) and E1 follows; interrupted (the
    job cancelled, timed out, the node or the peer gone) -> tried again ``retries`` times,
    then a person. This is only the section; the job's Python, user, results directory and
    placeholders' values come from ``[validation]``.
    """

    enabled: bool = False
    vendor: str = "nvidia"  # whose suite runs; "default" is the fallback suite
    suites: dict[str, tuple[Step, ...]] = Field(default_factory=dict)  # vendor -> steps
    # The whole gate, from its request to its verdict: the job's time limit (sbatch
    # --time, Slurm ends it: TIMEOUT) and the longest it waits for the node (or a peer).
    timeout: StepDuration = timedelta(minutes=10)
    # An interrupted gate (nothing concluded) is run again this many times, then the
    # remediation goes to a person. A clear failure is never run again.
    retries: int = Field(default=1, ge=0, le=3)
    reservation_prefix: str = Field(default="slurm-heal-gate-", pattern=r"^[A-Za-z0-9_.-]+$")

    @field_validator("suites")
    @classmethod
    def _unique(cls, value: dict[str, tuple[Step, ...]]) -> dict[str, tuple[Step, ...]]:
        return unique_step_names(value)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta) -> timedelta:
        if value < timedelta(minutes=1):
            raise ValueError("must be at least 1m (sbatch --time counts whole minutes)")
        if value > MAX_TIMEOUT:
            raise ValueError("more than the 2h a post-repair gate may take (SPEC V4: a short "
                             "suite; the vacated-machine validation is [validation])")
        return value

    @model_validator(mode="after")
    def _steps_when_enabled(self) -> Gate:
        for vendor, steps in self.suites.items():
            for i, step in enumerate(steps):
                if step.timeout > self.timeout:
                    # Slurm ends the job at gate.timeout: such a step could only ever be
                    # interrupted, never judged.
                    raise ValueError(
                        f"suites.{vendor}[{i}] ({step.name}): its timeout "
                        f"{format_duration(step.timeout)} is longer than gate.timeout "
                        f"{format_duration(self.timeout)} (the job's time limit); give the "
                        "step a shorter timeout (a step's default is 30m) or the gate a "
                        "longer one")
        if self.enabled and not self.steps():
            raise ValueError(f"gate.enabled = true but no suite for vendor {self.vendor!r} "
                             f"(nor a \"default\" one): add [[gate.suites.{self.vendor}]] "
                             "steps, or turn the gate off")
        return self

    def steps(self) -> tuple[Step, ...]:
        """The steps for the gate's vendor, else the ``default`` suite, else none."""
        return self.suites.get(self.vendor, self.suites.get("default", ()))

    @property
    def needs_peer(self) -> bool:
        return any(s.peer for s in self.steps())


class ProviderSection(BaseModel):
    """The ``[provider]`` envelope, open to third-party providers: ``kind`` is the
    provider's type as the file names it (None when missing or not a string), ``table``
    the section as written, validated by the provider's own model when the provider is
    built (providers/settings.py, `make_provider`, in the words it always had)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str | None = None
    table: Mapping[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _envelope(cls, raw: Any) -> Any:
        # the file's table (any keys: the provider's own model reads them) -> the envelope
        if isinstance(raw, Mapping) and not isinstance(raw.get("table"), Mapping):
            kind = raw.get("type")
            return {"kind": kind if isinstance(kind, str) and kind else None,
                    "table": dict(raw)}
        return raw

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ProviderSection:
        """The envelope of a ``[provider]`` table as the file wrote it."""
        return cls.model_validate(dict(raw))


# Each typed section of the policy file: its model and how `read_section` names its keys
# (the words each subsystem's reader always used).
SECTIONS: dict[str, tuple[type[BaseModel], str, str]] = {
    "controller": (ControllerSettings, "[]", "docs/policy.md"),
    "api": (ApiSettings, "[]", "docs/policy.md"),
    "notify": (NotifySettings, ".", "docs/policy.md"),
    "metrics": (MetricsSettings, "[]", "docs/policy.md"),
    "validation": (Validation, ".", "docs/validation.md"),
}


def read_sections(data: Mapping[str, Any], *, file: str) -> dict[str, Any]:
    """The typed sections of a policy document, each read by `read_section` (ConfigError
    naming ``file``, the key and why) and the ``[provider]`` envelope; sections absent
    from ``data`` (or not tables) are left out."""
    out: dict[str, Any] = {}
    for key, (model, index, docs) in SECTIONS.items():
        if isinstance(data.get(key), dict):
            out[key] = read_section(model, data[key], file=file, key=key, index=index,
                                    docs=docs)
    if isinstance(data.get("provider"), dict):
        out["provider"] = ProviderSection.of(data["provider"])
    return out  # (a section that is not a table is refused by `Policy` itself, in its words)
