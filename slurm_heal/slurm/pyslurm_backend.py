"""The `pyslurm` Slurm backend (SPEC I3), on pyslurm 25.11 (run live against the 25.11 lab).

pyslurm's version follows Slurm's: pyslurm 25.11.x is built against libslurm 25.11 and
talks to a 25.11 slurmctld. What this module relies on (pyslurm 25.11.2, checked live):
- ``import pyslurm`` initialises libslurm, which reads slurm.conf and, finding none,
  calls ``fatal()`` and ends the whole process. So the import runs with
  ``PYSLURM_DISABLE_AUTO_INIT`` set and we call ``pyslurm.slurm_init(path)`` ourselves
  after checking that the configuration file exists (`config_source`): a missing
  configuration is our own clear SlurmError, never libslurm's exit.
- libslurm is initialised once per process: one cluster (slurm.conf) per process.
- ``pyslurm.Nodes.load()`` iterates (``values()``) over `pyslurm.Node`s: ``name``,
  ``state`` (the complete ``IDLE+DRAIN`` string), ``reason``, ``reason_user``,
  ``reason_time`` (epoch or None), ``extra``, ``partitions``, ``available_features``,
  ``boot_time``, ``slurmd_start_time``, ``address``, ``hostname``.
- ``pyslurm.Jobs.load()``: `pyslurm.Job` with ``id``, ``user_name``, ``state``,
  ``allocated_nodes`` (host list), ``name``, ``start_time``, ``end_time``,
  ``time_limit`` (minutes; None = unlimited).
- ``pyslurm.Node(name).modify(pyslurm.Node(state=..., reason=...))`` updates a node;
  ``pyslurm.Job(id).send_signal(sig, steps="all")``, ``.requeue()``, ``.cancel()``.
- pyslurm has no call to reboot a node; that goes through `scontrol reboot` (cli).
- ``pyslurm.slurmctld.Config.load().version`` is the running slurmctld's version:
  `pyslurm_matches` compares it in a child process (a libslurm that cannot talk to
  that slurmctld, or a fatal(), ends the child, not us) before "auto" picks pyslurm.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.extra import with_key
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.slurm.mapping import (
    ACTIVE_JOB_STATES,
    guarded,
    job_info,
    node_info,
    state_flags,
)
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

SUPPORTED_MAJOR = 25  # pyslurm's version follows Slurm's: 25.11.x needs libslurm 25.11

# Slurm's error numbers (slurm/slurm_errno.h; the same values in 25.11 and 26.05), which
# pyslurm's RPCError carries as ``errno``: errors are told apart by number, never by
# their words (slurm_strerror's text may change between releases).
# No controller reached: SLURM_COMMUNICATIONS_{CONNECTION,SEND,RECEIVE,SHUTDOWN}_ERROR,
# SLURMCTLD_COMMUNICATIONS_{CONNECTION,SEND,RECEIVE,SHUTDOWN}_ERROR, _BACKOFF,
# _HARD_DROP and SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT.
UNREACHABLE_ERRNOS = frozenset({1001, 1002, 1003, 1004, 1800, 1801, 1802, 1803, 1804, 1805,
                                5004})
# Nothing of that name: ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME.
NOT_FOUND_ERRNOS = frozenset({2017, 2018})


def slurm_errno(exc: BaseException) -> int | None:
    """Slurm's error number on an exception from pyslurm (RPCError.errno), or None."""
    code = getattr(exc, "errno", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def classify(what: str, exc: Exception) -> SlurmError | NotFound:
    """The project's error for what a pyslurm call raised, by Slurm's errno."""
    code = slurm_errno(exc)
    text = f"pyslurm {what}: {exc}" + (f" (slurm errno {code})" if code is not None else "")
    if code in UNREACHABLE_ERRNOS:
        return SlurmUnreachable(text, errno=code)
    if code in NOT_FOUND_ERRNOS:
        return NotFound(text)
    return SlurmError(text, errno=code)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """A field of a pyslurm object or of its ``to_dict()`` form."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def node_from_pyslurm(node: Any) -> NodeInfo:
    """A `pyslurm.Node` (or its ``to_dict()``) as NodeInfo; a field of a shape Slurm
    never gives is a SlurmError naming the node (issue 22)."""
    return guarded("pyslurm node", lambda n: _get(n, "name"), _node_from_pyslurm, node)


def _node_from_pyslurm(node: Any) -> NodeInfo:
    name = _get(node, "name")
    if not name:
        raise SlurmError(f"pyslurm node without a name: {str(node)[:120]}")
    return node_info(str(name), state_flags(str(_get(node, "state") or "")),
                     reason=_get(node, "reason"), user=_get(node, "reason_user"),
                     when=_get(node, "reason_time"), extra=_get(node, "extra"),
                     partitions=_get(node, "partitions"),
                     features=_get(node, "available_features"),
                     boot=_get(node, "boot_time"), slurmd_start=_get(node, "slurmd_start_time"),
                     address=_get(node, "address"), hostname=_get(node, "hostname"),
                     instance_id=_get(node, "instance_id"))


def job_from_pyslurm(job: Any) -> JobInfo:
    """A `pyslurm.Job` (or its ``to_dict()``) as JobInfo; SlurmError naming the job for
    a field of a shape Slurm never gives (issue 22)."""
    return guarded("pyslurm job", lambda j: _get(j, "id"), _job_from_pyslurm, job)


def _job_from_pyslurm(job: Any) -> JobInfo:
    limit = _get(job, "time_limit")
    # pyslurm: minutes, None for unlimited (never Slurm's INFINITE); the same rules as
    # the JSON's from here on (job_info).
    return job_info(_get(job, "id"), user=_get(job, "user_name"),
                    state=_get(job, "state") or "",
                    nodes=_get(job, "allocated_nodes") or _get(job, "nodes"),
                    name=_get(job, "name"), start=_get(job, "start_time"),
                    end=_get(job, "end_time"), limit=limit)


def _values(loaded: Any, what: str) -> list[Any]:
    """The records of a pyslurm collection (a dict of id -> record); SlurmError for any
    other shape (issue 22)."""
    try:
        return list(loaded.values())
    except Exception as exc:
        raise SlurmError(f"pyslurm {what} gave {type(loaded).__name__}, not a collection "
                         f"of records ({type(exc).__name__})") from None


# Where libslurm looks when neither an explicit path nor $SLURM_CONF names one: the
# usual sysconfdir, and slurmd's configless cache.
DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf",
                 "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")
_initialised: str | None = None


def config_source(slurm_conf: str | None) -> str:
    """The slurm.conf libslurm will read, checked to exist before any libslurm call
    (libslurm ends the process when it finds none). SlurmError names what is missing."""
    for where, path in (("slurm_conf", slurm_conf), ("SLURM_CONF", os.environ.get("SLURM_CONF"))):
        if path:
            if not os.path.isfile(path):
                raise SlurmError(f"slurm.conf not found: {path} (from {where})")
            return path
    for path in DEFAULT_CONFS:
        if os.path.isfile(path):
            return path
    raise SlurmError("no Slurm configuration: SLURM_CONF is not set and none of "
                     f"{', '.join(DEFAULT_CONFS)} exists")


def load_pyslurm(slurm_conf: str | None) -> Any:
    """``import pyslurm`` without its automatic libslurm init, then init it on the checked
    configuration. Once per process; another slurm.conf later is a SlurmError."""
    global _initialised
    path = config_source(slurm_conf)
    if _initialised is not None:
        if os.path.realpath(path) != os.path.realpath(_initialised):
            raise SlurmError(f"pyslurm is already set up for {_initialised} in this process; "
                             f"libslurm cannot switch to {path}")
        return importlib.import_module("pyslurm")
    old = os.environ.get("PYSLURM_DISABLE_AUTO_INIT")
    os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"
    try:
        module = importlib.import_module("pyslurm")
    except Exception as exc:  # ImportError, or an OSError from a missing libslurm
        raise SlurmError(f"import pyslurm failed: {exc}") from exc
    finally:
        if old is None:
            os.environ.pop("PYSLURM_DISABLE_AUTO_INIT", None)
        else:
            os.environ["PYSLURM_DISABLE_AUTO_INIT"] = old
    version = str(getattr(module, "__version__", "") or "")
    if not version.startswith(f"{SUPPORTED_MAJOR}."):
        raise SlurmError(f"pyslurm {version or '?'} is not the {SUPPORTED_MAJOR}.x this "
                         "backend targets")
    module.slurm_init(path)
    _initialised = path
    return module


_PROBE = """
import json, os, sys
os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"
import pyslurm
pyslurm.slurm_init(sys.argv[1])
print(json.dumps({"pyslurm": pyslurm.__version__,
                  "slurmctld": pyslurm.slurmctld.Config.load().version}))
"""


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def pyslurm_matches(slurm_conf: str | None, timeout: float = 20.0) -> str | None:
    """None when pyslurm is installed and its libslurm's version (major.minor) is the
    running slurmctld's; else why not. Asked in a child process."""
    try:
        path = config_source(slurm_conf)
    except SlurmError as exc:
        return str(exc)
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pyslurm probe failed: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pyslurm cannot talk to this slurmctld ({last[:160]})"
    try:
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        mine, theirs = str(seen["pyslurm"]), str(seen["slurmctld"])
    except (ValueError, KeyError, IndexError):
        return f"pyslurm probe printed {proc.stdout[:120]!r}"
    if _major_minor(mine) != _major_minor(theirs):
        return f"pyslurm {mine} does not match slurmctld {theirs}"
    return None


class PyslurmSlurm:
    """SlurmClient over pyslurm 25.11. Writes pyslurm has no stable call for (reboot)
    go through the cli backend, which talks to the same cluster."""

    def __init__(self, slurm_conf: str | None = None, timeout: float = 20.0,
                 module: Any = None) -> None:
        self._pyslurm = module if module is not None else load_pyslurm(slurm_conf)
        self._slurm_conf = slurm_conf
        self._timeout = timeout

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # pyslurm raises RPCError (with Slurm's errno) and friends
            raise classify(what, exc) from exc

    def nodes(self) -> tuple[NodeInfo, ...]:
        loaded = self._call("Nodes.load", self._pyslurm.Nodes.load)
        return tuple(node_from_pyslurm(n) for n in _values(loaded, "Nodes.load"))

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes():
            if n.name == name:
                return n
        raise NotFound(f"Slurm does not know node {name!r}")

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        loaded = self._call("Jobs.load", self._pyslurm.Jobs.load)
        jobs = tuple(job_from_pyslurm(j) for j in _values(loaded, "Jobs.load"))
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

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        base = self.node(node).extra_raw if current is None else current
        self._modify(node, extra=with_key(base, key, value))

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        # pyslurm has no reboot call: the Slurm commands do it, on the same cluster.
        self.node(node)
        CliSlurm(slurm_conf=self._slurm_conf, timeout=self._timeout).reboot(
            node, reason, nextstate)

    def _active(self, node: str) -> list[int]:
        return [j.job_id for j in self.jobs(node) if j.state in ACTIVE_JOB_STATES]

    def signal_jobs(self, node: str, signal: str) -> None:
        for job_id in self._active(node):
            job = self._pyslurm.Job(job_id)
            # steps="all": every step and the batch shell, like the cli backend's
            # `scancel --full` (pyslurm's default, "children", spares the batch shell,
            # so a job script that traps the signal to checkpoint never sees it; SPEC P3).
            # pyslurm 25.11.2 takes "SIGUSR1" (or a number); "USR1" is "Invalid Signal".
            self._call("Job.send_signal", job.send_signal,
                       "SIG" + signal.upper().removeprefix("SIG"), steps="all")

    def requeue_jobs(self, node: str) -> None:
        for job_id in self._active(node):
            self._call("Job.requeue", self._pyslurm.Job(job_id).requeue)

    def cancel_jobs(self, node: str) -> None:
        for job_id in self._active(node):
            self._call("Job.cancel", self._pyslurm.Job(job_id).cancel)
