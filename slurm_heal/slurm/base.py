"""The Slurm port (SPEC I3): one protocol, two backends (`cli`, `pyslurm`) that behave
the same. No pydantic here: the node check uses this on every run.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from slurm_heal.types import ClusterView, JobInfo, NodeInfo


@runtime_checkable
class SlurmClient(Protocol):
    """What slurm-heal needs from Slurm. Every call has a timeout; failures raise
    `slurm_heal.errors.SlurmError` (command, exit status, stderr)."""

    def snapshot(self) -> ClusterView:
        """All nodes and all jobs, read once."""
        ...

    def nodes(self) -> tuple[NodeInfo, ...]:
        """All nodes."""
        ...

    def node(self, name: str) -> NodeInfo:
        """One node; `slurm_heal.errors.NotFound` when Slurm does not know it."""
        ...

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        """Jobs (pending ones have no nodes); with ``node``, only those allocated there."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Drain: no new jobs; running jobs continue."""
        ...

    def resume(self, node: str) -> None:
        """Resume (undrain) the node."""
        ...

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        """Set (or with None remove) one top-level key of the node's Extra JSON object,
        keeping every other key. Non-JSON text in Extra is never overwritten
        (SlurmError). ``current``: the node's Extra text as the caller read it moments
        ago (the node check's one read per run, issue 43); None reads it now."""
        ...

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        """``scontrol reboot ASAP nextstate=... reason=... NODE`` (the site's RebootProgram).

        ``nextstate="DRAIN"``: drain with ``reason`` (when not already), then ``scontrol
        reboot NODE``: the node stays drained through the reboot (SPEC L5)."""
        ...

    def signal_jobs(self, node: str, signal: str) -> None:
        """Send ``signal`` (e.g. "USR1") to every job running on the node."""
        ...

    def requeue_jobs(self, node: str) -> None:
        """Requeue every job running on the node."""
        ...

    def cancel_jobs(self, node: str) -> None:
        """Cancel every job running on the node."""
        ...
