"""The settings of the hardware-ticket sinks (SPEC V2): each ``[[validation.tickets]]``
entry as a typed model, and the Jinja2 environment a ticket's title and body are
written in (its filters, so that a template is compiled, and checked, as it is rendered).

A low module (pydantic; Jinja2 only when a template is compiled), so that the
``[validation]`` section checks its sinks itself (`sections.Validation`) and the policy
loader refuses a bad sink as `slurm-heal policy check` does (issue 33). What a sink
does (write, post) is `slurm_heal.validation.tickets`, whose sinks are these settings
with their behaviour.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from slurm_heal.suitesteps import Duration

TITLE = "[slurm-heal] {{ ticket.summary }}"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _brief(value: Any) -> str:
    """A measured/expected dict in a table cell: ``key=value`` pairs, long parts cut."""
    if not value:
        return ""
    if not isinstance(value, dict):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = ", ".join(
            f"{k}={v}" if isinstance(v, (int, float, str)) and not isinstance(v, bool)
            else f"{k}={json.dumps(v, separators=(',', ':'))}"
            for k, v in sorted(value.items()))
    return text if len(text) <= 300 else text[:297] + "..."


def _environment() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment
    env = SandboxedEnvironment(undefined=StrictUndefined, trim_blocks=True,
                               lstrip_blocks=True, keep_trailing_newline=True,
                               autoescape=False)
    env.filters["cell"] = _cell
    env.filters["brief"] = _brief
    return env


def compile_template(source: str, what: str) -> Any:
    """``source`` compiled in the tickets' Jinja2 environment; ValueError (in the words
    a config error gives) when it does not compile."""
    from jinja2 import TemplateError
    try:
        return _environment().from_string(source)
    except TemplateError as exc:
        raise ValueError(f"{what} does not compile: {exc}") from None


class SinkSettings(BaseModel):
    """Frozen, no unknown keys: every sink's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class DirectorySettings(SinkSettings):
    """``{kind = "directory", path = "/var/lib/slurm-heal/tickets"}``."""

    kind: Literal["directory"] = "directory"
    path: str


class HttpSettings(SinkSettings):
    timeout: Duration = timedelta(seconds=10)  # per request
    retries: int = Field(default=3, ge=0, le=10)  # more tries on 5xx/429/connection errors
    backoff: Duration = timedelta(seconds=1)  # before try n+1: backoff * 2^n
    token_env: str = ""  # the environment variable holding the token; never the token


class WebhookSettings(HttpSettings):
    """``{kind = "webhook", url = "https://...", token_env = "HOOK_TOKEN"}``.

    The body is the ticket as JSON plus ``logs`` (where the whole logs are: the
    directory sink's archive when one is configured, else the results directory) and
    ``log_tails`` (the last 4 KiB of each failed or erroring step's log). A body larger
    than ``max_body_bytes`` is sent without the log tails (``log_tails_dropped``).
    Returns the answer's ``url``/``id``/``key`` when it gives one, else the URL posted to.
    """

    kind: Literal["webhook"] = "webhook"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    max_body_bytes: int = Field(default=1_000_000, ge=4096)


class TemplatedSettings(HttpSettings):
    title: str = TITLE  # Jinja2, one line
    template: str = ""  # a Jinja2 file for the body; empty: the built-in one
    labels: list[str] = Field(default_factory=lambda: ["hardware", "slurm-heal"])

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        compile_template(value, "title")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value:
            try:
                source = Path(value).read_text()
            except OSError as exc:
                raise ValueError(f"cannot read the template {value}: {exc.strerror}") from None
            compile_template(source, f"the template {value}")
        return value


class GithubSettings(TemplatedSettings):
    """``{kind = "github", repo = "acme/hw-tickets", token_env = "GITHUB_TOKEN"}``."""

    kind: Literal["github"] = "github"
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    api_url: str = Field(default="https://api.github.com", pattern=r"^https?://")
    token_env: str = "GITHUB_TOKEN"


class JiraSettings(TemplatedSettings):
    """``{kind = "jira", url = "https://jira.example", project = "HW", token_env = ...}``.

    With ``user_env`` the token is sent as basic auth with that user (Jira Cloud's
    e-mail + API token); without, as a bearer token (a Data Center personal token).
    """

    kind: Literal["jira"] = "jira"
    url: str = Field(pattern=r"^https?://")
    project: str = Field(pattern=r"^[A-Z][A-Z0-9_]+$")
    issuetype: str = "Bug"
    token_env: str = "JIRA_TOKEN"
    user_env: str = ""


SINK_SETTINGS: dict[str, type[SinkSettings]] = {
    "directory": DirectorySettings, "webhook": WebhookSettings, "github": GithubSettings,
    "jira": JiraSettings}


def sink_problem(index: int, item: Any, kinds: Mapping[str, type[BaseModel]] = SINK_SETTINGS
                 ) -> tuple[str, str, type[BaseModel] | None]:
    """What is wrong with entry ``index`` before its model reads it: (the key under
    ``validation``, why, None), or ("", "", the model to read it with)."""
    kind = item.get("kind") if isinstance(item, dict) else None
    cls = kinds.get(str(kind))
    where = f"tickets[{index}]"
    if cls is None:
        return (f"{where}.kind", f"unknown ticket sink kind {kind!r} (known: "
                f"{', '.join(kinds)})", None)
    if "token" in item:
        return (f"{where}.token", "a token is never written in the file: name the "
                "environment variable that holds it in token_env", None)
    return "", "", cls
