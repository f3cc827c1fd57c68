"""The whole-cluster reads of the cli backend in Slurm's text forms (issue 26).

`sinfo --json` (22.05) and `scontrol --json show node` (23.02+) cost Slurm's client far
more CPU than the controller cycle itself at 10k nodes (553 ms and 2,593 ms measured);
`scontrol show node -o` costs 78 ms, `squeue -o` 18 ms. They are read so that free text
cannot be misparsed:

- `scontrol show node -o` is not delimited: OS (the node's own text), Reason, Comment
  and Extra may hold spaces and ``Key=`` text. A line is read only where it cannot be
  forged: BootTime and SlurmdStartTime once (Slurm always prints them), the keys read
  from the fixed part once and before BootTime, no ``=`` in the OS text (so nothing
  before BootTime is free text), at most one free-text field after SlurmdStartTime (its
  value then runs to the end of the line; a Reason ends with Slurm's ``[user@time]``),
  each line starting with ``NodeName=`` and no name twice. A node whose line has two
  free-text fields (a drained node with Extra) is read from `sinfo -N -h -n NAMES -O
  FIELD:0SEP,...`: every field ends with ``SEP``, drawn at random for each call, which
  no text can hold before the command ran (``:0``: no width, nothing cut; seen on
  22.05.8, 25.11.7, 26.05.3). sinfo -N is quadratic in the nodes it lists (1.5 s CPU at
  10k on 22.05), hence only those nodes, at most `MAX_RESOLVED`. Anything else (an
  InstanceId, which sinfo does not print; a line that is no node) is `Ambiguous`: the
  caller reads the JSON instead.
- `squeue -h -t all -o %ASEP...`: the same separator scheme; the job name comes last.
- Times: the caller sets ``SLURM_TIME_FORMAT=%s``, so they are epoch seconds, never
  local time without a zone.

Anything else that does not read (a field count that is no multiple of the record, a
job id that is no number) is a SlurmError naming the command and the problem (SPEC I6).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator
from typing import TypeVar

from slurm_heal.errors import SlurmError
from slurm_heal.types import JobInfo, NodeInfo

# sinfo -O field names (sinfo(1) --Format), in the order of a record.
NODE_FIELDS = ("NodeList", "StateComplete", "Reason", "UserLong", "Timestamp", "Extra",
               "Comment", "PartitionName", "Features", "NodeAddr", "NodeHost")
# squeue -o: job id (per array task, as the JSON's job_id), user, long state, nodes,
# start, end, time limit, name (free text, last).
JOB_FIELDS = ("%A", "%u", "%T", "%N", "%S", "%e", "%l", "%j")
SCONTROL_NODES = ("scontrol", "show", "node", "-o")
_BOOT, _START, _INSTANCE = " BootTime=", " SlurmdStartTime=", " InstanceId="
_UID = re.compile(r"\(\d+\)$")
_LIMIT = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)$")
_NO_LIMIT = ("UNLIMITED", "NOT_SET", "INVALID", "", "N/A", "Partition_Limit")


class Ambiguous(ValueError):
    """`scontrol show node -o` lines whose values could have been written by free text,
    or that do not match sinfo's nodes: the caller reads the JSON instead."""


def separator() -> str:
    """A field separator for one command: a control character, no ``%`` (squeue's format),
    no ``,`` (sinfo's field list), no digit first (sinfo's ``:0`` width)."""
    return "\x1fSH" + secrets.token_hex(8)


def squeue_argv(sep: str) -> list[str]:
    return ["squeue", "-h", "-t", "all", "-o", "".join(f"{f}{sep}" for f in JOB_FIELDS)]


def records(text: str, sep: str, width: int, what: str) -> list[list[str]]:
    """``text`` cut into records of ``width`` fields, each field ended by ``sep``, one
    record a line; a SlurmError naming ``what`` for anything else."""
    parts = text.split(sep)
    tail = parts.pop()
    if tail.strip():
        raise SlurmError(f"{what} printed text slurm-heal does not read "
                         f"(not {width} separated fields a record): {tail[:120]!r}")
    if len(parts) % width:
        raise SlurmError(f"{what} printed {len(parts)} fields, not records of {width}: "
                         f"{text[:120]!r}")
    out = []
    for i in range(0, len(parts), width):
        rec = parts[i:i + width]
        if i:
            if rec[0][:1] != "\n":
                raise SlurmError(f"{what}: a record that does not start a line: "
                                 f"{rec[0][:80]!r}")
            rec[0] = rec[0][1:]
        out.append(rec)
    return out


def _value(line: str, marker: str, at: int) -> str:
    start = at + len(marker)
    end = line.find(" ", start)
    return line[start:] if end < 0 else line[start:end]


def sinfo_argv(sep: str, names: str) -> list[str]:
    return ["sinfo", "-N", "-h", "-n", names, "-O",
            ",".join(f"{f}:0{sep}" for f in NODE_FIELDS)]


# `scontrol show node -o`: keys read from the fixed part (always printed once; Partitions
# only when the node has one), and the free-text fields Slurm prints after
# SlurmdStartTime (22.05: Reason, Comment, Extra; 25.11 adds InstanceId, InstanceType,
# ReservationName, TLSCert..., Topology and Parameters: each after Extra, so an Extra
# followed by one of them is two free-text fields, never one running to the line's end).
_HEAD = (" State=", " AvailableFeatures=", " NodeAddr=", " NodeHostName=")
_TAIL = (" Reason=", " Comment=", " Extra=", " ReservationName=", " InstanceType=",
         " TLSCertTokenSet=", " TLSCertLastRenewal=", " Topology=", " Parameters=")
_REASON = re.compile(r"^(?P<reason>.*) \[(?P<user>[^@\]\s]+)@(?P<time>\d+)\]$", re.S)
# Above this many nodes to read through sinfo, the JSON costs less (sinfo -N is
# quadratic in the nodes it lists: 1.5 s CPU for 10k on 22.05).
MAX_RESOLVED = 500
Fields = dict[str, str]
_T = TypeVar("_T")


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` one at a time (a list of all of them would be a second copy
    of a 60 MB answer at 100k nodes)."""
    pos, size = 0, len(text)
    while pos < size:
        end = text.find("\n", pos)
        end = size if end < 0 else end
        yield text[pos:end]
        pos = end + 1


def scontrol_nodes(text: str, make: Callable[[str, Fields, tuple[str, str]], _T]
                   ) -> tuple[dict[str, _T | None], dict[str, tuple[str, str]]]:
    """Each node of `scontrol show node -o` (SLURM_TIME_FORMAT=%s) in Slurm's order: its
    fields, or None where the line cannot be split for certain (two free-text fields, a
    key twice, ``=`` in the node's OS text): those are read with `sinfo -N -n` (fields
    ended by a separator); ``make(name, fields, boot times)`` maps the others as they
    are read. Beside it, every node's (BootTime, SlurmdStartTime).
    `Ambiguous` (read the JSON) where even those could be forged or a line is no node."""
    out: dict[str, _T | None] = {}
    boots: dict[str, tuple[str, str]] = {}
    for line in _lines(text):
        if not line.strip():
            continue
        if not line.startswith("NodeName="):
            raise Ambiguous(f"a line that is no node: {line[:60]!r}")
        space = line.find(" ")
        name = line[9:] if space < 0 else line[9:space]
        if name in out:
            raise Ambiguous(f"node {name[:60]!r} twice")
        if line.count(_BOOT) != 1 or line.count(_START) != 1 or _INSTANCE in line:
            raise Ambiguous(f"node {name[:60]!r}: boot times not once, or an InstanceId")
        boot, start = line.find(_BOOT), line.find(_START)
        if not boot < start:
            raise Ambiguous(f"node {name[:60]!r}: boot times out of order")
        times = boots[name] = (_value(line, _BOOT, boot), _value(line, _START, start))
        fields = _fields(line, boot, start)
        out[name] = None if fields is None else make(name, fields, times)
    return out, boots


def _fields(line: str, boot: int, start: int) -> Fields | None:
    os_at, mem_at = line.find(" OS="), line.find(" RealMemory=")
    if os_at >= 0 and (mem_at < os_at or "=" in line[os_at + 4:mem_at]):
        return None
    got: Fields = {}
    for key in _HEAD:
        if line.count(key) != 1 or line.find(key) > boot:
            return None
        got[key] = _value(line, key, line.find(key))
    part = line.find(" Partitions=")
    if line.count(" Partitions=") > 1 or part > boot:
        return None
    got[" Partitions="] = _value(line, " Partitions=", part) if part >= 0 else ""
    tails = [(line.find(k), k) for k in _TAIL if k in line]
    if len(tails) > 1 or any(line.count(k) > 1 for _, k in tails):
        return None
    got[" Reason="] = got[" Extra="] = ""
    if tails:
        at, key = tails[0]
        if at < start:
            return None
        value = line[at + len(key):]
        if key == " Reason=":
            match = _REASON.match(value)
            if not match:
                return None
            got[" Reason="], got["user"], got["time"] = match["reason"], match["user"], \
                match["time"]
        elif key == " Extra=":
            got[" Extra="] = value
    return got


def nodes_from_text(scontrol_text: str, read_sinfo: Callable[[str, str], str]
                    ) -> tuple[NodeInfo, ...]:
    """All nodes from `scontrol show node -o`, those whose line cannot be split for
    certain from `sinfo -N -n NAMES -O` (``read_sinfo(sep, names)`` runs it), once
    each, in Slurm's order. SlurmError for a malformed answer, `Ambiguous` as above."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    from slurm_heal.slurm.mapping import guarded, node_info, state_flags

    states: dict[str, frozenset[str]] = {}

    def flags_of(state: str) -> frozenset[str]:
        hit = states.get(state)
        if hit is None:
            hit = states[state] = state_flags(state)
        return hit

    def from_line(name: str, f: Fields, times: tuple[str, str]) -> NodeInfo:
        return node_info(name, flags_of(f[" State="]), reason=f[" Reason="],
                         user=f.get("user", ""), when=f.get("time"), extra=f[" Extra="],
                         partitions=f[" Partitions="], features=f[" AvailableFeatures="],
                         boot=times[0], slurmd_start=times[1], address=f[" NodeAddr="],
                         hostname=f[" NodeHostName="], instance_id="")

    def made(name: str, f: Fields, times: tuple[str, str]) -> NodeInfo:
        return guarded("scontrol show node -o: node", str,
                       lambda n: from_line(n, f, times), name)

    lines, boots = scontrol_nodes(scontrol_text, made)
    unsure = [name for name, n in lines.items() if n is None]
    listed: dict[str, list[str]] = {}
    partitions: dict[str, list[str]] = {}
    if unsure:
        if len(unsure) > MAX_RESOLVED:
            raise Ambiguous(f"{len(unsure)} nodes whose text cannot be split for certain")
        sep = separator()
        try:
            hostlist = str(NodeSet.fromlist(unsure))
        except NodeSetParseError as exc:  # a name no host list can hold: read the JSON
            raise Ambiguous(f"a node name that is no host name ({exc})") from None
        answer = read_sinfo(sep, hostlist)
        for rec in records(answer, sep, len(NODE_FIELDS), "sinfo -N -O"):
            name, part = rec[0], rec[7]
            if name not in lines:
                raise SlurmError(f"sinfo -N -O printed a node scontrol does not list: "
                                 f"{name[:80]!r}")
            if name not in listed:
                listed[name], partitions[name] = rec, []
            if part and part != "(null)" and part not in partitions[name]:
                partitions[name].append(part)
        if len(listed) != len(unsure):
            raise Ambiguous(f"sinfo lists {len(listed)} of {len(unsure)} nodes")

    def mapped(name: str) -> NodeInfo:
        known = lines[name]
        if known is not None:
            return known
        boot, slurmd = boots[name]
        return from_sinfo(listed[name], partitions[name], flags_of, boot, slurmd)

    return tuple(guarded("scontrol show node -o: node", str, mapped, name) for name in lines)


def from_sinfo(rec: list[str], partitions: list[str],
               flags_of: Callable[[str], frozenset[str]], boot: str = "",
               slurmd: str = "") -> NodeInfo:
    """One `sinfo -N -O` record (`NODE_FIELDS`) as a NodeInfo: sinfo prints no boot
    times (``boot``, ``slurmd``: scontrol's, where read) and no InstanceId."""
    from slurm_heal.slurm.mapping import node_info

    name, state, reason, user, when, extra, _c, _p, feats, addr, host = rec
    user = "" if user == "Unknown" else _UID.sub("", user)
    if reason == "none" and not user:  # sinfo's word for no reason
        reason = ""
    return node_info(name, flags_of(state), reason=reason, user=user, when=when,
                     extra=extra, partitions=partitions, features=feats, boot=boot,
                     slurmd_start=slurmd, address=addr, hostname=host, instance_id="")


def one_node(answer: str, sep: str, name: str) -> NodeInfo | None:
    """`sinfo -N -h -n NAME -O ...` (`sinfo_argv`) as the one node's record, its
    partitions from all of its lines (one a partition); None when sinfo lists no such
    node. Slurm answers it with one REQUEST_NODE_INFO_SINGLE (and the partition read
    sinfo adds), where `scontrol show node NAME` fetches the whole node table (issue 43:
    the node check's read)."""
    from slurm_heal.slurm.mapping import state_flags

    recs = records(answer, sep, len(NODE_FIELDS), "sinfo -N -O")
    mine = [r for r in recs if r[0] == name]
    if len(mine) != len(recs):
        raise SlurmError(f"sinfo -N -n {name} printed another node: "
                         f"{next(r[0] for r in recs if r[0] != name)[:80]!r}")
    if not mine:
        return None
    parts: list[str] = []
    for r in mine:
        if r[7] and r[7] != "(null)" and r[7] not in parts:
            parts.append(r[7])
    return from_sinfo(mine[0], parts, state_flags)


def limit_minutes(text: str) -> int | None:
    """squeue's time limit (``[days-]hours:minutes:seconds``, ``minutes:seconds``,
    ``UNLIMITED``) in minutes, None when unlimited or unset; SlurmError otherwise."""
    text = text.strip()
    if text in _NO_LIMIT:
        return None
    match = _LIMIT.match(text)
    if not match:
        raise SlurmError(f"squeue -o printed a time limit slurm-heal cannot read: {text[:40]!r}")
    days, a, b, c = (int(g) if g else 0 for g in match.groups())
    # h:m:s, m:s or m (the groups fill from the right)
    if match[2] and match[3]:
        hours, minutes, seconds = a, b, c
    elif match[2]:
        hours, minutes, seconds = 0, a, c
    else:
        hours, minutes, seconds = 0, c, 0
        if days:
            hours, minutes = c, 0  # days-hours
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def jobs_from_text(text: str, sep: str) -> tuple[JobInfo, ...]:
    """All jobs of `squeue -h -t all -o` (``sep`` its separator); SlurmError naming the
    job for a field that does not read."""
    from slurm_heal.slurm.mapping import guarded, job_info

    def mapped(rec: list[str]) -> JobInfo:
        job_id, user, state, nodes, start, end, limit, name = rec
        if not job_id.isdigit():
            raise SlurmError(f"squeue -o printed a job id that is no number: {job_id[:40]!r}")
        return job_info(int(job_id), user=user, state=state, nodes=nodes, name=name,
                        start=start, end=end, limit=limit_minutes(limit))

    return tuple(guarded("squeue -o: job", lambda r: r[0], mapped, rec)
                 for rec in records(text, sep, len(JOB_FIELDS), "squeue -o"))
