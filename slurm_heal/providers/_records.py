"""A small durable key -> record map for providers whose backend has no idempotency key.

The exec, slurm and openstack providers remember every idempotency key they acted on
here, so the same key never runs an action twice, even across a controller restart or
with two replicas sharing the state directory (SPEC S6). Writes are atomic (temp file,
fsync, rename) and serialised by an ``flock`` on a side lock file.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from slurm_heal import fsio
from slurm_heal.errors import ProviderError, ProviderRefused
from slurm_heal.providers.base import Operation
from slurm_heal.types import Action

# Keep the file small: an old key is only ever needed to resolve an in-flight attempt,
# which happens within minutes; a week-old key is never asked about again.
MAX_RECORDS = 5000


def operation(key: str, rec: Any) -> Operation:
    """The Operation a stored record describes (every provider record has id, node,
    action, status and optionally detail)."""
    return Operation(id=str(rec["id"]), key=key, node=str(rec["node"]),
                     action=Action(rec["action"]), status=rec["status"],
                     detail=str(rec.get("detail", "")))


def require_key(key: str) -> None:
    """Every submit carries its idempotency key (SPEC S6): none is an error, never sent."""
    if not key:
        raise ProviderError("an idempotency key is required")


def not_enabled(name: str, action: Action, enabled: Iterable[Action]) -> ProviderRefused:
    """The refusal of an action the provider does not do or was not enabled for (its
    ``actions`` key): a definite no, nothing is sent."""
    return ProviderRefused(f"{name} provider cannot {action.value} a node ({action.value!r} "
                           f"is not enabled; enabled: "
                           f"{', '.join(sorted(a.value for a in enabled)) or 'none'})")


class KeyRecords:
    """Records keyed by idempotency key, kept in ``path`` (JSON object), or in memory only
    when ``path`` is None."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path is not None else None
        self._memory: dict[str, dict[str, Any]] = {}
        self._thread_lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        """Hold the lock and yield the current records; changes made to the yielded dict
        are written back when the block exits without an error."""
        with self._thread_lock:
            if self.path is None:
                yield self._memory
                return
            lock_path = self.path.with_name(self.path.name + ".lock")
            with fsio.locked(lock_path):
                records = self._read()
                before = json.dumps(records, sort_keys=True)
                yield records
                if json.dumps(records, sort_keys=True) != before:
                    self._write(records)

    def get(self, key: str) -> dict[str, Any] | None:
        """The record for ``key``, or None."""
        with self.locked() as records:
            rec = records.get(key)
            return dict(rec) if rec is not None else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store (replace) the record for ``key``."""
        with self.locked() as records:
            records[key] = record

    def _read(self) -> dict[str, dict[str, Any]]:
        assert self.path is not None
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ProviderError(f"cannot read provider records {self.path}: {exc}") from exc
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            # Never guess: a corrupt record file could make us run an action twice.
            raise ProviderError(
                f"provider records {self.path} are not valid JSON ({exc}); "
                "move the file aside after checking which actions already ran"
            ) from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ProviderError(f"provider records {self.path}: expected a JSON object of objects")
        return data

    def _write(self, records: dict[str, dict[str, Any]]) -> None:
        assert self.path is not None
        if len(records) > MAX_RECORDS:
            # Oldest first by submit time; records without one sort first.
            ordered = sorted(records.items(), key=lambda kv: str(kv[1].get("submitted", "")))
            for key, _ in ordered[: len(records) - MAX_RECORDS]:
                del records[key]
        fsio.atomic_write(self.path, json.dumps(records, indent=1, sort_keys=True), 0o600)


class RecordedOperations:
    """Shared by the providers that keep each key's operation in `KeyRecords` (exec,
    slurm, aws, gcp, azure, oci, redfish, openstack): ``status`` answers a finished operation from
    its record and asks `_advance` where one still running stands."""

    records: KeyRecords

    def _advance(self, key: str, rec: dict[str, Any]) -> Operation:
        raise NotImplementedError

    def status(self, key: str) -> Operation | None:
        """Where the operation of ``key`` stands (advanced by one poll when running)."""
        rec = self.records.get(key)
        if rec is None:
            return None
        if rec["status"] in ("succeeded", "failed"):
            return operation(key, rec)
        return self._advance(key, rec)


class SteppedOperations(RecordedOperations):
    """Shared by the providers whose operation is a recorded sequence of platform calls,
    advanced one step per ``status`` poll (aws, gcp, azure, oci, redfish, openstack): the same key
    answers with the same operation, the intent is recorded before anything is sent, and
    a replica that recorded the key first wins (SPEC S6)."""

    name: str
    actions: frozenset[Action]

    def supports(self, action: Action) -> bool:
        """The actions this provider does and was enabled for (``actions``)."""
        return action in self.actions

    def _repeat(self, key: str, node: str, action: Action) -> Operation | None:
        """The start of every submit: an action not enabled is refused, and a key seen
        before answers with its operation (None: a new one is to be started)."""
        if not self.supports(action):
            raise not_enabled(self.name, action, self.actions)
        return self._known(key, node, action)

    def _known(self, key: str, node: str, action: Action) -> Operation | None:
        """The operation already recorded under ``key`` (a repeat submit), or None. A key
        used for another node or action is an error."""
        require_key(key)
        rec = self.records.get(key)
        if rec is None:
            return None
        if rec["node"] != node or rec["action"] != action.value:
            raise ProviderError(f"idempotency key {key!r} was used for "
                                f"{rec['action']} on {rec['node']}")
        op = self.status(key)
        assert op is not None
        return op

    def _begin(self, key: str, rec: dict[str, Any]) -> Operation:
        """Record the intent under ``key``, then take the first step."""
        with self.records.locked() as records:
            if key in records:  # another replica recorded it first
                return operation(key, records[key])
            records[key] = rec  # intent first: never send the same key twice
        return self._advance(key, rec)

