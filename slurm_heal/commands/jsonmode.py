"""``--json`` for every command (SPEC I4): the one option, and the shapes around it.

``json_option`` marks the invocation as JSON (``ctx.meta["slurm_heal.json"]``), read by
the CLI's error handler (`slurm_heal.cli._fail`: an error is then one JSON object on
stdout) and by `commands.admin` (no ``store`` line on stderr). Long-running commands
(``daemon``, ``serve``) log JSON lines under ``--json`` through `JsonLogFormatter`; a
log record's ``fields`` (``extra={"fields": {...}}``) become keys of its line, so the
start line says ``{"event": "start", "provider": ...}`` for a script to read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, overload

import click

F = TypeVar("F", bound=Callable[..., Any])
META = "slurm_heal.json"


def _json_mode(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:  # read by admin._location (no stderr line) and the CLI's error handler (JSON)
        ctx.find_root().meta[META] = True
    return value


DEFAULT_HELP = ("Print JSON instead of text; an error is then one JSON object on stdout "
                "(SPEC I4, docs/cli.md).")


@overload
def json_option(func: F) -> F: ...


@overload
def json_option(*, help: str) -> Callable[[F], F]: ...


def json_option(func: F | None = None, *, help: str = DEFAULT_HELP) -> F | Callable[[F], F]:
    """``--json``, eager so that a later option's error is already printed as JSON."""
    def decorate(f: F) -> F:
        return click.option("--json", "as_json", is_flag=True, is_eager=True,
                            callback=_json_mode, help=help)(f)
    return decorate(func) if func is not None else decorate


def is_json() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(META))


def emit_line(obj: dict[str, Any], err: bool = False) -> None:
    """One JSON object on one line (JSON lines: the shape of every streaming output)."""
    click.echo(json.dumps(obj, default=str), err=err)


class JsonLogFormatter(logging.Formatter):
    """A log record as one JSON line: ``at``, ``level``, ``logger``, ``message``, plus
    the record's ``fields`` (and ``exception`` when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str, as_json: bool) -> None:
    """The long-running commands' logging: text lines, or JSON lines with ``--json``."""
    if as_json:
        handler = logging.StreamHandler()
        handler.setFormatter(JsonLogFormatter())
        logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
    else:
        logging.basicConfig(level=getattr(logging, level),
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
