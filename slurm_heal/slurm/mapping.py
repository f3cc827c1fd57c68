"""The one mapping of a Slurm record to NodeInfo / JobInfo, for every backend (issue 21),
and the pure helpers it needs: Slurm's times, state flags, host lists, the reason a state
carries. Its own module so that the text reads (`slurm_heal.slurm.text`) and the cli
backend share it without importing each other. Light: the node check imports it."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar

from ClusterShell.NodeSet import NodeSet

from slurm_heal import isotime
from slurm_heal.errors import SlurmError
from slurm_heal.types import UNREAD, JobInfo, NodeInfo

# Slurm's INFINITE/NO_VAL for 32-bit fields in the JSON output.
_INFINITE32 = 0xFFFFFFFE


# A running job "uses" the node in these states (signal/requeue/cancel act on them).
ACTIVE_JOB_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED"})


_EMPTY = ("", "(null)", "None", "none", "N/A", "n/a", "Unknown")
# A time Slurm does not have: squeue's text form on 26.05 prints NONE (e.g. the end of a
# job that has none yet), seen on the lab's 26.05 cli pass.
_NO_TIME = ("NONE",)


def _number(value: Any) -> Any:
    """A data_parser (23.02+) number object ``{"set", "infinite", "number"}`` as its
    plain value: None when unset or infinite; anything else is returned as it is."""
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def parse_slurm_time(value: Any) -> datetime | None:
    """A Slurm time as an aware datetime: epoch seconds (JSON; 0 = unset), a 23.02+
    ``{"set", "infinite", "number"}`` object, or scontrol's zone-less
    ``2026-01-05T00:00:00`` (local time). Unset/unknown values give None."""
    value = _number(value)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if value <= 0 or value >= _INFINITE32:
            return None
        return datetime.fromtimestamp(value, tz=timezone.utc)
    text = str(value).strip()
    if text in _EMPTY or text in _NO_TIME:
        return None
    if text.isdigit():
        return parse_slurm_time(int(text))
    try:
        parsed = isotime.parse(text)
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


# The states whose reason Slurm reports (`sinfo -R`: down, drained, fail, failing;
# and a requested reboot, which drains).
_REASON_STATES = frozenset({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING",
                            "REBOOT_REQUESTED", "REBOOT_ISSUED"})


def live_reason(states: frozenset[str], reason: str, user: str,
                when: datetime | None) -> tuple[str, str, datetime | None]:
    """(reason, user, time) when the node is in a state that carries a reason, else
    empty. Slurm 25.11 keeps the old reason on a node it resumed (seen on 25.11.7:
    `State=IDLE ... Reason=heal: ...`); 22.05 clears it. Both read the same."""
    if not reason or not states & _REASON_STATES:
        return "", "", None
    return reason, user, when
_ONE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _names(hostlist: str) -> tuple[str, ...]:
    """Expand a Slurm host list (``gpu[01-04]``) with ClusterShell; never by hand."""
    hostlist = (hostlist or "").strip()
    if hostlist in _EMPTY:
        return ()
    if _ONE_NAME.match(hostlist):
        return (hostlist,)  # one plain name (most jobs): no NodeSet needed (issue 13)
    # Counted before it is expanded: "gpu[0-99999999]" would take minutes and gigabytes
    # (issue 22). The policy's host lists are bounded the same way (config.node_names).
    from slurm_heal.config import MAX_HOSTLIST, _hostlist_size

    try:
        count = _hostlist_size(hostlist)
        names = tuple(NodeSet(hostlist)) if count <= MAX_HOSTLIST else ()
    except Exception as exc:  # ClusterShell's NodeSetParseError and friends (issue 22)
        raise SlurmError(f"Slurm printed a host list slurm-heal cannot read: "
                         f"{hostlist[:80]!r} ({type(exc).__name__})") from None
    if count > MAX_HOSTLIST:
        raise SlurmError(f"Slurm printed a host list of more than {MAX_HOSTLIST} names: "
                         f"{hostlist[:80]!r}")
    return names


def unexpected_shape(what: str, exc: BaseException) -> SlurmError:
    """SPEC I6 (issue 22): any other error while reading Slurm's answer is a SlurmError
    naming what was read; the daemon skips the cycle, never dies of Slurm's garbage."""
    return SlurmError(f"{what}: an answer of a shape slurm-heal does not read "
                      f"({type(exc).__name__}: {str(exc)[:160]})")


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


def _json_states(raw: dict[str, Any]) -> frozenset[str]:
    """v0.0.38: ``"state": "idle"`` plus ``"state_flags": ["DRAIN"]``; 23.02+: one list
    ``"state": ["IDLE", "DRAIN"]`` (base state first, then flags)."""
    state = raw.get("state")
    flags = list(raw.get("state_flags") or ())
    if isinstance(state, (list, tuple)):
        flags += [str(s) for s in state]
        state = ""
    return state_flags(str(state or ""), flags)


# ------------------------------------------------------------------ lean records (issue 26)
# The same few states, partitions and features repeat over a whole cluster: each record
# shares one object for each (100k nodes held 100k equal frozensets and tuples). Bounded:
# a cluster with more distinct values than this only shares less.
_SHARED_MAX = 4096
_SHARED: dict[Any, Any] = {}
_STATE_KEYS: dict[Any, frozenset[str]] = {}
_T = TypeVar("_T")


def _shared(value: _T) -> _T:
    """The one object equal to ``value`` (a frozenset or tuple of strings) records share."""
    hit = _SHARED.get(value)
    if hit is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        hit = _SHARED[value] = value
    return hit


def _typed_states(state: str | list[str] | None, flags: list[str] | None) -> frozenset[str]:
    """`_json_states` of a typed record (strings only), computed once per distinct pair."""
    key = (state if not isinstance(state, list) else tuple(state), tuple(flags or ()))
    hit = _STATE_KEYS.get(key)
    if hit is None:
        if len(_STATE_KEYS) >= _SHARED_MAX:
            _STATE_KEYS.clear()
        hit = _STATE_KEYS[key] = _shared(_json_states({"state": state, "state_flags": flags}))
    return hit


def node_info(name: str, states: frozenset[str], *, reason: Any, user: Any, when: Any,
              extra: Any, partitions: Any, features: Any, boot: Any, slurmd_start: Any,
              address: Any, hostname: Any, instance_id: Any) -> NodeInfo:
    """The one mapping of a node record to NodeInfo, for every backend (issue 21: it was
    written out in the cli, rest and pyslurm backends): the reason only where the state
    carries one (`live_reason`), Slurm's times as aware datetimes, lists from a comma
    list or a JSON list. Lean (issue 26): states, partitions and features shared between
    records, the user name interned, an address or host name equal to the name stored
    once, and Extra kept as its text until someone reads ``extra``."""
    reason, user, when = live_reason(states, _text(reason), _text(user), parse_slurm_time(when))
    address, hostname = _text(address), _text(hostname)
    return NodeInfo(
        name=name,
        states=_shared(states),
        reason=reason,
        reason_user=sys.intern(user),
        reason_time=when,
        extra_raw=_text(extra),
        extra=UNREAD,
        partitions=_shared(_split_list(partitions)),
        features=_shared(_split_list(features)),
        boot_time=parse_slurm_time(boot),
        slurmd_start_time=parse_slurm_time(slurmd_start),
        address=name if address == name else address,
        hostname=name if hostname == name else hostname,
        instance_id=_text(instance_id),
    )


def guarded(what: str, label: Callable[[Any], object], read: Callable[[Any], _T],
            raw: Any) -> _T:
    """``read(raw)``, any error but a SlurmError turned into one naming the record
    (``what`` and its ``label``): a field of a type Slurm never prints is a SlurmError
    (I6), never a TypeError. The one wrapper of every backend's node and job readers."""
    try:
        return read(raw)
    except SlurmError:
        raise
    except Exception as exc:  # TypeError, ValueError, OverflowError, RecursionError, ...
        try:
            name = str(label(raw))
        except Exception:
            name = "?"
        raise SlurmError(f"{what} {name[:60]!r} has a field of an unexpected type or "
                         f"value ({type(exc).__name__}: {str(exc)[:160]})") from None


def job_info(job_id: Any, *, user: Any, state: Any, nodes: Any, name: Any, start: Any,
             end: Any, limit: Any) -> JobInfo:
    """The one mapping of a job record to JobInfo, for every backend (issue 21): the
    time limit in minutes (None: unlimited), the host list expanded, no expected end
    for a running job without a limit. State and user names interned (issue 26)."""
    limit_minutes = int(limit) if isinstance(limit, int) and 0 < limit < _INFINITE32 else None
    end_time = parse_slurm_time(end)
    state = sys.intern(str(state).upper())
    if state in ACTIVE_JOB_STATES and limit_minutes is None:
        # A running job without a time limit has no expected end (Slurm shows one a
        # year out); callers must treat None as "may run forever".
        end_time = None
    return JobInfo(
        job_id=int(job_id),
        user=sys.intern(_text(user)),
        state=state,
        nodes=_names(str(nodes or "")),
        name=_text(name),
        start_time=parse_slurm_time(start),
        end_time=end_time,
        time_limit_minutes=limit_minutes,
    )
