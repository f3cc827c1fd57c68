"""The GPU reset's mark for the node check (SPEC E6, D1, L5).

A kernel-log cursor is not a reboot: the latched Xid of this boot stays latched after a
GPU reset, and would be taken as present after it. The reset job (`slurm_heal.gpureset_job`)
leaves the reset's time, and the GPUs it reset, in ``<state_dir>/gpu-reset.json``; the
kernel-log detector then drops the latched GPU faults of those GPUs last seen *before*
that time (the kernel line's own time where it has one): kernel-log records older than
the reset are no current evidence. An Xid the
driver logs after the reset latches again as new.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from slurm_heal import fsio  # on the check's path already (checks.state): no import cost

FILE = "gpu-reset.json"
# What a GPU reset clears: the GPU's Xid records (not an NVSwitch SXid, a GPU off the
# bus, a hung task: a reset of the GPU fixes none of those).
_PREFIX = "gpu.xid."


def mark(check_config: str | None, at: datetime, gpus: list[int]) -> str:
    """Leave the reset's time and GPUs (``[]``: all) for the node check; returns the file."""
    from slurm_heal.checks.config import load_config

    state_dir = load_config(check_config).state_path()
    os.makedirs(state_dir, mode=0o750, exist_ok=True)
    path = os.path.join(state_dir, FILE)
    # The one atomic write (house style 13): the rename survives a power cut too (the
    # directory is fsynced), and the check state's mode (the check reads it as root).
    fsio.atomic_write(path, json.dumps({"at": at.isoformat(), "gpus": list(gpus)}), 0o644)
    return path


def read(state_dir: str) -> tuple[datetime, frozenset[int]] | None:
    """The last reset left in ``state_dir``: (time, GPU indexes; empty = all), or None.
    A file that cannot be read is no reset (the latched faults stand)."""
    try:
        with open(os.path.join(state_dir, FILE), encoding="utf-8") as fh:
            raw = json.load(fh)
        at = datetime.fromisoformat(str(raw["at"]))
        gpus = frozenset(int(g) for g in raw.get("gpus", []))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if at.tzinfo is None:
        return None
    return at, gpus


def after_reset(latched: dict[str, dict[str, Any]], at: datetime,
                gpus: frozenset[int]) -> dict[str, dict[str, Any]]:
    """Drop the latched Xid records of the reset GPUs last seen before ``at`` (pure)."""
    out: dict[str, dict[str, Any]] = {}
    for k, rec in latched.items():
        if str(rec.get("fault", "")).startswith(_PREFIX) and _before(rec, at) \
                and _covered(rec, gpus):
            continue
        out[k] = rec
    return out


def _before(rec: dict[str, Any], at: datetime) -> bool:
    """The record's newest kernel line is older than the reset: by the line's own time
    where it has one with a zone (a line read again after a lost cursor keeps its time),
    else by when the check last saw it."""
    stamps = []
    for ev in rec.get("evidence") or ():
        try:
            t = datetime.fromisoformat(str(ev.get("at"))) if isinstance(ev, dict) else None
        except ValueError:
            t = None
        if t is not None and t.tzinfo is not None:
            stamps.append(t)
    if stamps:
        return max(stamps) < at
    try:
        last = datetime.fromisoformat(str(rec.get("last_seen")))
    except ValueError:
        return False
    return last.tzinfo is not None and last < at


def _covered(rec: dict[str, Any], gpus: frozenset[int]) -> bool:
    if not gpus:
        return True
    for ev in rec.get("evidence") or ():
        data = ev.get("data") if isinstance(ev, dict) else None
        if isinstance(data, dict) and data.get("gpu_index") in gpus:
            return True
    return False
