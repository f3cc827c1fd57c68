"""What a detector is (issue 21): the `Detector` protocol.

A detector looks at one subject of the node (the kernel log, the mounts, the GPUs, ...)
and turns what it saw into findings. It is an object with:

``name``
    its section in check.toml, and its name in the results and the state file;
``settings``
    its settings class: the section's keys with their defaults (a frozen record of
    `slurm_heal.frozen` or a stdlib dataclass), always with ``enabled``, ``timeout``
    (seconds) and ``modes``; check.toml's values are validated against the defaults'
    types (`slurm_heal.checks.config`), with errors naming file and key;
``modes``
    the modes it runs in by default (its settings' ``modes`` default);
``gather(cfg, state, node, now)``
    the I/O: read what it needs from the node (files, tools, sockets), under
    `slurm_heal.checks.paths.host_path` so a replay root works; raises
    `slurm_heal.checks.node.Unsupported` when the node has nothing of its subject;
``evaluate(cfg, state, node, now, seen)``
    the judgement, pure: what ``gather`` returned (plus the detector's previous state,
    for counters that only mean something as a rate) -> ``(findings, state updates)``.
    The updates are applied only when the detector finished in time; a detector never
    writes the state itself.

The built-in detectors are the tuple `slurm_heal.checks.config.BUILTINS`, which names
their modules without importing them; a third-party detector is found through the
entry point group ``slurm_heal.detectors`` (docs/checks.md "Third-party detectors").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from datetime import datetime

    from slurm_heal.checks.config import CheckConfig
    from slurm_heal.types import Finding

Seen = TypeVar("Seen")
State = dict[str, Any]  # the check's state file, as loaded (read-only for a detector)
Update = dict[str, Any]  # keys of the state file a detector replaces when it finished


class Detector(Protocol[Seen]):
    """A node detector (module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> type: ...

    @property
    def modes(self) -> tuple[str, ...]: ...

    def gather(self, cfg: CheckConfig, st: State, node: str, now: datetime) -> Seen: ...

    def evaluate(self, cfg: CheckConfig, st: State, node: str, now: datetime,
                 seen: Seen) -> tuple[list[Finding], Update]: ...


def run(det: Detector[Any], cfg: CheckConfig, st: State, node: str,
        now: datetime) -> tuple[list[Finding], Update]:
    """Gather, then evaluate: one run of one detector (what the runner's thread does)."""
    return det.evaluate(cfg, st, node, now, det.gather(cfg, st, node, now))
