"""The controller's heartbeat (SPEC O1): liveness that does not lie.

The daemon writes ``<state_dir>/heartbeat`` after every cycle it tried, as one JSON
object. ``at`` says the process is alive (it tried a cycle then); ``last_success`` says
when a cycle last *read Slurm and the store and decided*; ``last_error`` and
``last_error_at`` say what failed since. A blind daemon (Slurm unreachable, the store
busy or corrupt) keeps ``at`` fresh but not ``last_success``: `slurm-heal status` says
so in words and ``status --check`` exits non-zero.

A heartbeat written by an older build (one ISO time on one line) is read as a success at
that time; unreadable content counts as a beat at the file's modification time.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ConfigDict, ValidationError

from slurm_heal import fsio, isotime
from slurm_heal.models import Record


class Heartbeat(Record):
    """What the daemon says about itself after each cycle it tried."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    at: datetime  # the last cycle tried: the process is alive
    last_success: datetime | None = None  # the last cycle that read Slurm and decided
    last_error: str = ""  # what failed in the last failed cycle ("" when none failed yet)
    last_error_at: datetime | None = None
    failures_since_success: int = 0
    pid: int | None = None
    version: str = ""
    mode: str = ""  # the policy's mode: normal / recommend-only
    interval: float | None = None  # seconds between cycles (status judges staleness by it)
    cycles: int = 0
    # What does not work beside the cycles that succeed (issue 34 item 4: the metrics port
    # held by another program): said by `status`, retried by the daemon, never a failure.
    problems: tuple[str, ...] = ()

    @property
    def failing(self) -> bool:
        """The last cycle tried did not succeed."""
        return self.failures_since_success > 0

    def write(self, path: Path) -> None:
        """Atomically replace ``path`` (fsio: temp file, fsync, rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(path, self.model_dump_json() + "\n", 0o644)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def read(path: Path) -> Heartbeat | None:
    """The heartbeat in ``path``, or None when there is none."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text.startswith("{"):
        try:
            return Heartbeat.model_validate(json.loads(text))
        except (ValueError, ValidationError):
            pass
    else:
        try:
            at = _utc(isotime.parse(text.splitlines()[0])) if text else None
        except ValueError:
            at = None
        if at is not None:  # an older build's one-line heartbeat: a success then
            return Heartbeat(at=at, last_success=at)
    try:
        mtime = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None
    return Heartbeat(at=mtime)
