"""The `pyslurm` Slurm backend (SPEC I3), written against pyslurm 25.11's documented API.

PyPI only serves pyslurm 25.11 (for Slurm 25.11); the lab runs Slurm 22.05, so this
backend cannot run here. Its data mapping is a thin, pure layer (`node_from_pyslurm`,
`job_from_pyslurm`) tested against recorded data shaped like pyslurm's objects
(tests/data/pyslurm/), and a shared test shows both backends map the same cluster to
equal NodeInfo.

Assumptions about pyslurm 25.11 (from its documentation; verify on a real 25.11 site):
- ``pyslurm.Nodes.load()`` is a dict ``name -> pyslurm.Node``; a Node has ``name``,
  ``state`` (``"IDLE+DRAIN"``, the complete state string), ``reason``, ``reason_user``,
  ``reason_time`` (epoch int or None), ``extra``, ``partitions`` (list),
  ``available_features`` (list), ``boot_time``, ``slurmd_start_time``, ``address``,
  ``hostname``; ``to_dict()`` gives the same keys.
- ``pyslurm.Jobs.load()`` is a dict ``id -> pyslurm.Job`` with ``id``, ``user_name``,
  ``state``, ``nodes`` (host list string), ``name``, ``start_time``, ``end_time``,
  ``time_limit`` (minutes; None = unlimited).
- ``pyslurm.Node(name).modify(pyslurm.Node(state=..., reason=...))`` updates a node;
  ``pyslurm.Job(id).send_signal(sig, steps="all")``, ``.requeue()``, ``.cancel()``.
- Rebooting has no stable pyslurm call; it goes through `scontrol reboot` (cli backend).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.extra import parse_extra, with_key
from slurm_heal.slurm.cli import (
    ACTIVE_JOB_STATES,
    CliSlurm,
    _names,
    _split_list,
    _text,
    parse_slurm_time,
    state_flags,
)
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

SUPPORTED_MAJOR = 25  # pyslurm's version follows Slurm's: 25.11.x needs libslurm 25.11


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """A field of a pyslurm object or of its ``to_dict()`` form."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def node_from_pyslurm(node: Any) -> NodeInfo:
    """A `pyslurm.Node` (or its ``to_dict()``) as NodeInfo."""
    name = _get(node, "name")
    if not name:
        raise SlurmError(f"pyslurm node without a name: {str(node)[:120]}")
    extra_raw = _text(_get(node, "extra"))
    return NodeInfo(
        name=str(name),
        states=state_flags(str(_get(node, "state") or "")),
        reason=_text(_get(node, "reason")),
        reason_user=_text(_get(node, "reason_user")),
        reason_time=parse_slurm_time(_get(node, "reason_time")),
        extra_raw=extra_raw,
        extra=parse_extra(extra_raw),
        partitions=_split_list(_get(node, "partitions")),
        features=_split_list(_get(node, "available_features")),
        boot_time=parse_slurm_time(_get(node, "boot_time")),
        slurmd_start_time=parse_slurm_time(_get(node, "slurmd_start_time")),
        address=_text(_get(node, "address")),
        hostname=_text(_get(node, "hostname")),
        instance_id=_text(_get(node, "instance_id")),
    )


def job_from_pyslurm(job: Any) -> JobInfo:
    """A `pyslurm.Job` (or its ``to_dict()``) as JobInfo."""
    limit = _get(job, "time_limit")
    limit_minutes = int(limit) if isinstance(limit, int) and limit > 0 else None
    state = str(_get(job, "state") or "").upper()
    end = parse_slurm_time(_get(job, "end_time"))
    if state in ACTIVE_JOB_STATES and limit_minutes is None:
        end = None  # unlimited: no expected end (same rule as the cli backend)
    return JobInfo(
        job_id=int(_get(job, "id")),
        user=_text(_get(job, "user_name")),
        state=state,
        nodes=_names(str(_get(job, "nodes") or "")),
        name=_text(_get(job, "name")),
        start_time=parse_slurm_time(_get(job, "start_time")),
        end_time=end,
        time_limit_minutes=limit_minutes,
    )


def pyslurm_usable() -> str | None:
    """None when pyslurm imports and matches a supported libslurm; else why not."""
    try:
        module = importlib.import_module("pyslurm")
    except Exception as exc:  # ImportError, or an OSError from a missing libslurm
        return f"import pyslurm failed: {exc}"
    version = str(getattr(module, "__version__", "") or "")
    if not version.startswith(f"{SUPPORTED_MAJOR}."):
        return f"pyslurm {version or '?'} is not the {SUPPORTED_MAJOR}.x this backend targets"
    return None


class PyslurmSlurm:
    """SlurmClient over pyslurm 25.11. Writes pyslurm has no stable call for (reboot)
    go through the cli backend, which talks to the same cluster."""

    def __init__(self, slurm_conf: str | None = None, timeout: float = 20.0,
                 module: Any = None) -> None:
        self._pyslurm = module if module is not None else importlib.import_module("pyslurm")
        self._cli = CliSlurm(slurm_conf=slurm_conf, timeout=timeout)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # pyslurm raises RPCError and friends
            text = str(exc)
            if "Unable to contact" in text or "connect" in text.lower():
                raise SlurmUnreachable(f"pyslurm {what}: {text}") from exc
            if "not found" in text.lower() or "Invalid node name" in text:
                raise NotFound(f"pyslurm {what}: {text}") from exc
            raise SlurmError(f"pyslurm {what}: {text}") from exc

    def nodes(self) -> tuple[NodeInfo, ...]:
        loaded = self._call("Nodes.load", self._pyslurm.Nodes.load)
        return tuple(node_from_pyslurm(n) for n in loaded.values())

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes():
            if n.name == name:
                return n
        raise NotFound(f"Slurm does not know node {name!r}")

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        loaded = self._call("Jobs.load", self._pyslurm.Jobs.load)
        jobs = tuple(job_from_pyslurm(j) for j in loaded.values())
        return jobs if node is None else tuple(j for j in jobs if node in j.nodes)

    def snapshot(self) -> ClusterView:
        return ClusterView(nodes=self.nodes(), jobs=self.jobs())

    def _modify(self, node: str, **changes: Any) -> None:
        self.node(node)
        target = self._pyslurm.Node(node)
        self._call("Node.modify", target.modify, self._pyslurm.Node(**changes))

    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise SlurmError("a drain needs a reason (Slurm refuses an empty one)")
        self._modify(node, state="DRAIN", reason=reason)

    def resume(self, node: str) -> None:
        if self.node(node).states & {"DRAIN", "DOWN", "FAIL"}:
            self._modify(node, state="RESUME")

    def set_extra(self, node: str, key: str, value: Any | None) -> None:
        self._modify(node, extra=with_key(self.node(node).extra_raw, key, value))

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        self._cli.reboot(node, reason, nextstate)

    def _active(self, node: str) -> list[int]:
        return [j.job_id for j in self.jobs(node) if j.state in ACTIVE_JOB_STATES]

    def signal_jobs(self, node: str, signal: str) -> None:
        for job_id in self._active(node):
            job = self._pyslurm.Job(job_id)
            # steps="all": every step and the batch shell, like the cli backend's
            # `scancel --full` (pyslurm's default, "children", spares the batch shell,
            # so a job script that traps the signal to checkpoint never sees it; SPEC P3).
            self._call("Job.send_signal", job.send_signal,
                       signal.upper().removeprefix("SIG"), steps="all")

    def requeue_jobs(self, node: str) -> None:
        for job_id in self._active(node):
            self._call("Job.requeue", self._pyslurm.Job(job_id).requeue)

    def cancel_jobs(self, node: str) -> None:
        for job_id in self._active(node):
            self._call("Job.cancel", self._pyslurm.Job(job_id).cancel)
