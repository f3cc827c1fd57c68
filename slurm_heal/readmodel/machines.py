"""The machines and their ledgers, worst first (SPEC E7), as `slurm-heal machines`, the
API (``/api/v1/machines``), the console's node page and the metrics show them.

Read only: the ledger the daemon keeps (``machines.json``, `slurm_heal.ledger`) with the
store's remediations folded in, in memory, so what ended since the daemon's last write
(or a store an older slurm-heal wrote, with no ledger yet) is counted too.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_heal import ledger as ledger_mod
from slurm_heal.config import Lemon
from slurm_heal.durations import format_duration
from slurm_heal.errors import NotFound
from slurm_heal.models import State

# One reader per state directory, so `serve` parses machines.json once per change of the
# file, not once per request (a 100k-machine ledger takes seconds to load).
_FILES: dict[Path, ledger_mod.LedgerFile] = {}
_FILES_LOCK = threading.Lock()


def _file(state_dir: Path | str) -> ledger_mod.LedgerFile:
    key = Path(state_dir).resolve()
    with _FILES_LOCK:
        f = _FILES.get(key)
        if f is None:
            f = _FILES[key] = ledger_mod.LedgerFile(key)
        return f


def current(state_dir: Path | str, state: State, now: datetime) -> ledger_mod.Ledger:
    """The daemon's ledger with the store's ended remediations folded in (not written)."""
    return ledger_mod.observe(_file(state_dir).load(), (), state.remediations, now,
                              touched=()).ledger


def machine_entry(m: ledger_mod.Machine, now: datetime, lemon: Lemon) -> dict[str, Any]:
    """One machine as JSON, with whether E7 holds its automatic work now."""
    out = ledger_mod.machine_json(m, now, lemon.window)
    out["lemon"] = lemon.enabled and out["acted_in_window"] >= lemon.remediations
    return out


def lemon_json(lemon: Lemon) -> dict[str, Any]:
    return {"enabled": lemon.enabled, "remediations": lemon.remediations,
            "window": format_duration(lemon.window)}


def machines(state_dir: Path | str, state: State, now: datetime, lemon: Lemon,
             limit: int | None = None) -> dict[str, Any]:
    """Every machine, worst first (`ledger.worst_first`); ``limit`` keeps the first."""
    led = current(state_dir, state, now)
    ranked = ledger_mod.worst_first(led, now, lemon.window)
    shown = ranked if limit is None else ranked[:limit]
    return {"lemon": lemon_json(lemon), "total": len(ranked),
            "lemons": sum(1 for m in ranked
                          if lemon.enabled and m.acted_within(now, lemon.window)
                          >= lemon.remediations),
            "machines": [machine_entry(m, now, lemon) for m in shown]}


def machine(state_dir: Path | str, state: State, now: datetime, lemon: Lemon,
            target: str) -> dict[str, Any]:
    """One machine by its id, or the machine a node name was last seen on (NotFound)."""
    led = current(state_dir, state, now)
    m = led.machines.get(target) or ledger_mod.of_node(led, target)
    if m is None:
        raise NotFound(f"no machine {target!r} in the ledger (neither a machine id nor a "
                       "node name it knows; `slurm-heal machines` lists them)")
    return {"lemon": lemon_json(lemon), "machine": machine_entry(m, now, lemon)}


def of_node(state_dir: Path | str, state: State, now: datetime, lemon: Lemon,
            node: str) -> dict[str, Any] | None:
    """The ledger of the machine ``node`` was last seen on, or None."""
    led = current(state_dir, state, now)
    m = ledger_mod.of_node(led, node)
    return machine_entry(m, now, lemon) if m is not None else None
