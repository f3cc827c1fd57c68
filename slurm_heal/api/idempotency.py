"""Idempotency keys: a retried POST never makes two commands (SPEC O5, S6).

A client sends ``Idempotency-Key: <its own unique string>`` with a POST. The first time,
the request runs and its answer is kept (24 hours, like an inbox command); a retry with
the same key from the same principal gets the same answer back without running again,
even after the daemon consumed the command. The same key with a different request is
refused (422): that is a client bug, not a retry.

Two more things make a retry safe even when the server died between queueing and
keeping the answer: the command id is derived from the key (`command_id`), and the
store never adds a command whose id is already in its inbox.

The answers live in ``<state_dir>/api-idempotency.json``, written like the store
(lock, temp file, fsync, rename). Only successful answers are kept: a failed request
wrote nothing, so running it again is safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_heal import fsio
from slurm_heal.errors import StoreError, StoreLocked

FILE = "api-idempotency.json"
TTL = timedelta(hours=24)
MAX_KEY = 255
LOCK_TIMEOUT = 10.0


@dataclass(frozen=True)
class Kept:
    """An answer kept for a key."""

    fingerprint: str
    status: int
    body: dict[str, Any]


def command_id(principal: str, key: str) -> str:
    """The inbox command id for a key: the same key always names the same command."""
    return "c-" + hashlib.sha256(f"idem|{principal}|{key}".encode()).hexdigest()[:16]


def fingerprint(method: str, path: str, body: Any) -> str:
    return hashlib.sha256(json.dumps([method, path, body], sort_keys=True,
                                     default=str).encode()).hexdigest()


def key_problem(key: str) -> str | None:
    """Why a key is unusable, or None."""
    if not key or len(key) > MAX_KEY or not key.isprintable():
        return f"Idempotency-Key must be 1 to {MAX_KEY} printable characters"
    return None


class Keys:
    """The kept answers of one store directory."""

    def __init__(self, state_dir: Path) -> None:
        self.file = state_dir / FILE
        self.lock_file = state_dir / (FILE + ".lock")

    @staticmethod
    def _slot(principal: str, key: str) -> str:
        return hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest()

    @contextlib.contextmanager
    def held(self) -> Iterator[Session]:
        """Hold the lock for check → run → keep, so two retries racing each other run
        the request once."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(fsio.locked(self.lock_file, LOCK_TIMEOUT))
            except fsio.LockTimeout:
                raise StoreLocked(f"{self.lock_file}: held by another request for "
                                  f"more than {LOCK_TIMEOUT:g}s") from None
            except OSError as exc:
                raise StoreError(f"cannot open {self.lock_file}: {exc}") from exc
            yield Session(self)

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: only retries of the last day are affected
        return doc if isinstance(doc, dict) else {}

    def _write(self, doc: dict[str, Any]) -> None:
        fsio.atomic_write(self.file, json.dumps(doc), 0o600)


class Session:
    """Inside `Keys.held`: look a key up, keep an answer."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def get(self, principal: str, key: str) -> Kept | None:
        item = self.keys._read().get(Keys._slot(principal, key))
        if not isinstance(item, dict):
            return None
        try:
            return Kept(str(item["fingerprint"]), int(item["status"]), dict(item["body"]))
        except (KeyError, TypeError, ValueError):
            return None

    def keep(self, principal: str, key: str, kept: Kept, now: datetime | None = None) -> None:
        at = now or datetime.now(timezone.utc)
        doc = self.keys._read()
        cutoff = (at - TTL).isoformat()
        doc = {k: v for k, v in doc.items() if isinstance(v, dict) and str(v.get("at")) >= cutoff}
        doc[Keys._slot(principal, key)] = {"fingerprint": kept.fingerprint,
                                           "status": kept.status, "body": kept.body,
                                           "at": at.isoformat()}
        self.keys._write(doc)
