"""The `cli` Slurm backend (SPEC I3): `sinfo --json`, `squeue --json`, `scontrol`, `scancel`.

Light on purpose (the node check imports it on every run): standard library, ClusterShell
for host lists, our dataclasses; no pydantic, no requests.

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
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ClusterShell.NodeSet import NodeSet

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.extra import parse_extra, with_key
from slurm_heal.types import ClusterView, JobInfo, NodeInfo

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
# Slurm's INFINITE/NO_VAL for 32-bit fields in the JSON output.
_INFINITE32 = 0xFFFFFFFE
# A running job "uses" the node in these states (signal/requeue/cancel act on them).
ACTIVE_JOB_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED"})
# DRAIN: not a Slurm nextstate: `scontrol reboot NODE` (no ASAP, no nextstate) on a node
# drained with our reason; the drain survives the reboot (Slurm 22.05, seen on the lab:
# IDLE+DRAIN after the boot), so slurm-heal resumes it after the health check (SPEC L5).
# nextstate=DOWN is no substitute: with ReturnToService=2 the node is IDLE ~20 s later.
NEXT_STATES = ("RESUME", "DOWN", "DRAIN")
_EMPTY = ("", "(null)", "None", "none", "N/A", "n/a", "Unknown")


# ------------------------------------------------------------------ parsing (pure)


def parse_slurm_time(value: Any) -> datetime | None:
    """A Slurm time as an aware datetime: epoch seconds (JSON; 0 = unset) or scontrol's
    zone-less ``2026-01-05T00:00:00`` (local time). Unset/unknown values give None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if value <= 0 or value >= _INFINITE32:
            return None
        return datetime.fromtimestamp(value, tz=timezone.utc)
    text = str(value).strip()
    if text in _EMPTY:
        return None
    if text.isdigit():
        return parse_slurm_time(int(text))
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SlurmError(f"unexpected Slurm time {text!r}") from exc
    return parsed if parsed.tzinfo else parsed.astimezone()


# sinfo's one-character state suffixes (sinfo(1) "NODE STATE CODES"), as the flag each
# stands for in the JSON ``state_flags``. scontrol and pyslurm print ``DOWN*+DRAIN``:
# the suffix sits on a ``+`` part, not only at the end of the whole string.
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "!": "POWER_DOWN",
    "%": "POWERING_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED", "-": "PLANNED",
}


def state_flags(state: str, flags: Iterable[str] = ()) -> frozenset[str]:
    """Upper-case state flags from ``IDLE+DRAIN`` / ``DOWN*+DRAIN`` (scontrol, pyslurm)
    or the JSON ``state`` + ``state_flags`` pair. A suffix marker on any ``+`` part
    (``*`` not responding, ``~`` powered down, ...) is stripped and added as its flag."""
    out = {str(f).upper() for f in flags if f}
    for part in (state or "").strip().split("+"):
        part = part.strip()
        while part and part[-1] in _SUFFIX_FLAGS:
            out.add(_SUFFIX_FLAGS[part[-1]])
            part = part[:-1]
        if part:
            out.add(part.upper())
    return frozenset(out)


_ONE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _names(hostlist: str) -> tuple[str, ...]:
    """Expand a Slurm host list (``gpu[01-04]``) with ClusterShell; never by hand."""
    hostlist = (hostlist or "").strip()
    if hostlist in _EMPTY:
        return ()
    if _ONE_NAME.match(hostlist):
        return (hostlist,)  # one plain name (most jobs): no NodeSet needed (issue 13)
    return tuple(NodeSet(hostlist))


def _split_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value if v)
    text = str(value or "").strip()
    if text in _EMPTY:
        return ()
    return tuple(p for p in text.split(",") if p)


def _text(value: Any) -> str:
    text = "" if value is None else str(value)
    return "" if text in ("(null)",) else text


def node_from_json(raw: dict[str, Any]) -> NodeInfo:
    """One node of `sinfo --json` (OpenAPI v0.0.38) as NodeInfo."""
    try:
        name = str(raw["name"])
    except KeyError as exc:
        raise SlurmError(f"sinfo --json node without a name: {str(raw)[:120]}") from exc
    extra_raw = _text(raw.get("extra"))
    return NodeInfo(
        name=name,
        states=state_flags(str(raw.get("state", "")), raw.get("state_flags") or ()),
        reason=_text(raw.get("reason")),
        reason_user=_text(raw.get("reason_set_by_user")),
        reason_time=parse_slurm_time(raw.get("reason_changed_at")),
        extra_raw=extra_raw,
        extra=parse_extra(extra_raw),
        partitions=_split_list(raw.get("partitions")),
        features=_split_list(raw.get("features")),
        boot_time=parse_slurm_time(raw.get("boot_time")),
        slurmd_start_time=parse_slurm_time(raw.get("slurmd_start_time")),
        address=_text(raw.get("address")),
        hostname=_text(raw.get("hostname")),
        instance_id=_text(raw.get("instance_id")),
    )


def _load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmError(f"{what} did not print JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(data, dict):
        raise SlurmError(f"{what} printed JSON that is not an object: {text[:120]!r}")
    return data


def _check_json_errors(data: dict[str, Any], what: str, items: str,
                       command: Sequence[str] = (), stderr: str = "") -> None:
    errors = data.get("errors") or []
    if not errors:
        return
    detail = "; ".join(f"{e.get('error', '?')} (errno {e.get('errno', '?')})"
                       for e in errors if isinstance(e, dict)) or str(errors)
    # 22.05: an unreachable controller shows up as errno -1 with nothing listed, exit 0.
    if any(s in stderr for s in _UNREACHABLE) or not data.get(items):
        raise SlurmUnreachable(f"{what}: no Slurm controller answered ({detail})",
                               command=command, stderr=stderr)
    raise SlurmError(f"{what} reported errors: {detail}", command=command, stderr=stderr)


def parse_sinfo_json(text: str, command: Sequence[str] = (), stderr: str = "") -> tuple[NodeInfo, ...]:
    """All nodes of a `sinfo --json` document, once each, in Slurm's order."""
    data = _load_json(text, "sinfo --json")
    _check_json_errors(data, "sinfo --json", "nodes", command, stderr)
    seen: dict[str, NodeInfo] = {}
    for raw in data.get("nodes") or []:
        if isinstance(raw, dict):
            node = node_from_json(raw)
            seen.setdefault(node.name, node)
    return tuple(seen.values())


def job_from_json(raw: dict[str, Any]) -> JobInfo:
    """One job of `squeue --json` (OpenAPI v0.0.38) as JobInfo."""
    limit = raw.get("time_limit")
    limit_minutes = int(limit) if isinstance(limit, int) and 0 < limit < _INFINITE32 else None
    end = parse_slurm_time(raw.get("end_time"))
    state = str(raw.get("job_state", "")).upper()
    if state in ACTIVE_JOB_STATES and limit_minutes is None:
        # A running job without a time limit has no expected end (Slurm shows one a
        # year out); callers must treat None as "may run forever".
        end = None
    return JobInfo(
        job_id=int(raw["job_id"]),
        user=_text(raw.get("user_name")) or str(raw.get("user_id", "")),
        state=state,
        nodes=_names(str(raw.get("nodes") or "")),
        name=_text(raw.get("name")),
        start_time=parse_slurm_time(raw.get("start_time")),
        end_time=end,
        time_limit_minutes=limit_minutes,
    )


def parse_squeue_json(text: str, command: Sequence[str] = (), stderr: str = "") -> tuple[JobInfo, ...]:
    """All jobs of a `squeue --json` document."""
    data = _load_json(text, "squeue --json")
    errors = data.get("errors") or []
    if errors:
        # An empty job list is normal, so only the stderr tells unreachable apart.
        detail = "; ".join(str(e.get("error", e)) for e in errors if isinstance(e, dict))
        cls = SlurmUnreachable if (any(s in stderr for s in _UNREACHABLE)
                                   or any(e.get("errno") == -1 for e in errors
                                          if isinstance(e, dict))) else SlurmError
        raise cls(f"squeue --json reported errors: {detail}", command=command, stderr=stderr)
    out = []
    for raw in data.get("jobs") or []:
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
        reason, user, when = match["reason"], match["user"], parse_slurm_time(match["time"])
    extra_raw = tail.get("Extra", "")
    return NodeInfo(
        name=fields["NodeName"],
        states=state_flags(fields.get("State", "")),
        reason=reason,
        reason_user=user,
        reason_time=when,
        extra_raw=extra_raw,
        extra=parse_extra(extra_raw),
        partitions=_split_list(fields.get("Partitions")),
        features=_split_list(fields.get("AvailableFeatures")),
        boot_time=parse_slurm_time(fields.get("BootTime")),
        slurmd_start_time=parse_slurm_time(fields.get("SlurmdStartTime")),
        address=_text(fields.get("NodeAddr")),
        hostname=_text(fields.get("NodeHostName")),
        instance_id=_text(fields.get("InstanceId")),
    )


def parse_scontrol_nodes(text: str) -> tuple[NodeInfo, ...]:
    """Every line of `scontrol show node -o`."""
    return tuple(node_from_scontrol(ln) for ln in text.splitlines() if ln.strip())


# ------------------------------------------------------------------ the backend


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

    # plumbing
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def _run(self, argv: Sequence[str], *, read: bool = False) -> subprocess.CompletedProcess[str]:
        attempts = 1 + (self.retries if read else 0)
        last: SlurmError | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.retry_delay)
            try:
                return self._run_once(argv)
            except SlurmUnreachable as exc:
                last = exc
        assert last is not None
        raise last

    def _run_once(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, env=self._env(),
                                    start_new_session=True)
        except OSError as exc:
            raise SlurmError(f"cannot run {argv[0]}: {exc}", command=argv) from exc
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise SlurmUnreachable(f"no Slurm controller answered within {self.timeout:g}s",
                                   command=argv) from None
        if proc.returncode != 0:
            # scontrol prints some errors ("Node gpu99 not found") on stdout.
            err = err if err.strip() else out
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
        argv = ["sinfo", "--json"]
        proc = self._run(argv, read=True)
        return parse_sinfo_json(proc.stdout, argv, proc.stderr)

    def node(self, name: str) -> NodeInfo:
        if not name or len(NodeSet(name)) != 1:
            raise NotFound(f"not a single node name: {name!r}")
        argv = ["scontrol", "show", "node", "-o", name]
        try:
            proc = self._run(argv, read=True)
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            if any(s in exc.stderr + str(exc) for s in _NOT_FOUND):
                raise NotFound(f"Slurm does not know node {name!r}") from exc
            raise
        if "not found" in proc.stdout and "NodeName=" not in proc.stdout:
            raise NotFound(f"Slurm does not know node {name!r}")
        try:
            found = [n for n in parse_scontrol_nodes(proc.stdout) if n.name == name]
        except _Ambiguous:
            found = [n for n in self.nodes() if n.name == name]
        if not found:
            raise NotFound(f"Slurm does not know node {name!r}")
        return found[0]

    def jobs(self, node: str | None = None) -> tuple[JobInfo, ...]:
        argv = ["squeue", "--json"]
        proc = self._run(argv, read=True)
        jobs = parse_squeue_json(proc.stdout, argv, proc.stderr)
        if node is None:
            return jobs
        return tuple(j for j in jobs if node in j.nodes)

    def snapshot(self) -> ClusterView:
        return ClusterView(nodes=self.nodes(), jobs=self.jobs())

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
            # 22.05 refuses to resume a node that is neither drained nor down; that is
            # the state we wanted, so resume is idempotent.
            if "Invalid node state specified" in exc.stderr and not (
                    self.node(node).states & {"DRAIN", "DOWN", "FAIL"}):
                return
            raise

    def set_extra(self, node: str, key: str, value: Any | None) -> None:
        # Read-modify-write: foreign keys survive; non-JSON foreign text raises.
        new = with_key(self.node(node).extra_raw, key, value)
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
