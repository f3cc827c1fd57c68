"""The `cli` Slurm backend (SPEC I3): `sinfo`, `squeue`, `scontrol`, `scancel` (text forms
 for the whole-cluster reads, `slurm_heal.slurm.text`; JSON where text could be forged).

Light on purpose (the node check imports it on every run): standard library, ClusterShell
for host lists, our dataclasses; no pydantic, no requests. msgspec (the typed decoding of
the whole-cluster reads, `slurm_heal.slurm.typed`) is imported by those reads only, never
by a one-node read.

Slurm 22.05 quirks this module works around (seen on 22.05.8):
- `sinfo --json` / `squeue --json` (OpenAPI v0.0.38) ignore `-n`/`-t` filters: we read
  everything and filter here.
- When the controller does not answer, `sinfo --json` exits 0 after ~9 s and prints
  ``"errors": [{"error": "Unspecified error", "errno": -1}]`` with no nodes.
- `scontrol --json` does not exist in 22.05; `scontrol show node -o` prints one line per
  node whose free-text fields (Reason, Comment, Extra) come last and may contain spaces
  or even ``Key=`` text. We parse those from the end and fall back to `sinfo --json`
  when a line is ambiguous.
- `scontrol` prints times as local time without a zone (``2026-01-05T00:00:00``);
  the JSON carries epoch seconds (0 = unset).

Slurm 23.02 and later (seen on 25.11.7 and 26.05.3), read through the "data_parser" dialect:
- The version is asked once per client (`sinfo --version`); newer versions than the
  newest known (26.05) are read like it, with a warning.
- `sinfo --json` prints partition/node groups, not nodes: per-node data comes from
  `scontrol --json show node [NAME]`: ``"state": ["IDLE", "DRAIN"]``, times as
  ``{"set": true, "infinite": false, "number": EPOCH}``, lists for features/partitions.
- A resumed node keeps its old Reason; "Invalid node state transition" on a resume of
  a node that is not drained (22.05: "Invalid node state specified").
- Zero nodes in the JSON while `sinfo -h -o %N` lists some: an error, never an empty
  cluster (the 25.11 bug: `status` printed no nodes and exited 0).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ClusterShell.NodeSet import NodeSet

from slurm_heal import jsonsafe
from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.extra import with_key
from slurm_heal.slurm.mapping import (
    ACTIVE_JOB_STATES,
    _json_states,
    _names,
    _number,
    _text,
    _typed_states,
    guarded,
    job_info,
    node_info,
    state_flags,
    unexpected_shape,
)
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

log = logging.getLogger("slurm_heal.slurm")

# stderr fragments that mean "no controller answered" (22.05 wording).
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
)
_NOT_FOUND = ("not found", "Invalid node name specified")
_JOB_GONE = ("Invalid job id specified", "already completing or completed",
             "Job has already finished", "Job is pending execution")
# DRAIN: not a Slurm nextstate: `scontrol reboot NODE` (no ASAP, no nextstate) on a node
# drained with our reason; the drain survives the reboot (Slurm 22.05, seen on the lab:
# IDLE+DRAIN after the boot), so slurm-heal resumes it after the health check (SPEC L5).
# nextstate=DOWN is no substitute: with ReturnToService=2 the node is IDLE ~20 s later.
NEXT_STATES = ("RESUME", "DOWN", "DRAIN")
_BAD_TRANSITION = ("Invalid node state specified", "Invalid node state transition")


# ------------------------------------------------------------------ parsing (pure)




def node_from_json(raw: dict[str, Any]) -> NodeInfo:
    """One node of Slurm's JSON as NodeInfo: `sinfo --json` of 22.05 (OpenAPI v0.0.38),
    `scontrol --json show node` and slurmrestd's ``/nodes`` of 23.02+ (data_parser
    v0.0.39 .. v0.0.44; the same node object). A field of a type Slurm never prints is a
    SlurmError naming the node, never a TypeError (I6)."""
    return guarded("Slurm JSON: node", lambda r: r.get("name") if isinstance(r, dict) else None,
                   _node_from_json, raw)


def _node_from_json(raw: dict[str, Any]) -> NodeInfo:
    try:
        name = str(raw["name"])
    except KeyError as exc:
        raise SlurmError(f"Slurm JSON node without a name: {str(raw)[:120]}") from exc
    # 25.11 names a user (and 0 as the time) even where no reason is set.
    return node_info(name, _json_states(raw), reason=raw.get("reason"),
                     user=raw.get("reason_set_by_user"), when=raw.get("reason_changed_at"),
                     extra=raw.get("extra"), partitions=raw.get("partitions"),
                     features=raw.get("features"), boot=raw.get("boot_time"),
                     slurmd_start=raw.get("slurmd_start_time"), address=raw.get("address"),
                     hostname=raw.get("hostname"), instance_id=raw.get("instance_id"))


_R = TypeVar("_R")


def _decoded(decode: Callable[[Any], list[_R] | None], text: str | bytes | bytearray,
             release: bool) -> list[_R] | None:
    """``decode(text)``, the answer (a bytearray) emptied once decoded when ``release``:
    the one preamble of the typed fast paths."""
    listed = decode(text)
    if listed is not None and release and isinstance(text, bytearray):
        text.clear()
    return listed


def _typed_nodes(text: str | bytes | bytearray,
                 release: bool = False) -> tuple[NodeInfo, ...] | None:
    """The fast path of `parse_sinfo_json` (issue 26): typed decoding of only the fields
    read (`slurm_heal.slurm.typed`); None when the document is not one it reads, so the
    generic reader answers (and names the problem) exactly as before. ``release``: the
    answer (a bytearray) is emptied once decoded, and each decoded record dropped once
    mapped, so the answer, the decoded records and the NodeInfos are never all held."""
    from slurm_heal.slurm import typed

    listed = _decoded(typed.decode_nodes, text, release)
    if listed is None:
        return None
    plain = typed.plain

    def mapped(r: typed.Node) -> NodeInfo:
        return node_info(r.name, _typed_states(r.state, r.state_flags), reason=r.reason,
                         user=r.reason_set_by_user, when=plain(r.reason_changed_at),
                         extra=r.extra, partitions=r.partitions, features=r.features,
                         boot=plain(r.boot_time), slurmd_start=plain(r.slurmd_start_time),
                         address=r.address, hostname=r.hostname, instance_id=r.instance_id)

    seen: dict[str, NodeInfo] = {}
    listed.reverse()
    while listed:
        r = listed.pop()
        if r.name not in seen:  # a value no Slurm prints (a year 9999 time): named
            seen[r.name] = guarded("Slurm JSON: node", lambda r: r.name, mapped, r)
    return tuple(seen.values())


def _load_json(text: str | bytes | bytearray, what: str) -> dict[str, Any]:
    try:
        data = jsonsafe.loads(bytes(text) if isinstance(text, bytearray) else text)
    except ValueError as exc:
        raise SlurmError(f"{what} did not print JSON ({exc}): {_head(text)!r}") from exc
    if not isinstance(data, dict):
        raise SlurmError(f"{what} printed JSON that is not an object: {_head(text)!r}")
    return data


def _head(text: str | bytes | bytearray) -> str:
    """The start of an answer, as text, for an error message."""
    if isinstance(text, str):
        return text[:120]
    return bytes(text[:120]).decode("utf-8", "replace")


def _error_text(e: dict[str, Any]) -> str:
    """One entry of a JSON ``errors`` array (v0.0.38: error, errno; 23.02+: description,
    error, error_number, source)."""
    text = " - ".join(str(e[k]) for k in ("description", "error") if e.get(k)) or "?"
    return f"{text} (errno {_errno(e) if _errno(e) is not None else '?'})"


def _errno(e: dict[str, Any]) -> object:
    """The errno of one ``errors`` entry: ``errno`` in 22.05's `sinfo --json`,
    ``error_number`` in its `squeue --json` and in 23.02+ (both seen on a 22.05.8 lab
    with slurmctld stopped)."""
    return e.get("errno", e.get("error_number"))


def _check_json_errors(data: dict[str, Any], what: str, items: str,
                       command: Sequence[str] = (), stderr: str = "") -> None:
    errors = data.get("errors") or []
    if not errors:
        return
    if not isinstance(errors, list):
        errors = [errors]
    detail = "; ".join(_error_text(e) for e in errors if isinstance(e, dict)) or str(errors)
    # 22.05: an unreachable controller shows up as errno -1 with nothing listed, exit 0.
    no_answer = not data.get(items) and any(
        isinstance(e, dict) and _errno(e) == -1 for e in errors)
    if no_answer or any(s in stderr + detail for s in _UNREACHABLE):
        raise SlurmUnreachable(f"{what}: no Slurm controller answered ({detail})",
                               command=command, stderr=stderr)
    raise SlurmError(f"{what} reported errors: {detail}", command=command, stderr=stderr)


class _NoNodeList(SlurmError):
    """A JSON answer without a ``nodes`` list (the backend adds what Slurm lists)."""


def parse_sinfo_json(text: str | bytes | bytearray, command: Sequence[str] = (),
                     stderr: str = "", what: str = "sinfo --json",
                     typed: bool = True, release: bool = False) -> tuple[NodeInfo, ...]:
    """All nodes of a JSON document with a ``nodes`` list (22.05's `sinfo --json`,
    23.02+'s `scontrol --json show node`, slurmrestd's ``/nodes``), once each, in
    Slurm's order. An ``errors`` array is an error, never an empty cluster. Any other
    shape is a SlurmError too (issue 22: ``{"nodes": true}``).

    ``typed`` (the whole-cluster reads): decoded with msgspec, only the fields read
    (issue 26); a document of another shape goes to the generic reader, which names
    what is wrong. ``typed=False``: the generic reader only (one node's answer, where
    msgspec's import would cost the node check more than the decoding saves).
    ``release``: ``text`` is the caller's bytearray, emptied once decoded (peak memory)."""
    try:
        if typed:
            try:
                fast = _typed_nodes(text, release)
            except ValueError as exc:  # typed.TooDeep: hostile nesting, found at no extra cost
                raise SlurmError(f"{what} did not print JSON ({exc}): {_head(text)!r}") from None
            if fast is not None:
                return fast
        data = _load_json(text, what)
        _check_json_errors(data, what, "nodes", command, stderr)
        if "nodes" not in data:
            # 23.02+'s `sinfo --json` lists partition/node groups ("sinfo": [...]), not
            # nodes: never read a document without a node list as an empty cluster (I6).
            keys = ", ".join(sorted(map(str, data))[:8]) or "nothing"
            raise _NoNodeList(f"{what}: the answer has no 'nodes' list (it has: {keys})",
                              command=command, stderr=stderr)
        listed = data.get("nodes") or []
        if not isinstance(listed, list):
            raise SlurmError(f"{what}: 'nodes' is not a list: {str(listed)[:80]!r}")
        seen: dict[str, NodeInfo] = {}
        for raw in listed:
            if isinstance(raw, dict):
                node = node_from_json(raw)
                seen.setdefault(node.name, node)
        return tuple(seen.values())
    except SlurmError:
        raise
    except Exception as exc:
        raise unexpected_shape(what, exc) from None


def job_from_json(raw: dict[str, Any]) -> JobInfo:
    """One job of `squeue --json` as JobInfo; SlurmError naming the job for a field of a
    type Slurm never prints."""
    return guarded("squeue --json: job",
                   lambda r: r.get("job_id") if isinstance(r, dict) else None,
                   _job_from_json, raw)


def _job_from_json(raw: dict[str, Any]) -> JobInfo:
    job_state = raw.get("job_state", "")
    if isinstance(job_state, (list, tuple)):  # 23.02+: ["RUNNING"] (base state first)
        job_state = job_state[0] if job_state else ""
    return job_info(_number(raw["job_id"]), user=_text(raw.get("user_name"))
                    or str(_number(raw.get("user_id", ""))), state=job_state,
                    nodes=raw.get("nodes"), name=raw.get("name"),
                    start=raw.get("start_time"), end=raw.get("end_time"),
                    limit=_number(raw.get("time_limit")))




def _typed_jobs(text: str | bytes | bytearray,
                release: bool = False) -> tuple[JobInfo, ...] | None:
    """The fast path of `parse_squeue_json` (issue 26), as `_typed_nodes`."""
    from slurm_heal.slurm import typed

    listed = _decoded(typed.decode_jobs, text, release)
    if listed is None:
        return None
    plain = typed.plain

    def mapped(r: typed.Job) -> JobInfo:
        state = r.job_state
        if state is typed.UNSET:
            state = ""
        elif isinstance(state, list):
            state = state[0] if state else ""
        return job_info(plain(r.job_id), user=_text(r.user_name)
                        or str(plain(r.user_id) if r.user_id is not typed.UNSET else ""),
                        state=state, nodes=r.nodes, name=r.name, start=plain(r.start_time),
                        end=plain(r.end_time), limit=plain(r.time_limit))

    out = []
    listed.reverse()
    while listed:
        r = listed.pop()
        if r.job_id is not typed.UNSET:
            out.append(guarded("squeue --json: job", lambda r: plain(r.job_id), mapped, r))
    return tuple(out)


def parse_squeue_json(text: str | bytes | bytearray, command: Sequence[str] = (),
                      stderr: str = "", release: bool = False) -> tuple[JobInfo, ...]:
    """All jobs of a `squeue --json` document; any shape slurm-heal does not read is a
    SlurmError (issue 22). Decoded typed where it can be (as `parse_sinfo_json`)."""
    try:
        try:
            fast = _typed_jobs(text, release)
        except ValueError as exc:  # typed.TooDeep
            raise SlurmError(f"squeue --json did not print JSON ({exc}): "
                             f"{_head(text)!r}") from None
        if fast is not None:
            return fast
        return _parse_squeue_json(text, command, stderr)
    except SlurmError:
        raise
    except Exception as exc:
        raise unexpected_shape("squeue --json", exc) from None


def _parse_squeue_json(text: str | bytes | bytearray, command: Sequence[str], stderr: str) -> tuple[JobInfo, ...]:
    data = _load_json(text, "squeue --json")
    errors = data.get("errors") or []
    if errors:
        if not isinstance(errors, list):
            errors = [errors]
        # An empty job list is normal, so only the stderr tells unreachable apart.
        detail = "; ".join(_error_text(e) for e in errors if isinstance(e, dict))
        cls = SlurmUnreachable if (any(s in stderr for s in _UNREACHABLE)
                                   or any(_errno(e) == -1 for e in errors
                                          if isinstance(e, dict))) else SlurmError
        raise cls(f"squeue --json reported errors: {detail}", command=command, stderr=stderr)
    listed = data.get("jobs") or []
    if not isinstance(listed, list):
        raise SlurmError(f"squeue --json: 'jobs' is not a list: {str(listed)[:80]!r}",
                         command=command, stderr=stderr)
    out = []
    for raw in listed:
        if isinstance(raw, dict) and "job_id" in raw:
            out.append(job_from_json(raw))
    return tuple(out)


# Free-text fields at the end of a `scontrol show node -o` line, in 22.05's order.
_TAIL_KEYS = ("Reason", "Comment", "Extra")
_KV = re.compile(r"(?:^|\s)([A-Za-z_]+)=(\S*)")
_REASON_TAIL = re.compile(r"^(?P<reason>.*) \[(?P<user>[^@\]\s]+)@(?P<time>[0-9T:-]+)\]$", re.S)


class _Ambiguous(ValueError):
    """A scontrol line whose free-text fields cannot be split safely."""


def _split_tail(line: str) -> tuple[str, dict[str, str]]:
    """Cut ``Reason=... Comment=... Extra=...`` off the end of a scontrol line."""
    tail: dict[str, str] = {}
    rest = line.rstrip("\n")
    for key in reversed(_TAIL_KEYS):
        marker = f" {key}="
        if rest.count(marker) > 1:
            raise _Ambiguous(key)
        at = rest.find(marker)
        if at >= 0:
            tail[key] = rest[at + len(marker):]
            rest = rest[:at]
    for key, value in tail.items():
        if any(f" {k}=" in value for k in _TAIL_KEYS if k != key):
            raise _Ambiguous(key)
    # 22.05 prints Comment and Extra only when they are set, and ends a Reason (only a
    # Reason) with " [user@time]": a field after a Reason without it, or a field that
    # ends with it, holds the Reason's own words ("broken Extra={...}" on a node with no
    # Extra, with or without a "[user@time]" of the person's before it).
    if "Reason" in tail and len(tail) > 1 and not _REASON_TAIL.match(tail["Reason"]):
        raise _Ambiguous("Reason")
    if any(_REASON_TAIL.match(v) for k, v in tail.items() if k != "Reason"):
        raise _Ambiguous("[user@time] after the Reason")
    return rest, tail


def node_from_scontrol(line: str) -> NodeInfo:
    """One line of `scontrol show node -o` as NodeInfo. Raises `_Ambiguous` (a
    ValueError) when free text hides the field boundaries."""
    head, tail = _split_tail(line)
    fields = {m.group(1): m.group(2) for m in _KV.finditer(head)}
    if "NodeName" not in fields:
        raise SlurmError(f"scontrol line without NodeName: {line[:120]!r}")
    reason, user, when = tail.get("Reason", ""), "", None
    match = _REASON_TAIL.match(reason)
    if match:
        reason, user, when = match["reason"], match["user"], match["time"]
    return node_info(fields["NodeName"], state_flags(fields.get("State", "")), reason=reason,
                     user=user, when=when, extra=tail.get("Extra", ""),
                     partitions=fields.get("Partitions"),
                     features=fields.get("AvailableFeatures"), boot=fields.get("BootTime"),
                     slurmd_start=fields.get("SlurmdStartTime"),
                     address=fields.get("NodeAddr"), hostname=fields.get("NodeHostName"),
                     instance_id=fields.get("InstanceId"))


def parse_scontrol_nodes(text: str) -> tuple[NodeInfo, ...]:
    """Every line of `scontrol show node -o`. A line whose free text hides the field
    boundaries raises `_Ambiguous` (the caller reads the JSON instead); anything else
    that cannot be read is a SlurmError (issue 22)."""
    try:
        return tuple(node_from_scontrol(ln) for ln in text.splitlines() if ln.strip())
    except (SlurmError, _Ambiguous):
        raise
    except Exception as exc:
        raise unexpected_shape("scontrol show node -o", exc) from None


# ------------------------------------------------------------------ versions

# The JSON dialects this module reads, oldest first: (first Slurm version, name).
# 22.05 prints OpenAPI v0.0.38 (`sinfo --json` has a per-node list; no `scontrol
# --json`); from 23.02 on the data_parser plugins print per-node objects through
# `scontrol --json show node` (state lists, {"set","infinite","number"} times).
# Checked live: 22.05.8, 25.11.7 and 26.05.3 (README, "Supported Slurm versions").
DIALECTS = (((22, 5), "v0.0.38"), ((23, 2), "data_parser"))
NEWEST_KNOWN = (26, 5)
_VERSION = re.compile(r"(\d+)\.(\d+)")


def parse_slurm_version(text: str) -> tuple[int, int]:
    """(major, minor) from ``slurm 25.11.7`` (`sinfo --version`)."""
    match = _VERSION.search(text or "")
    if not match:
        raise SlurmError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
    return int(match[1]), int(match[2])


def dialect_for(version: tuple[int, int]) -> str:
    """The JSON dialect of that Slurm version; versions newer than any we know are read
    with the newest dialect (the caller warns)."""
    name = DIALECTS[0][1]
    for first, dialect in DIALECTS:
        if version >= first:
            name = dialect
    return name


# ------------------------------------------------------------------ the backend


def _collect(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytearray, bytearray]:
    """stdout and stderr of ``proc`` read to their end into one growing buffer each, then
    its exit awaited; TimeoutExpired after ``timeout`` seconds in all. One copy of the
    answer (issue 26: `communicate` held its chunks, their join and the decoded text, three
    copies of a 140 MB `sinfo --json` at 100k nodes)."""
    import select

    deadline = time.monotonic() + timeout
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out: bytearray(), err: bytearray()}
    poller = select.poll()
    for fd in bufs:
        poller.register(fd, select.POLLIN)
    open_fds = set(bufs)
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for fd, _ in poller.poll(left * 1000):
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    bufs[fd] += chunk
                else:
                    poller.unregister(fd)
                    open_fds.discard(fd)
        proc.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if not open_fds:
            proc.stdout.close()
            proc.stderr.close()
    return bufs[out], bufs[err]


class CliSlurm:
    """SlurmClient over the Slurm commands. ``slurm_conf`` selects the cluster (as
    SLURM_CONF does); every command runs with ``timeout`` seconds and reads are retried
    ``retries`` times when the controller does not answer."""

    def __init__(self, slurm_conf: str | None = None, timeout: float = 20.0,
                 retries: int = 1, retry_delay: float = 1.0) -> None:
        if slurm_conf is not None and not os.path.isfile(slurm_conf):
            # Slurm would retry a missing file for 60 s before failing; say it now.
            raise SlurmUnreachable(f"slurm.conf not found: {slurm_conf}")
        self.slurm_conf = slurm_conf
        self.timeout = timeout
        self.retries = max(0, retries)
        self.retry_delay = retry_delay
        self._version: tuple[int, int] | None = None

    @property
    def version(self) -> tuple[int, int]:
        """The Slurm commands' version, asked once (`sinfo --version`)."""
        if self._version is None:
            self._version = parse_slurm_version(self._run(["sinfo", "--version"]).stdout)
            if self._version > NEWEST_KNOWN:
                log.warning("Slurm %d.%02d is newer than the newest version slurm-heal knows "
                            "(%d.%02d); reading its JSON as %d.%02d's", *self._version,
                            *NEWEST_KNOWN, *NEWEST_KNOWN)
        return self._version

    @property
    def dialect(self) -> str:
        return dialect_for(self.version)

    # plumbing
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Epoch seconds, never local time without a zone (the text reads, issue 26).
        env["SLURM_TIME_FORMAT"] = "%s"
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _run(self, argv: Sequence[str], *, read: bool = False) -> subprocess.CompletedProcess[str]:
        return self._retried(argv, read, binary=False)

    def _read_bytes(self, argv: Sequence[str]) -> subprocess.CompletedProcess[Any]:
        """A read whose stdout is the bytes the command printed, in one buffer (a
        bytearray: the JSON the typed decoding reads, issue 26); stderr is text."""
        return self._retried(argv, True, binary=True)

    def _retried(self, argv: Sequence[str], read: bool,
                 binary: bool) -> subprocess.CompletedProcess[Any]:
        attempts = 1 + (self.retries if read else 0)
        last: SlurmError | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.retry_delay)
            try:
                return self._run_once(argv, binary)
            except SlurmUnreachable as exc:
                last = exc
        assert last is not None
        raise last

    def _run_once(self, argv: Sequence[str],
                  binary: bool = False) -> subprocess.CompletedProcess[Any]:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, env=self._env(),
                                    start_new_session=True)
        except OSError as exc:
            raise SlurmError(f"cannot run {argv[0]}: {exc}", command=argv) from exc
        try:
            raw, raw_err = _collect(proc, self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise SlurmUnreachable(f"no Slurm controller answered within {self.timeout:g}s",
                                   command=argv) from None
        err = raw_err.decode(errors="replace")
        out: Any = raw if binary else raw.decode(errors="replace")
        if proc.returncode != 0:
            # scontrol prints some errors ("Node gpu99 not found") on stdout.
            err = err if err.strip() else raw.decode(errors="replace")
            if any(s in err for s in _UNREACHABLE):
                raise SlurmUnreachable("no Slurm controller answered", command=argv,
                                       returncode=proc.returncode, stderr=err)
            raise SlurmError("Slurm command failed", command=argv,
                             returncode=proc.returncode, stderr=err)
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)

    def _update(self, node: str, *settings: str) -> None:
        argv = ["scontrol", "update", f"nodename={node}", *settings]
        try:
            self._run(argv)
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            if any(s in exc.stderr for s in _NOT_FOUND):
                raise NotFound(f"Slurm does not know node {node!r}") from exc
            raise

    # reads
    def nodes(self) -> tuple[NodeInfo, ...]:
        # Issue 26: the text forms cost Slurm's client a fraction of the JSON's CPU; the
        # JSON only where scontrol's text could have been forged (text.Ambiguous).
        from slurm_heal.slurm import text

        def read_sinfo(sep: str, names: str) -> str:
            return self._run(text.sinfo_argv(sep, names), read=True).stdout

        lines = self._run(list(text.SCONTROL_NODES), read=True).stdout
        try:
            nodes = text.nodes_from_text(lines, read_sinfo)
        except text.Ambiguous as why:
            log.info("reading Slurm's node JSON: %s", why)
        else:
            if nodes:
                return nodes
        return self._nodes_json()

    def _nodes_json(self) -> tuple[NodeInfo, ...]:
        if self.dialect == "v0.0.38":
            argv = ["sinfo", "--json"]
        else:
            argv = ["scontrol", "--json", "show", "node"]
        proc = self._read_bytes(argv)
        try:
            nodes = parse_sinfo_json(proc.stdout, argv, proc.stderr, what=" ".join(argv),
                                     release=True)
        except _NoNodeList:
            self._no_nodes_means_no_nodes(argv)  # names how many Slurm lists, if any
            raise
        if not nodes:
            self._no_nodes_means_no_nodes(argv)
        return nodes

    def _no_nodes_means_no_nodes(self, argv: Sequence[str]) -> None:
        """Zero nodes from the JSON while `sinfo -h -o %N` names some is a JSON we did not
        understand, never an empty cluster."""
        listed = _names(",".join(self._run(["sinfo", "-h", "-o", "%N"], read=True)
                                 .stdout.split()))
        if listed:
            raise SlurmError(f"{' '.join(argv)} gave no nodes but Slurm "
                             f"{'.'.join(map(str, self.version))} lists {len(listed)} "
                             f"({NodeSet.fromlist(listed)}): its JSON is not one slurm-heal "
                             "reads", command=argv)

    def _show_node(self, argv: Sequence[str], name: str) -> subprocess.CompletedProcess[str]:
        """Run a `scontrol show node NAME` read; Slurm's "not found" answer (on stderr or
        stdout, either version's wording) is NotFound, an unreachable controller stays
        SlurmUnreachable."""
        try:
            return self._run(argv, read=True)
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            if any(s in exc.stderr + str(exc) for s in _NOT_FOUND):
                raise NotFound(f"Slurm does not know node {name!r}") from exc
            raise

    def node(self, name: str) -> NodeInfo:
        if not name or len(NodeSet(name)) != 1:
            raise NotFound(f"not a single node name: {name!r}")
        if self.dialect != "v0.0.38":
            return self._node_json(name)
        proc = self._show_node(["scontrol", "show", "node", "-o", name], name)
        if "not found" in proc.stdout and "NodeName=" not in proc.stdout:
            raise NotFound(f"Slurm does not know node {name!r}")
        try:
            found = [n for n in parse_scontrol_nodes(proc.stdout) if n.name == name]
        except _Ambiguous:
            # free text that could be forged (`_split_tail`): the whole-cluster read's
            # rules, sinfo's separated fields for this line
            found = [n for n in self.nodes() if n.name == name]
        if not found:
            raise NotFound(f"Slurm does not know node {name!r}")
        return found[0]

    def own_node(self, name: str) -> NodeInfo:
        """One node's record alone, as the node check reads its own (issue 43): `sinfo -N
        -h -n NAME -O ...`, one REQUEST_NODE_INFO_SINGLE (and sinfo's partition read),
        where `node()` (`scontrol show node NAME`) has slurmctld pack the whole node
        table. Without boot times and InstanceId (sinfo prints neither): `node()` for
        those. NotFound when Slurm does not know the node."""
        from slurm_heal.slurm import text

        if not name or any(c in name for c in "[],") or len(NodeSet(name)) != 1:
            raise NotFound(f"not a single node name: {name!r}")
        sep = text.separator()
        try:
            out = self._run(text.sinfo_argv(sep, name), read=True).stdout
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            if any(s in exc.stderr + str(exc) for s in _NOT_FOUND):
                raise NotFound(f"Slurm does not know node {name!r}") from exc
            raise
        found = text.one_node(out, sep, name)
        if found is None:
            raise NotFound(f"Slurm does not know node {name!r}")
        return found

    def _node_json(self, name: str) -> NodeInfo:
        argv = ["scontrol", "--json", "show", "node", name]
        proc = self._show_node(argv, name)
        try:
            found = [n for n in parse_sinfo_json(proc.stdout, argv, proc.stderr,
                                                 what=" ".join(argv), typed=False)
                     if n.name == name]
        except SlurmError as exc:
            if any(s in str(exc) for s in _NOT_FOUND):
                raise NotFound(f"Slurm does not know node {name!r}") from exc
            raise
        if not found:
            raise NotFound(f"Slurm does not know node {name!r}")
        return found[0]

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        from slurm_heal.slurm import text

        sep = text.separator()  # issue 26: `squeue -o` costs a fraction of `--json`
        jobs = text.jobs_from_text(self._run(text.squeue_argv(sep), read=True).stdout, sep)
        if node is None:
            return jobs
        return tuple(j for j in jobs if node in j.nodes)

    def snapshot(self) -> ClusterView:
        return ClusterView(nodes=self.nodes(), jobs=self.jobs())

    def show_topology(self) -> str:
        """``scontrol show topology`` (SPEC S7, slurm_heal.topology parses it). Without a
        TopologyPlugin 22.05 says so on stderr with exit 0: that text is returned."""
        proc = self._run(["scontrol", "show", "topology"], read=True)
        return proc.stdout if proc.stdout.strip() else proc.stderr

    # writes
    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise SlurmError("a drain needs a reason (Slurm refuses an empty one)")
        self._update(node, "state=drain", f"reason={reason}")

    def resume(self, node: str) -> None:
        try:
            self._update(node, "state=resume")
        except NotFound:
            raise
        except SlurmError as exc:
            # Slurm refuses to resume a node that is neither drained nor down (22.05:
            # "Invalid node state specified", 25.11: "Invalid node state transition");
            # that is the state we wanted, so resume is idempotent.
            if any(s in exc.stderr for s in _BAD_TRANSITION) and not (
                    self.node(node).states & {"DRAIN", "DOWN", "FAIL"}):
                return
            raise

    def set_extra(self, node: str, key: str, value: Any | None,
                  current: str | None = None) -> None:
        # Read-modify-write: foreign keys survive; non-JSON foreign text raises.
        new = with_key(self.node(node).extra_raw if current is None else current, key, value)
        self._update(node, f"extra={new}")

    def reboot(self, node: str, reason: str, nextstate: str = "RESUME") -> None:
        nextstate = nextstate.upper()
        if nextstate not in NEXT_STATES:
            raise SlurmError(f"nextstate must be one of {', '.join(NEXT_STATES)}, not {nextstate!r}")
        info = self.node(node)  # NotFound before asking Slurm to reboot anything
        if nextstate == "DRAIN":
            if not info.drained or info.reason != reason:
                self._run(["scontrol", "update", f"nodename={node}", "state=drain",
                           f"reason={reason}"])
            self._run(["scontrol", "reboot", node])
            return
        self._run(["scontrol", "reboot", "ASAP", f"nextstate={nextstate}",
                   f"reason={reason}", node])

    def _active_job_ids(self, node: str) -> list[str]:
        return [str(j.job_id) for j in self.jobs(node) if j.state in ACTIVE_JOB_STATES]

    def _job_command(self, argv: list[str], ids: list[str]) -> None:
        if not ids:
            return
        try:
            self._run([*argv, *ids])
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            # A job that ended between listing and acting needs nothing more.
            lines = [ln for ln in exc.stderr.splitlines() if ln.strip()]
            if lines and all(any(s in ln for s in _JOB_GONE) for ln in lines):
                return
            raise

    def signal_jobs(self, node: str, signal: str) -> None:
        # --full: also the batch shell, not only the job's steps (a `sbatch --wrap` job
        # has no steps, so without it the signal reaches nobody).
        sig = signal.upper().removeprefix("SIG")
        self._job_command(["scancel", f"--signal={sig}", "--full"], self._active_job_ids(node))

    def requeue_jobs(self, node: str) -> None:
        ids = self._active_job_ids(node)
        if ids:
            self._job_command(["scontrol", "requeue"], [",".join(ids)])

    def cancel_jobs(self, node: str) -> None:
        self._job_command(["scancel"], self._active_job_ids(node))
