"""The node check's state file: cursors, latched kernel faults, alert first-seen times,
restart history, the faults a person's resume acknowledged (SPEC S8, this boot only),
counter samples of the telemetry detectors (``<detector>_state``: PCIe
replays, NVLink and InfiniBand error counters, since-when a condition has held), and
what we set in Slurm (so we clear exactly that, and only that).

One JSON file in the state dir, written atomically (temp file + fsync + rename) under
an flock, because the agent and HealthCheckProgram may run at the same time. A corrupt
file (bad JSON, or valid JSON whose keys hold the wrong types) is set aside
(``state.json.corrupt-<time>``) and the check starts afresh: the worst that costs is
re-reading the bounded first chunk of the kernel log (from this boot only).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator

from slurm_heal import fsio
from slurm_heal.errors import CheckError
from slurm_heal.types import Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

_SEVERITIES = frozenset(s.value for s in Severity)

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
        _check_types(data)
    except FileNotFoundError:
        return empty(boot), False
    except (ValueError, UnicodeDecodeError):
        with contextlib.suppress(OSError):
            fsio.set_aside(path, f"{path}.corrupt-{int(time.time())}")
        return empty(boot), False
    fresh = empty(boot)
    for key, value in fresh.items():
        data.setdefault(key, value)
    if data.get("boot_id") != boot:
        # Counter samples go too (counters restart with the driver); what is kept is
        # listed below.
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


def _is_map(value: Any, item: Any = None) -> bool:
    """A JSON object whose values (when ``item`` is given) all pass ``item``."""
    return isinstance(value, dict) and (item is None or all(item(v) for v in value.values()))


def _opt(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or isinstance(value, kind)


def _is_cursor(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, dict) or value.get("kind") not in ("file", "kmsg", "journal"):
        return False
    ints = ("inode", "offset", "seq")
    return (all(_opt(value.get(k), int) and not isinstance(value.get(k), bool) for k in ints)
            and _opt(value.get("path"), str) and _opt(value.get("cursor"), str)
            and _opt(value.get("new_boot"), bool))


def _is_evidence(value: Any) -> bool:
    return (isinstance(value, dict) and _opt(value.get("source"), str)
            and _opt(value.get("text"), str) and _opt(value.get("at"), str)
            and _opt(value.get("data"), dict))


def _is_latched(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("fault"), str)
            and value.get("severity") in _SEVERITIES
            and isinstance(value.get("summary"), str)
            and isinstance(value.get("count", 0), int)
            and all(isinstance(value.get(k, ""), str) for k in ("first_seen", "last_seen"))
            and isinstance(value.get("evidence", []), list)
            and all(_is_evidence(e) for e in value.get("evidence", [])))


def _is_finding(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("evidence", []), list)
            and all(_is_evidence(e) for e in value.get("evidence", [])))


# What load() hands out, key by key: the run reads these without further checks, so a
# file that parses as JSON but holds other types is as corrupt as one that does not.
_SHAPE: dict[str, Any] = {
    "boot_id": lambda v: isinstance(v, str),
    "cursor": _is_cursor,
    "kernel": lambda v: _is_map(v, _is_latched),
    "gpu_uuids": lambda v: _is_map(v, lambda u: isinstance(u, str)),
    "alerts": lambda v: _is_map(v, lambda t: isinstance(t, str)),
    "services": lambda v: _is_map(v, lambda h: isinstance(h, list)),
    "instance": lambda v: _is_map(v, lambda s: isinstance(s, str)),
    "published": lambda v: _is_map(v) and _opt(v.get("extra"), bool)
    and _opt(v.get("drained"), str) and _opt(v.get("boot"), str) and _opt(v.get("held"), str)
    # SPEC S8: fault id -> fingerprints of the evidence published while we held the node
    and _opt(v.get("seen"), dict) and all(isinstance(p, list) and all(isinstance(x, str) for x in p)
                                          for p in (v.get("seen") or {}).values()),
    # SPEC S8: fault id -> {"at": time, "evidence": [fingerprint, ...]} (this boot only)
    "acknowledged": lambda v: _is_map(v, lambda r: isinstance(r, dict)
                                      and isinstance(r.get("at", ""), str)
                                      and isinstance(r.get("evidence", []), list)
                                      and all(isinstance(x, str) for x in r.get("evidence", []))),
    "findings": lambda v: _is_map(v, lambda fs: isinstance(fs, list)
                                  and all(_is_finding(f) for f in fs)),
}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_detector_state(value: Any) -> bool:
    """``{"counters": {key: [epoch, value]}, "since": {key: epoch}}``."""
    return (_is_map(value)
            and _is_map(value.get("counters", {}), lambda s: isinstance(s, list) and len(s) == 2
                        and all(_is_number(x) for x in s))
            and _is_map(value.get("since", {}), _is_number)
            and isinstance(value.get("serials", []), list)
            and all(isinstance(s, str) for s in value.get("serials", []))
            and _is_map(value.get("domains", {}), lambda d: isinstance(d, str)))


# Per-detector counter state: one top-level key each, so detectors running in parallel
# threads never overwrite each other's samples.
DETECTOR_STATES = ("nvidia_state", "amd_state", "infiniband_state", "network_state")
for _key in DETECTOR_STATES:
    _SHAPE[_key] = _is_detector_state


def _check_types(data: dict[str, Any]) -> None:
    """Raise ValueError naming the first key whose value has the wrong type."""
    for key, ok in _SHAPE.items():
        if key in data and not ok(data[key]):
            raise ValueError(f"state key {key!r} has the wrong type")


def detector_state(data: dict[str, Any], key: str) -> tuple[dict[str, list[float]],
                                                            dict[str, float]]:
    """A detector's counter samples and since-times (copies; empty when absent)."""
    raw = data.get(key) or {}
    return ({k: [float(v[0]), float(v[1])] for k, v in (raw.get("counters") or {}).items()},
            {k: float(v) for k, v in (raw.get("since") or {}).items()})


def rate_per_minute(previous: list[float] | None, value: float, now: float) -> float | None:
    """Growth per minute of a counter since its previous ``[epoch, value]`` sample (pure).

    None on the first sample, when no time passed, and when the counter went down (a
    driver reload or reboot reset it): the new value is then only a baseline. Never the
    lifetime value: a counter that grew once years ago is not a fault today.
    """
    if previous is None:
        return None
    then, before = previous
    minutes = (now - then) / 60.0
    if minutes <= 0 or value < before:
        return None
    return (value - before) / minutes


def save(state_dir: str, data: dict[str, Any]) -> None:
    """Write the state atomically."""
    try:
        os.makedirs(state_dir, mode=0o750, exist_ok=True)
        path = os.path.join(state_dir, FILE)
        fsio.atomic_write(path, json.dumps(data, separators=(",", ":"), sort_keys=True), 0o644)
    except OSError as exc:
        raise CheckError(f"cannot write the check state in {state_dir}: {exc.strerror}") from None


@contextlib.contextmanager
def locked(state_dir: str, timeout: float = 10.0) -> Iterator[None]:
    """Hold the state dir's lock (the agent and a HealthCheckProgram run may overlap)."""
    with contextlib.ExitStack() as held:
        try:
            os.makedirs(state_dir, mode=0o750, exist_ok=True)
            held.enter_context(fsio.locked(os.path.join(state_dir, "lock"), timeout))
        except fsio.LockTimeout:
            raise CheckError(
                f"another slurm-heal check holds {state_dir}/lock for over {timeout:g}s"
            ) from None
        except OSError as exc:
            raise CheckError(f"cannot use the state dir {state_dir}: {exc.strerror}") from None
        yield
