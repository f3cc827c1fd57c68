"""Shared pieces of the reliability suites (issue 8): the profile, the seed, and the
invariants every suite checks after faults.

Profiles: CI runs a short one (all reliability suites together within ~5 minutes on 2
cores); ``SLURM_HEAL_RELIABILITY=long`` runs the long one (≥ 200 remediation steps under
kill -9 for the crash suite, many more examples for the property test).

Seeds: every random schedule comes from one seed, printed by each test that uses it, so
a failure replays with ``SLURM_HEAL_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_heal import reasons
from slurm_heal.models import State

LONG = os.environ.get("SLURM_HEAL_RELIABILITY", "").lower() == "long"
DEFAULT_SEED = 20261130


def scaled(ci: int, long: int) -> int:
    """The size of something in this profile."""
    return long if LONG else ci


def seed() -> int:
    """The seed of this run (``SLURM_HEAL_SEED``, else a fixed default): printed, so a
    failure replays."""
    raw = os.environ.get("SLURM_HEAL_SEED", "")
    value = int(raw) if raw.strip() else DEFAULT_SEED
    print(f"reliability seed: SLURM_HEAL_SEED={value} (profile "
          f"{'long' if LONG else 'ci'})")
    return value


def rng(tag: str) -> random.Random:
    """A random generator for one test, derived from the run's seed and the test's tag."""
    return random.Random(f"{seed()}:{tag}")


class Stranded(AssertionError):
    """A remediation never reached a terminal phase, or a node is left drained by us with
    nothing open behind it (issue 8 defect 1 shows as this)."""


class ActedTwice(AssertionError):
    """A provider action ran more than once for one idempotency key (SPEC S6)."""


class ForeignTouched(AssertionError):
    """A reason slurm-heal did not write was changed (house style 2, D5)."""


@dataclass
class Figures:
    """What a fault run did, for the report (printed at the end of each test)."""

    kills: int = 0
    steps: int = 0
    remediations: int = 0
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self, what: str) -> str:
        return (f"{what}: kills={self.kills} steps={self.steps} "
                f"remediations={self.remediations} duplicates={self.duplicates}"
                + ("; " + "; ".join(self.notes) if self.notes else ""))


def assert_act_once(executed: dict[str, int]) -> None:
    """SPEC S6: the provider ran each idempotency key at most once (its own count), and
    no remediation ran its action twice under different keys."""
    twice = {k: n for k, n in executed.items() if n > 1}
    if twice:
        raise ActedTwice(f"provider actions ran more than once for one key: {twice}")
    per_rem: dict[str, list[str]] = {}
    for key in executed:  # keys are "<remediation id>:<step>:<n>" (models.idempotency_key)
        per_rem.setdefault(key.split(":", 1)[0], []).append(key)
    again = {rid: keys for rid, keys in per_rem.items() if len(keys) > 1}
    if again:
        raise ActedTwice(f"one remediation acted more than once (under other keys): {again}")


def assert_all_terminal(state: State) -> None:
    """Every remediation reached a terminal phase (L1: no step is stranded)."""
    stuck = [r for r in state.remediations if not r.phase.terminal]
    if stuck:
        raise Stranded("remediations not finished: " + "; ".join(
            f"{r.id} on {r.node} {r.phase.value} since {r.updated.isoformat()}, attempts "
            + ", ".join(f"{a.effect}={a.outcome}" for a in r.attempts) for r in stuck))


def handed_to_person(state: State, node: str) -> bool:
    """The node's latest finished remediation handed it to a person (it stays drained
    on purpose, E1/L5)."""
    done = [r for r in state.remediations if r.node == node and r.phase.terminal]
    if not done:
        return False
    last = max(done, key=lambda r: (r.updated, r.id))
    return bool(last.data.handed_to_person)


def assert_no_orphan_drain(state: State, drained_by_us: Iterable[tuple[str, str]]) -> None:
    """No node is left drained with our marker unless a remediation is open on it or it
    was handed to a person. ``drained_by_us``: (node, reason) of nodes out of service."""
    orphans = []
    for node, reason in drained_by_us:
        if not reasons.is_ours(reason):
            continue
        if state.open_for(node) or handed_to_person(state, node):
            continue
        orphans.append(f"{node} ({reason!r})")
    if orphans:
        raise Stranded("nodes left drained by slurm-heal with no open remediation: "
                       + ", ".join(orphans))
