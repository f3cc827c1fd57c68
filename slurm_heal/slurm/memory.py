"""An in-process simulated Slurm cluster implementing `SlurmClient`.

This is a product feature, not a test double: `slurm-heal demo` runs the real
controller against it on a machine with no Slurm at all. It follows the Slurm 22.05
behaviour the cli backend sees on the lab: a drained node keeps running its jobs
(ALLOCATED+DRAIN) until they end (IDLE+DRAIN), a reboot takes the node DOWN and brings
it back with a new boot time, and ``Extra`` is free text we keep JSON in. The Slurm
backend contract tests run on it as on the real backends (SPEC I3).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slurm_heal.errors import NotFound, SlurmError
from slurm_heal.extra import parse_extra, with_key
from slurm_heal.slurm.cli import NEXT_STATES
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

# Operations `MemorySlurm.inject_failure` can make fail.
_FAILABLE = ("node", "drain", "resume", "set_extra", "reboot", "signal_jobs", "requeue_jobs",
             "cancel_jobs")


@dataclass
class _Node:
    name: str
    partitions: tuple[str, ...]
    features: tuple[str, ...] = ()
    drain: bool = False
    down: bool = False
    reason: str = ""
    reason_user: str = ""
    reason_time: datetime | None = None
    extra_raw: str = ""
    boot_time: datetime | None = None
    reboot_done_at: datetime | None = None
    reboot_resume: bool = False
    instance_id: str = ""
    history: list[str] = field(default_factory=list)


class MemorySlurm:
    """A small Slurm cluster in memory, advanced lazily by ``clock``.

    ``on_boot(node)`` is called when a simulated reboot completes: the place where the
    node's own health check would run at boot.
    """

    def __init__(self, nodes: list[tuple[str, str]], clock: Callable[[], datetime],
                 on_boot: Callable[[str], None] | None = None, user: str = "root",
                 return_to_service: int = 2, features: tuple[str, ...] = ()) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        now = clock()
        self._nodes = {n: _Node(name=n, partitions=(p,), features=features, boot_time=now)
                       for n, p in nodes}
        self._jobs: dict[int, JobInfo] = {}
        self._job_ends: dict[int, datetime] = {}  # when each job really ends
        self._next_job = 1000
        self._on_boot = on_boot
        self._user = user
        # Slurm's ReturnToService: with 2 a rebooted node registers and is back; with 0/1
        # a reboot Slurm did not order itself leaves it DOWN, "Node unexpectedly rebooted"
        # (slurm.conf(5), seen as such on 22.05).
        self._rts = return_to_service
        # Injected failures: (node, operation) -> [calls left, error]. See inject_failure.
        self._failures: dict[tuple[str, str], tuple[int, Exception]] = {}

    # -- simulation controls (not part of SlurmClient) --------------------------------
    def submit_job(self, node: str, runtime: timedelta, user: str = "alice",
                   name: str = "train", time_limit: timedelta | None = None) -> int:
        """Start a job on ``node`` that ends after ``runtime``. Its time limit (whole
        minutes, as Slurm's) is ``time_limit``, by default ``runtime`` rounded up; like
        Slurm it shows the expected end, start + time limit, not when the job ends."""
        with self._lock:
            self._node(node)
            self._next_job += 1
            now = self._clock()
            limit = time_limit if time_limit is not None else runtime
            minutes = max(1, math.ceil(limit.total_seconds() / 60))
            self._jobs[self._next_job] = JobInfo(
                job_id=self._next_job, user=user, state="RUNNING", nodes=(node,), name=name,
                start_time=now, end_time=now + timedelta(minutes=minutes),
                time_limit_minutes=minutes)
            self._job_ends[self._next_job] = now + min(runtime, timedelta(minutes=minutes))
            return self._next_job

    def simulate_reboot(self, node: str, duration: timedelta, resume: bool = False) -> None:
        """Take ``node`` down now; it comes back after ``duration`` with a new boot time."""
        with self._lock:
            n = self._node(node)
            n.down = True
            n.reboot_done_at = self._clock() + duration
            n.reboot_resume = resume
            n.history.append("reboot")
            for jid in [j.job_id for j in self._jobs.values() if node in j.nodes]:
                del self._jobs[jid]  # a reboot kills what still runs (NODE_FAIL)

    def mark_down(self, node: str, reason: str, user: str = "admin") -> None:
        """What `scontrol update nodename=N state=down reason=...` does."""
        with self._lock:
            n = self._node(node)
            n.down, n.reason, n.reason_user, n.reason_time = True, reason, user, self._clock()

    def set_instance_id(self, node: str, value: str) -> None:
        """What a cloud resume script's `scontrol update nodename=N instanceid=ID` does
        (Slurm 23.11+)."""
        with self._lock:
            self._node(node).instance_id = value

    def set_features(self, node: str, features: tuple[str, ...]) -> None:
        """The node's features (slurm.conf ``Features=``, e.g. ``rack=r12``)."""
        with self._lock:
            self._node(node).features = tuple(features)

    def set_extra_text(self, node: str, text: str) -> None:
        """What `scontrol update nodename=N extra=TEXT` does (any text, not only JSON)."""
        with self._lock:
            self._node(node).extra_raw = text

    def inject_failure(self, node: str, operation: str, count: int = 1,
                       error: Exception | None = None) -> None:
        """The next ``count`` calls of ``operation`` on ``node`` fail, as a failing
        ``scontrol`` does: a `SlurmError` naming the node unless ``error`` is given.
        Operations: node, drain, resume, set_extra, reboot, signal_jobs, requeue_jobs,
        cancel_jobs."""
        if operation not in _FAILABLE:
            raise ValueError(f"operation must be one of {', '.join(_FAILABLE)}, not "
                             f"{operation!r}")
        with self._lock:
            self._node(node)
            exc = error if error is not None else SlurmError(
                f"{operation} of {node} failed (injected)", command=["scontrol", "update"],
                returncode=1, stderr=f"slurm_update error: injected failure for {node}")
            self._failures[(node, operation)] = (count, exc)

    def _maybe_fail(self, node: str, operation: str) -> None:
        left, exc = self._failures.get((node, operation), (0, None))
        if left > 0 and exc is not None:
            self._failures[(node, operation)] = (left - 1, exc)
            raise exc

    def _advance(self) -> None:
        now = self._clock()
        for jid, ends in list(self._job_ends.items()):
            if ends <= now:  # (or ended before: cancelled, requeued, killed by a reboot)
                self._jobs.pop(jid, None)
                del self._job_ends[jid]
        booted = []
        for n in self._nodes.values():
            if n.reboot_done_at is not None and n.reboot_done_at <= now:
                n.down = self._rts != 2
                if n.down:
                    n.reason, n.reason_user, n.reason_time = ("Node unexpectedly rebooted",
                                                              "slurm", n.reboot_done_at)
                n.boot_time = n.reboot_done_at
                n.reboot_done_at = None
                if n.reboot_resume:
                    n.drain, n.reason = False, ""
                booted.append(n.name)
        for name in booted:
            if self._on_boot is not None:
                self._on_boot(name)

    def _node(self, name: str) -> _Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFound(f"node {name!r} is not in this cluster") from None

    def _info(self, n: _Node) -> NodeInfo:
        busy = any(n.name in j.nodes for j in self._jobs.values())
        states = {"DOWN"} if n.down else {"ALLOCATED" if busy else "IDLE"}
        if n.drain:
            states.add("DRAIN")
        if n.reboot_done_at is not None:
            states.add("REBOOT_ISSUED")
        return NodeInfo(
            name=n.name, states=frozenset(states), reason=n.reason, reason_user=n.reason_user,
            reason_time=n.reason_time, extra_raw=n.extra_raw, extra=parse_extra(n.extra_raw),
            partitions=n.partitions, features=n.features, boot_time=n.boot_time,
            slurmd_start_time=n.boot_time, hostname=n.name, instance_id=n.instance_id,
            address=n.name)  # no NodeAddr configured: Slurm's default is the NodeName

    # -- SlurmClient ---------------------------------------------------------------------
    def snapshot(self) -> ClusterView:
        with self._lock:
            self._advance()
            return ClusterView(nodes=tuple(self._info(n) for n in self._nodes.values()),
                               jobs=tuple(self._jobs.values()))

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self.snapshot().nodes

    def node(self, name: str) -> NodeInfo:
        with self._lock:
            self._maybe_fail(name, "node")
            self._advance()
            return self._info(self._node(name))

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        with self._lock:
            self._advance()
            return tuple(j for j in self._jobs.values() if node is None or node in j.nodes)

    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise SlurmError("drain needs a reason", command=["scontrol", "update"])
        with self._lock:
            self._maybe_fail(node, "drain")
            n = self._node(node)
            n.drain, n.reason, n.reason_user, n.reason_time = True, reason, self._user, self._clock()

    def resume(self, node: str) -> None:
        with self._lock:
            self._maybe_fail(node, "resume")
            n = self._node(node)
            if n.reboot_done_at is not None:  # not responding: Slurm refuses too
                raise SlurmError(f"node {node} is not responding", command=["scontrol", "update"])
            n.down, n.drain, n.reason, n.reason_user, n.reason_time = False, False, "", "", None

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        with self._lock:
            self._maybe_fail(node, "set_extra")
            n = self._node(node)
            n.extra_raw = with_key(n.extra_raw if current is None else current, key, value)

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        if nextstate.upper() not in NEXT_STATES:
            raise SlurmError(f"nextstate must be one of {', '.join(NEXT_STATES)}, not "
                             f"{nextstate!r}")
        with self._lock:
            self._maybe_fail(node, "reboot")
            self._node(node)  # NotFound before anything reboots
        if nextstate.upper() == "DRAIN":
            self.drain(node, reason)
        self.simulate_reboot(node, timedelta(seconds=2), resume=nextstate.upper() == "RESUME")

    def signal_jobs(self, node: str, signal: str) -> None:
        """Like `scancel --signal`: each job running on ``node`` gets it; none, nobody."""
        with self._lock:
            self._maybe_fail(node, "signal_jobs")
            n = self._node(node)
            self._advance()
            sig = signal.upper().removeprefix("SIG")
            for jid in [j.job_id for j in self._jobs.values() if node in j.nodes]:
                n.history.append(f"signal:{sig}:{jid}")

    def requeue_jobs(self, node: str) -> None:
        self._end_jobs(node, "requeue")

    def cancel_jobs(self, node: str) -> None:
        self._end_jobs(node, "cancel")

    def _end_jobs(self, node: str, how: str) -> None:
        with self._lock:
            self._maybe_fail(node, f"{how}_jobs")
            n = self._node(node)
            for jid in [j.job_id for j in self._jobs.values() if node in j.nodes]:
                n.history.append(f"{how}:{jid}")
                del self._jobs[jid]

    def history(self, node: str) -> list[str]:
        """What was done to ``node`` (reboots, signals, requeues) — for the demo and tests."""
        with self._lock:
            return list(self._node(node).history)
