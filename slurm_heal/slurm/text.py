"""The whole-cluster reads of the cli backend in Slurm's text forms (issue 26).

`sinfo --json` (22.05) and `scontrol --json show node` (23.02+) cost Slurm's client far
more CPU than the controller cycle itself at 10k nodes (687 ms and 2,593 ms measured);
the text forms cost a fraction. They are read so that free text cannot be misparsed:

- `sinfo -N -h -O FIELD:0SEP,...` and `squeue -h -t all -o %xSEP...`: every field ends
  with ``SEP``, a separator drawn at random for each call (a control character and 16
  hex digits). Reason, Extra, Comment and job names may hold spaces, ``=``, ``|``,
  newlines or JSON; what they cannot hold is a separator nobody knew before the command
  ran. ``:0``: no width, no padding, nothing cut (seen on 22.05.8, 25.11.7, 26.05.3).
- `sinfo -O` has no boot times: BootTime, SlurmdStartTime and InstanceId come from
  `scontrol show node -o`, whose free text (OS, Reason, Comment, Extra) is not
  delimited. A value is taken only where it cannot be forged: the key once in the line
  (BootTime and SlurmdStartTime are always printed), not in the node's Reason, Comment or
  Extra (known exactly from sinfo), InstanceId only after SlurmdStartTime (where Slurm
  prints it; OS comes before), one line per node sinfo listed, each starting with
  ``NodeName=``. Anything else is `Ambiguous`: the caller reads the JSON instead.
- Times: the caller sets ``SLURM_TIME_FORMAT=%s``, so they are epoch seconds, never
  local time without a zone.

Anything else that does not read (a field count that is no multiple of the record, a
job id that is no number) is a SlurmError naming the command and the problem (SPEC I6).
"""

from __future__ import annotations

import re
import secrets

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


def sinfo_argv(sep: str) -> list[str]:
    return ["sinfo", "-N", "-h", "-O", ",".join(f"{f}:0{sep}" for f in NODE_FIELDS)]


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


def boot_fields(text: str, free: dict[str, tuple[str, str, str]]) -> dict[str, tuple[str, str, str]]:
    """(BootTime, SlurmdStartTime, InstanceId) of each node of `scontrol show node -o`,
    in Slurm's node order. ``free``: each node's free text as sinfo printed it (Reason,
    Comment, Extra). `Ambiguous` where a value could be forged (module docstring)."""
    out: dict[str, tuple[str, str, str]] = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not line.startswith("NodeName="):
            raise Ambiguous(f"a line that is no node: {line[:60]!r}")
        space = line.find(" ")
        name = line[9:] if space < 0 else line[9:space]
        texts = free.get(name)
        if texts is None or name in out:
            raise Ambiguous(f"node {name[:60]!r} not once in both sinfo and scontrol")
        for marker in (_BOOT, _START, _INSTANCE):
            if any(marker in " " + t for t in texts):
                raise Ambiguous(f"node {name!r}: free text holding {marker.strip()}")
        if line.count(_BOOT) != 1 or line.count(_START) != 1 or line.count(_INSTANCE) > 1:
            raise Ambiguous(f"node {name!r}: a boot time not once in its line")
        boot, start, inst = line.find(_BOOT), line.find(_START), line.find(_INSTANCE)
        if 0 <= inst < start:
            raise Ambiguous(f"node {name!r}: InstanceId before SlurmdStartTime")
        out[name] = (_value(line, _BOOT, boot), _value(line, _START, start),
                     _value(line, _INSTANCE, inst) if inst >= 0 else "")
    if len(out) != len(free):
        raise Ambiguous(f"sinfo lists {len(free)} nodes, scontrol {len(out)}")
    return out


def nodes_from_text(sinfo_text: str, sep: str, scontrol_text: str) -> tuple[NodeInfo, ...]:
    """All nodes from `sinfo -N -h -O` (``sep`` its separator) and `scontrol show node
    -o`, once each, in Slurm's node order; a node in several partitions is one record
    with all of them. SlurmError for a malformed answer, `Ambiguous` as above."""
    from slurm_heal.slurm.cli import _ONE_NAME, guarded, node_info, state_flags

    merged: dict[str, list[str]] = {}
    partitions: dict[str, list[str]] = {}
    for rec in records(sinfo_text, sep, len(NODE_FIELDS), "sinfo -N -O"):
        name, part = rec[0], rec[7]
        if not _ONE_NAME.match(name):
            raise SlurmError(f"sinfo -N -O printed a node name slurm-heal cannot read: "
                             f"{name[:80]!r}")
        if name not in merged:
            merged[name], partitions[name] = rec, []
        if part and part not in partitions[name]:
            partitions[name].append(part)
    free = {name: (r[2], r[5], r[6]) for name, r in merged.items()}
    boots = boot_fields(scontrol_text, free)
    states: dict[str, frozenset[str]] = {}

    def mapped(name: str) -> NodeInfo:
        _, state, reason, user, when, extra, _c, _p, feats, addr, host = merged[name]
        flags = states.get(state)
        if flags is None:
            flags = states[state] = state_flags(state)
        user = "" if user == "Unknown" else _UID.sub("", user)
        if reason == "none" and not user:  # sinfo's word for no reason
            reason = ""
        boot, slurmd, instance = boots[name]
        return node_info(name, flags, reason=reason, user=user, when=when, extra=extra,
                         partitions=partitions[name], features=feats, boot=boot,
                         slurmd_start=slurmd, address=addr, hostname=host,
                         instance_id="" if instance in ("(null)", "N/A") else instance)

    return tuple(guarded("sinfo -N -O: node", str, mapped, name) for name in boots)


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
    from slurm_heal.slurm.cli import guarded, job_info

    def mapped(rec: list[str]) -> JobInfo:
        job_id, user, state, nodes, start, end, limit, name = rec
        if not job_id.isdigit():
            raise SlurmError(f"squeue -o printed a job id that is no number: {job_id[:40]!r}")
        return job_info(int(job_id), user=user, state=state, nodes=nodes, name=name,
                        start=start, end=end, limit=limit_minutes(limit))

    return tuple(guarded("squeue -o: job", lambda r: r[0], mapped, rec)
                 for rec in records(text, sep, len(JOB_FIELDS), "squeue -o"))
