"""Hardware tickets for machines that clearly failed validation (SPEC V2).

A ticket carries the node, the machine's identity (serials, instance id, host), the fault
history and escalation path, the suite's results and its logs. Sinks (``[[validation.
tickets]]`` in the policy file, see docs/validation.md):

- ``directory``: one JSON ticket plus a tar of the logs (``<id>.json``,
  ``<id>.logs.tar.gz``);
- ``webhook``: the ticket as JSON POSTed to a URL, with an ``Idempotency-Key`` header
  (the ticket id), the tail of each step's log inline and a reference to the whole logs;
- ``github``: an issue (title, body and labels rendered from Jinja2 templates) through
  ``POST /repos/{owner}/{repo}/issues``; returns the issue's URL;
- ``jira``: an issue through ``POST /rest/api/2/issue``; returns the issue key.

Secrets are never in the file: a sink names the environment variable that holds its
token (``token_env``). Every HTTP call has a timeout and a bounded retry with backoff on
5xx/429 and connection errors (urllib3's Retry; Retry-After is not obeyed, so a
receiver cannot hold the caller past ``retries`` x ``timeout`` plus the backoff). `file_all` files a ticket with every
sink, the directory sinks first, so a sink that fails never stops the others and the
local copy is written whatever the network does.
"""

from __future__ import annotations

import base64
import json
import os
import tarfile
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import requests
from pydantic import BaseModel, ConfigDict, Field
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from slurm_heal import fsio
from slurm_heal.config import read_section
from slurm_heal.errors import ConfigError, TicketError
from slurm_heal.sinks import (
    DirectorySettings,
    GithubSettings,
    JiraSettings,
    SinkSettings,
    WebhookSettings,
    compile_template,
    sink_problem,
)
from slurm_heal.suitesteps import SuiteResult

LOG_TAIL = 4096  # bytes of each failing or erroring step's log put inline in a webhook body


class Ticket(BaseModel):
    """One hardware ticket: what failed, on which machine, with the evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str  # stable: the validation's id, so a re-filed ticket is the same ticket
    node: str
    identity: dict[str, str] = Field(default_factory=dict)  # serials, instance_id, host
    summary: str
    faults: tuple[dict[str, Any], ...] = ()  # the fault history (newest last)
    escalation: tuple[str, ...] = ()  # the actions taken before, in order
    results: SuiteResult
    created: str
    # SPEC E7: the machine's ledger (`ledger.machine_json`) and the same in one line
    ledger: dict[str, Any] = Field(default_factory=dict)
    ledger_summary: str = ""


def summarize(results: SuiteResult) -> str:
    """One line for a ticket's title: the node and the steps that failed, with why."""
    failed = [s for s in results.steps if s.outcome == "fail"]
    if not failed:
        return f"{results.node}: validation {results.outcome}"
    parts = [f"{s.name} ({s.reason})" if s.reason else s.name for s in failed]
    line = f"{results.node} failed hardware validation: " + "; ".join(parts)
    return line if len(line) <= 200 else line[:197] + "..."


# ------------------------------------------------------------------ templates

BODY = """\
<!-- slurm-heal ticket {{ ticket.id }} -->
**Node** `{{ ticket.node }}` failed hardware validation ({{ results.outcome }}) on \
{{ results.finished or ticket.created }}{% if results.peer %}, peer `{{ results.peer }}`\
{% endif %}, vendor suite `{{ results.vendor }}`.

### Machine
{% for key, value in ticket.identity.items() %}
- {{ key }}: `{{ value }}`
{% else %}
- (no identity recorded)
{% endfor %}

{% if ticket.ledger_summary %}
### Machine ledger (SPEC E7)
{{ ticket.ledger_summary }}

{% endif %}
### Fault history
{% for fault in ticket.faults %}
- {% for key, value in fault.items() %}{{ key }}={{ value }}{% if not loop.last %}, \
{% endif %}{% endfor %}

{% else %}
- (none recorded)
{% endfor %}

### Escalation
{% if ticket.escalation %}{{ ticket.escalation | join(" → ") }}{% else %}(none){% endif %}


### Results
| step | outcome | reason | measured | expected | log |
| --- | --- | --- | --- | --- | --- |
{% for s in results.steps %}
| {{ s.name }} ({{ s.kind }}) | **{{ s.outcome }}** | {{ s.reason | cell }} | \
{{ s.measured | brief | cell }} | {{ s.expected | brief | cell }} | {{ s.log }} |
{% endfor %}

### Logs
{{ logs }}
"""


# Jira's REST API v2 takes wiki markup, not Markdown.
JIRA_BODY = """\
slurm-heal ticket {{ ticket.id }}: node *{{ ticket.node }}* failed hardware validation \
({{ results.outcome }}) on {{ results.finished or ticket.created }}\
{% if results.peer %}, peer {{ results.peer }}{% endif %}, vendor suite {{ results.vendor }}.

h3. Machine
{% for key, value in ticket.identity.items() %}
* {{ key }}: {{ '{{' }}{{ value }}{{ '}}' }}
{% else %}
* (no identity recorded)
{% endfor %}

{% if ticket.ledger_summary %}
h3. Machine ledger (SPEC E7)
{{ ticket.ledger_summary }}

{% endif %}
h3. Fault history
{% for fault in ticket.faults %}
* {% for key, value in fault.items() %}{{ key }}={{ value }}{% if not loop.last %}, \
{% endif %}{% endfor %}

{% else %}
* (none recorded)
{% endfor %}

h3. Escalation
{% if ticket.escalation %}{{ ticket.escalation | join(" -> ") }}{% else %}(none){% endif %}


h3. Results
||step||outcome||reason||measured||expected||log||
{% for s in results.steps %}
|{{ s.name }} ({{ s.kind }})|*{{ s.outcome }}*|{{ s.reason | cell }}|\
{{ s.measured | brief | cell }}|{{ s.expected | brief | cell }}|{{ s.log }}|
{% endfor %}

h3. Logs
{{ logs }}
"""


def render(template: str, ticket: Ticket, logs: str) -> str:
    """Render a Jinja2 template with ``ticket``, ``results`` and ``logs`` (a reference)."""
    from jinja2 import TemplateError
    try:
        return str(compile_template(template, "the template").render(
            ticket=ticket.model_dump(mode="json"),
            results=ticket.results.model_dump(mode="json"), logs=logs))
    except (TemplateError, ValueError) as exc:
        raise TicketError(f"ticket {ticket.id}: the template does not render: {exc}") from None


# ------------------------------------------------------------------ sinks

class DirectorySink(DirectorySettings):
    """``{kind = "directory", path = "/var/lib/slurm-heal/tickets"}``."""

    def file(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> str:
        """Write ``<id>.json`` and ``<id>.logs.tar.gz``; returns the ticket's path."""
        root = Path(self.path)
        try:
            root.mkdir(parents=True, exist_ok=True)
            archive = root / f"{ticket.id}.logs.tar.gz"
            with fsio.atomic_open(archive, 0o644) as fh, \
                    tarfile.open(fileobj=fh, mode="w:gz") as tar:
                if logs.is_dir():
                    tar.add(logs, arcname=ticket.id)
            doc = root / f"{ticket.id}.json"
            fsio.atomic_write(doc, json.dumps({**ticket.model_dump(mode="json"),
                                               "logs": archive.name}, indent=1) + "\n", 0o644)
        except OSError as exc:
            raise TicketError(f"directory sink {self.path}: {exc}") from None
        return str(doc)


class _HttpSink:
    """What an HTTP sink does; its settings are `HttpSettings` (a plain mixin: the
    settings classes alone make the fields, pydantic merges no two chains of them)."""

    if TYPE_CHECKING:  # the settings' fields, for the type checker
        timeout: timedelta
        retries: int
        backoff: timedelta
        token_env: str

    def _token(self, required: bool) -> str:
        if not self.token_env:
            if required:
                raise TicketError(f"{self.kind_name()} sink: token_env is not set")
            return ""
        token = os.environ.get(self.token_env, "")
        if not token and required:
            raise TicketError(f"{self.kind_name()} sink: the environment variable "
                              f"{self.token_env} is not set")
        return token

    def kind_name(self) -> str:
        return str(getattr(self, "kind", "http"))

    def _session(self) -> requests.Session:
        retry = Retry(total=self.retries, connect=self.retries, read=self.retries,
                      status=self.retries, backoff_factor=self.backoff.total_seconds(),
                      status_forcelist=(429, 500, 502, 503, 504),
                      allowed_methods=None,  # POST too: the receivers dedupe by the key
                      # A receiver's Retry-After could hold the daemon for an hour;
                      # our own backoff bounds the wait instead.
                      respect_retry_after_header=False, raise_on_status=False)
        session = requests.Session()
        session.mount("http://", HTTPAdapter(max_retries=retry))
        session.mount("https://", HTTPAdapter(max_retries=retry))
        return session

    def _post(self, url: str, body: Any, headers: dict[str, str]) -> Any:
        """POST JSON; the answer's JSON (a clear TicketError for anything else)."""
        what = f"{self.kind_name()} sink {url}"
        try:
            with self._session() as session:
                resp = session.post(url, json=body, headers=headers,
                                    timeout=self.timeout.total_seconds())
        except requests.RequestException as exc:
            raise TicketError(f"{what}: {type(exc).__name__}: {exc}") from None
        if not 200 <= resp.status_code < 300:
            raise TicketError(f"{what}: HTTP {resp.status_code}: {resp.text[:300]}")
        if not resp.content.strip():
            return None
        try:
            return resp.json()
        except ValueError:
            raise TicketError(f"{what}: the answer is not JSON: {resp.text[:200]!r}") from None


class WebhookSink(_HttpSink, WebhookSettings):
    """``{kind = "webhook", url = "https://...", token_env = "HOOK_TOKEN"}``: the
    settings' docstring says what is sent (`slurm_heal.sinks.WebhookSettings`)."""

    def body(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> dict[str, Any]:
        doc: dict[str, Any] = {**ticket.model_dump(mode="json"),
                               "logs": logs_ref or str(logs), "log_tails": {}}
        for step in ticket.results.steps:
            if step.outcome == "pass" or not step.log:
                continue
            try:
                with open(logs / step.log, "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, fh.tell() - LOG_TAIL))
                    doc["log_tails"][step.name] = fh.read().decode("utf-8", "replace")
            except OSError:
                continue
        if len(json.dumps(doc)) > self.max_body_bytes:
            doc["log_tails"] = {}
            doc["log_tails_dropped"] = True
        if len(json.dumps(doc)) > self.max_body_bytes:
            raise TicketError(f"webhook sink {self.url}: ticket {ticket.id} is larger than "
                              f"max_body_bytes={self.max_body_bytes} even without log tails")
        return doc

    def file(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> str:
        headers = {"Idempotency-Key": ticket.id, **self.headers}
        token = self._token(required=False)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        answer = self._post(self.url, self.body(ticket, logs, logs_ref), headers)
        if isinstance(answer, dict):
            for key in ("url", "html_url", "key", "id"):
                if isinstance(answer.get(key), (str, int)) and str(answer[key]):
                    return str(answer[key])
        return self.url


class _TemplatedSink(_HttpSink):
    """What a sink with a Jinja2 title and body does; its settings: `TemplatedSettings`."""

    default_body: ClassVar[str] = BODY
    if TYPE_CHECKING:
        title: str
        template: str
        labels: list[str]

    def _body_source(self) -> str:
        if not self.template:
            return self.default_body
        try:
            return Path(self.template).read_text()
        except OSError as exc:
            raise TicketError(f"{self.kind_name()} sink: cannot read the template "
                              f"{self.template}: {exc.strerror}") from None

    def texts(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> tuple[str, str]:
        """The title (one line) and the body of the issue."""
        where = logs_ref or str(logs)
        title = " ".join(render(self.title, ticket, where).split())
        return title[:250], render(self._body_source(), ticket, where)


class GithubSink(_TemplatedSink, GithubSettings):
    """``{kind = "github", repo = "acme/hw-tickets", token_env = "GITHUB_TOKEN"}``."""

    def payload(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> dict[str, Any]:
        title, body = self.texts(ticket, logs, logs_ref)
        return {"title": title, "body": body[:65000], "labels": list(self.labels)}

    def file(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> str:
        url = f"{self.api_url.rstrip('/')}/repos/{self.repo}/issues"
        headers = {"Authorization": f"Bearer {self._token(required=True)}",
                   "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28", "Idempotency-Key": ticket.id}
        answer = self._post(url, self.payload(ticket, logs, logs_ref), headers)
        if not isinstance(answer, dict) or not isinstance(answer.get("html_url"), str):
            raise TicketError(f"github sink {url}: the answer has no html_url: "
                              f"{json.dumps(answer)[:200]}")
        return str(answer["html_url"])


class JiraSink(_TemplatedSink, JiraSettings):
    """``{kind = "jira", url = "https://jira.example", project = "HW", token_env = ...}``
    (`slurm_heal.sinks.JiraSettings`)."""

    default_body: ClassVar[str] = JIRA_BODY

    def payload(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> dict[str, Any]:
        title, body = self.texts(ticket, logs, logs_ref)
        return {"fields": {"project": {"key": self.project},
                           "issuetype": {"name": self.issuetype},
                           "summary": title, "description": body[:32000],
                           "labels": [label.replace(" ", "-") for label in self.labels]}}

    def file(self, ticket: Ticket, logs: Path, logs_ref: str = "") -> str:
        url = f"{self.url.rstrip('/')}/rest/api/2/issue"
        token = self._token(required=True)
        headers = {"Accept": "application/json", "Idempotency-Key": ticket.id}
        if self.user_env:
            user = os.environ.get(self.user_env, "")
            if not user:
                raise TicketError(f"jira sink: the environment variable {self.user_env} "
                                  "is not set")
            pair = base64.b64encode(f"{user}:{token}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        else:
            headers["Authorization"] = f"Bearer {token}"
        answer = self._post(url, self.payload(ticket, logs, logs_ref), headers)
        if not isinstance(answer, dict) or not isinstance(answer.get("key"), str):
            raise TicketError(f"jira sink {url}: the answer has no issue key: "
                              f"{json.dumps(answer)[:200]}")
        return str(answer["key"])


Sink = DirectorySink | WebhookSink | GithubSink | JiraSink
SINKS: dict[str, type[SinkSettings]] = {"directory": DirectorySink, "webhook": WebhookSink,
                                 "github": GithubSink, "jira": JiraSink}


def sinks_from(items: tuple[dict[str, Any], ...] | list[dict[str, Any]],
               source: str = "<dict>") -> list[Sink]:
    """Validate ``[[validation.tickets]]``. Raises ConfigError naming the entry (the
    ``[validation]`` section checks the same when the policy is loaded: `sinks`)."""
    out: list[Sink] = []
    for i, item in enumerate(items):
        key, why, cls = sink_problem(i, item, SINKS)
        if cls is None:
            raise ConfigError(why, file=source, key=f"validation.{key}")
        out.append(read_section(cls, item, file=source,  # type: ignore[arg-type]
                                key=f"validation.tickets[{i}]", docs="docs/validation.md"))
    return out


def file_all(sinks: Sequence[Sink], ticket: Ticket,
             logs: Path) -> list[tuple[str, str | Exception]]:
    """File ``ticket`` with every sink: ``(kind, reference)`` or ``(kind, the error)``.

    Directory sinks go first, so the ticket and its logs are on disk whatever the
    network does, and the others point at that archive. One sink failing never stops
    the others; the errors are returned, not raised.
    """
    done: list[tuple[str, str | Exception]] = []
    logs_ref = ""
    ordered = sorted(sinks, key=lambda s: s.kind != "directory")
    for sink in ordered:
        try:
            ref = sink.file(ticket, logs, logs_ref)
        except TicketError as exc:
            done.append((sink.kind, exc))
            continue
        except Exception as exc:  # one sink never stops the others, whatever it raised
            done.append((sink.kind, TicketError(f"{sink.kind} sink: {type(exc).__name__}: "
                                                f"{exc}")))
            continue
        if sink.kind == "directory" and not logs_ref:
            logs_ref = str(Path(ref).with_name(f"{ticket.id}.logs.tar.gz"))
        done.append((sink.kind, ref))
    return done
