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


def journal_option(func: F) -> F:
    """``--journal/--no-journal``: syslog priorities on log lines (default: when stderr
    is the journal, as under the systemd unit)."""
    return click.option("--journal/--no-journal", "journal", default=None,
                        help="Begin each log line with its syslog priority (<3> error, <4> "
                             "warning, <6> info) for journald. Default: when stderr is the "
                             "journal ($JOURNAL_STREAM, as under systemd).")(func)


def is_json() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(META))


def emit_line(obj: dict[str, Any], err: bool = False) -> None:
    """One JSON object on one line (JSON lines: the shape of every streaming output)."""
    click.echo(json.dumps(obj, default=str), err=err)


class JsonLogFormatter(logging.Formatter):
    """A log record as one JSON line: ``at``, ``level``, ``logger``, ``message``, plus
    the record's ``fields`` (and ``exception`` when there is one). The controller's
    ``node=``, ``remediation=``, ``rule=``, ``phase=``, ``action=``, ``effect=`` and
    ``outcome=`` (a `Where` among the message's arguments, issue 38) are keys too. With
    ``journal``, the line begins with its syslog priority (`JournalFormatter`)."""

    def __init__(self, journal: bool = False) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            where = getattr(arg, "fields", None)
            if isinstance(arg, str) and isinstance(where, dict):
                out.update(where)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        line = json.dumps(out, default=str)
        return _prefix(record) + line if self.journal else line


# syslog(3) priorities of Python's levels: what journald reads from a "<N>" prefix
PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6,
            logging.DEBUG: 7}


def _prefix(record: logging.LogRecord) -> str:
    level = max((lv for lv in PRIORITY if lv <= record.levelno), default=logging.DEBUG)
    return f"<{PRIORITY[level]}>"


class JournalFormatter(logging.Formatter):
    """Text lines for journald (issue 38): each line begins with its syslog priority
    (``<3>`` an error, ``<4>`` a warning, ``<6>`` info), which journald takes as the
    entry's PRIORITY (`journalctl -p warning` then shows warnings and worse) and strips;
    no time of our own, the journal stamps each entry. A traceback's lines stay in the
    one entry."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return _prefix(record) + super().format(record)


def stderr_is_journal(env: dict[str, str] | None = None) -> bool:
    """systemd connected stderr to the journal: ``$JOURNAL_STREAM`` names the device and
    inode of that stream (systemd.exec(5)) and they are stderr's (not a pipe or file a
    child of the service was given instead)."""
    import os

    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(2)
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError):
        return False


def setup_logging(level: str, as_json: bool, journal: bool | None = None) -> None:
    """The long-running commands' logging: text lines, or JSON lines with ``--json``.
    ``journal`` (None: when stderr is the journal): each line begins with its syslog
    priority, ``<N>``, for journald."""
    if journal is None:
        journal = stderr_is_journal()
    handler = logging.StreamHandler()
    if as_json:
        handler.setFormatter(JsonLogFormatter(journal=journal))
    elif journal:
        handler.setFormatter(JournalFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
