"""The node check's state file: cursors, latched kernel faults, alert first-seen times,
restart history, and what we set in Slurm (so we clear exactly that, and only that).

One JSON file in the state dir, written atomically (temp file + fsync + rename) under
an flock, because the agent and HealthCheckProgram may run at the same time. A corrupt
file is set aside (``state.json.corrupt-<time>``) and the check starts afresh: the
worst that costs is re-reading the bounded first chunk of the kernel log.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from slurm_heal.errors import CheckError

VERSION = 1
FILE = "state.json"


def empty(boot: str) -> dict[str, Any]:
    """A fresh state for this boot."""
    return {"v": VERSION, "boot_id": boot, "cursor": None, "kernel": {}, "gpu_uuids": {},
            "alerts": {}, "services": {}, "published": {"extra": False, "drained": ""}}


def load(state_dir: str, boot: str) -> tuple[dict[str, Any], bool]:
    """The state, and whether it existed. A new boot id keeps only what survives a
    reboot (the file cursor, what we published in Slurm); kernel faults start afresh.
    """
    path = os.path.join(state_dir, FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or data.get("v") != VERSION:
            raise ValueError("not a version 1 state object")
    except FileNotFoundError:
        return empty(boot), False
    except (ValueError, UnicodeDecodeError):
        with contextlib.suppress(OSError):
            os.replace(path, f"{path}.corrupt-{int(time.time())}")
        return empty(boot), False
    fresh = empty(boot)
    for key, value in fresh.items():
        data.setdefault(key, value)
    if data.get("boot_id") != boot:
        cursor = data.get("cursor")
        # kmsg sequence numbers and journald boots restart; a file's offset does not
        # (re-reading pre-reboot lines would re-raise faults the reboot fixed).
        keep = (isinstance(cursor, dict) and cursor.get("kind") == "file"
                and not str(cursor.get("path", "")).endswith("/dev/kmsg"))
        # The kept file cursor is marked: its first read skips lines older than this
        # boot (those written after our last run, before the reboot; sources.read_file).
        fresh["cursor"] = dict(cursor, new_boot=True) if keep and cursor else None
        fresh["published"] = data.get("published", fresh["published"])
        fresh["services"] = {}
        return fresh, True
    return data, True


def save(state_dir: str, data: dict[str, Any]) -> None:
    """Write the state atomically."""
    try:
        os.makedirs(state_dir, mode=0o750, exist_ok=True)
        path = os.path.join(state_dir, FILE)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"), sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise CheckError(f"cannot write the check state in {state_dir}: {exc.strerror}") from None


@contextlib.contextmanager
def locked(state_dir: str, timeout: float = 10.0) -> Iterator[None]:
    """Hold the state dir's lock (the agent and a HealthCheckProgram run may overlap)."""
    try:
        os.makedirs(state_dir, mode=0o750, exist_ok=True)
        fd = os.open(os.path.join(state_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o640)
    except OSError as exc:
        raise CheckError(f"cannot use the state dir {state_dir}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CheckError(
                        f"another slurm-heal check holds {state_dir}/lock for over {timeout:g}s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
