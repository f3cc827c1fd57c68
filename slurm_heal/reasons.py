"""Reason-string grammar (SPEC I2, Q1; house style 2 "we own our reasons").

Two kinds of Slurm node reason strings matter to slurm-heal:

1. **Our cordon marker**, written by slurm-heal only::

       heal: <fault> [rem=<remediation id>] [by=<check|controller>] [free text]

   e.g. ``heal: gpu.xid.79 rem=r-3f2a by=controller cordoned for reboot``. Every reason
   we write starts with ``heal:``; a node whose reason does not is never resumed or
   relabelled by us.

2. **A request**, written by the operator's own detectors (or by a person)::

       heal-request: <action> [detector=<name>] [id=<request id>] [free text]

   e.g. ``heal-request: reboot detector=ibmon id=4711 port 1 flapping``. ``action`` is
   one of reboot, rebuild, migrate (Q2; ``remove`` parses but is refused later, since
   removal is only ever done by a person). ``detector`` and ``id`` are tokens of
   ``[A-Za-z0-9._:/@-]``; together they deduplicate requests (Q3). Keys may come in
   any order before the free text; an unknown ``key=value`` before the free text is an
   error, so typos are caught instead of silently ignored.

Parsing is strict: a reason that starts with ``heal-request:`` but does not follow the
grammar raises `ReasonError` with what is wrong. The caller turns it into a
``request.malformed`` alert and leaves the node's state as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from slurm_heal.errors import ReasonError
from slurm_heal.types import Action

OUR_PREFIX = "heal:"
REQUEST_PREFIX = "heal-request:"
_TOKEN = re.compile(r"^[A-Za-z0-9._:/@-]{1,64}$")
_FAULT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
_MARKER_KEYS = ("rem", "by")
_REQUEST_KEYS = ("detector", "id")
# Slurm keeps reasons as plain strings; keep ours short so `sinfo -R` stays readable.
MAX_REASON = 200


@dataclass(frozen=True, slots=True)
class Marker:
    """Our cordon marker, parsed."""

    fault: str
    remediation: str | None = None
    by: str | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class ReasonRequest:
    """A request parsed from a node reason string (Q1)."""

    action: Action
    detector: str | None = None
    request_id: str | None = None
    text: str = ""


def is_ours(reason: str | None) -> bool:
    """True when ``reason`` is a cordon marker written by slurm-heal."""
    return bool(reason) and reason.lstrip().startswith(OUR_PREFIX)  # type: ignore[union-attr]


# Reasons Slurm writes itself around a reboot, exactly as slurmctld spells them (22.05 and
# 25.11, src/slurmctld): "reboot requested" and "Reboot ASAP" (`scontrol reboot` without
# a reason), "reboot issued", "reboot complete" and "reboot timed out" (each appended as
# " : <text>" to a reason already there), and "Node unexpectedly rebooted"
# (ReturnToService 0/1, after a reboot Slurm did not order; it replaces the reason).
# Only these, whole: a person's "Reboot pending: BIOS update (bob)" is theirs, never
# Slurm's (issue 8). They are ours to clear only when the boot is the one our own action
# caused (the caller checks the boot time).
SLURM_REBOOT_REASONS = frozenset({
    "Node unexpectedly rebooted", "reboot requested", "Reboot ASAP", "reboot issued",
    "reboot complete", "reboot timed out"})
# The node state flags Slurm sets while a reboot is pending or under way.
SLURM_REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})


def is_slurm_reboot(reason: str | None) -> bool:
    """True when ``reason`` is one Slurm writes itself around a reboot: every `` : ``
    separated part is exactly one of `SLURM_REBOOT_REASONS` (never a prefix match)."""
    if not reason or not reason.strip():
        return False
    return all(part.strip() in SLURM_REBOOT_REASONS for part in reason.strip().split(" : "))


def without_slurm_reboot_reasons(reason: str) -> str:
    """``reason`` without the reboot reasons Slurm appended to it (" : reboot issued",
    " : reboot timed out", ...; 22.05 and 25.11 alike): our marker as we wrote it, so a
    reason from an earlier reboot is never read as news about the next one."""
    parts = reason.split(" : ")
    while len(parts) > 1 and parts[-1].strip() in SLURM_REBOOT_REASONS:
        parts.pop()
    return " : ".join(parts)


def slurm_rebooting(states: frozenset[str] | set[str]) -> bool:
    """True when the node's state flags say Slurm has a reboot pending or under way."""
    return bool(SLURM_REBOOT_FLAGS & set(states))


# Who a node's reason belongs to (house style 2, SPEC D5, Q1): the one classifier the
# engine, the controller, the node check and the read model ask.
Owner = Literal["none", "ours", "request", "slurm", "person"]


def owner(reason: str | None) -> Owner:
    """Whose ``reason`` is: ``"ours"`` (our cordon marker, ``heal:``), ``"request"`` (a
    ``heal-request:``, well formed or not), ``"slurm"`` (only Slurm's own reboot reasons,
    `is_slurm_reboot`), ``"person"`` (anything else: a person's, or another tool's) and
    ``"none"`` (no reason at all; a blank one is a person's). What to do with each is the caller's rule: e.g. a
    Slurm reboot reason is ours to clear only after the boot our own action caused."""
    if not reason:
        return "none"
    if is_ours(reason):
        return "ours"
    if is_request(reason):
        return "request"
    if is_slurm_reboot(reason):
        return "slurm"
    return "person"


# Reasons of another tool that lifts its own drain: LBNL NHC drains with "NHC: ..." and
# resumes by itself only a node whose reason starts so (node-mark-online). Its lift is no
# person's resume (SPEC S8).
SELF_LIFTING_PREFIXES = ("NHC:",)


def persons_drain(reason: str | None) -> bool:
    """SPEC S8: a drain whose lift is a person's resume: a reason of a person's (owner
    ``"person"``), not one of a tool that resumes by itself (`SELF_LIFTING_PREFIXES`). A
    person who drained a node whose faults are published, and resumes it, saw them."""
    return owner(reason) == "person" and not (reason or "").lstrip().startswith(
        SELF_LIFTING_PREFIXES)


def is_request(reason: str | None) -> bool:
    """True when ``reason`` is (or tries to be) a heal request."""
    return bool(reason) and reason.lstrip().startswith(REQUEST_PREFIX)  # type: ignore[union-attr]


def _split_keys(words: list[str], allowed: tuple[str, ...], what: str) -> tuple[dict[str, str], str]:
    keys: dict[str, str] = {}
    i = 0
    while i < len(words) and "=" in words[i]:
        key, _, value = words[i].partition("=")
        if key not in allowed:
            raise ReasonError(
                f"{what}: unknown key {key!r} (allowed before the free text: {', '.join(allowed)})"
            )
        if key in keys:
            raise ReasonError(f"{what}: key {key!r} given twice")
        if not _TOKEN.match(value):
            raise ReasonError(
                f"{what}: {key}={value!r} is not a token (1-64 of letters, digits, ._:/@-)"
            )
        keys[key] = value
        i += 1
    return keys, " ".join(words[i:])


def format_marker(fault: str, remediation: str | None = None, by: str | None = None,
                  text: str = "") -> str:
    """Build our cordon marker. Raises ReasonError on an invalid fault id."""
    if not _FAULT.match(fault):
        raise ReasonError(f"cordon marker: {fault!r} is not a fault id")
    parts = [OUR_PREFIX, fault]
    if remediation:
        parts.append(f"rem={remediation}")
    if by:
        parts.append(f"by={by}")
    head = " ".join(parts)
    text = " ".join(text.split())
    if not text:
        return head[:MAX_REASON]
    if len(head) + 1 + len(text) <= MAX_REASON:
        return f"{head} {text}"
    # Too long for Slurm's reason: cut the text at a whole word and say so, never
    # mid-token (issue 25 item 9); the fault and keys come first and stay whole.
    room = MAX_REASON - len(head) - len(" ...") - 1
    cut = text[:room + 1].rsplit(" ", 1)[0] if room > 0 else ""
    if len(cut) > room:
        cut = ""
    return f"{head} {cut} ..." if cut else f"{head} ..."[:MAX_REASON]


def parse_marker(reason: str) -> Marker:
    """Parse our cordon marker. Raises ReasonError when ``reason`` is not one."""
    if not is_ours(reason):
        raise ReasonError(f"not a slurm-heal reason: {reason!r}")
    words = reason.strip()[len(OUR_PREFIX):].split()
    if not words or not _FAULT.match(words[0]):
        raise ReasonError(f"slurm-heal reason without a fault id: {reason!r}")
    keys, text = _split_keys(words[1:], _MARKER_KEYS, "slurm-heal reason")
    return Marker(fault=words[0], remediation=keys.get("rem"), by=keys.get("by"), text=text)


def marker_of(reason: str | None) -> Marker | None:
    """Our cordon marker in ``reason``, parsed; None when the reason is not ours or does
    not parse (then nothing in it is read as ours: no remediation, no ``by``)."""
    if owner(reason) != "ours":
        return None
    try:
        return parse_marker(reason or "")
    except ReasonError:
        return None


def format_request(action: Action, detector: str | None = None,
                   request_id: str | None = None, text: str = "") -> str:
    """Build a request reason string (what a detector should write)."""
    parts = [REQUEST_PREFIX, action.value]
    for key, value in (("detector", detector), ("id", request_id)):
        if value is not None:
            if not _TOKEN.match(value):
                raise ReasonError(f"heal request: {key}={value!r} is not a token")
            parts.append(f"{key}={value}")
    if text:
        parts.append(" ".join(text.split()))
    return " ".join(parts)


def parse_request(reason: str) -> ReasonRequest:
    """Parse a ``heal-request:`` reason string; ReasonError says what is wrong."""
    if not is_request(reason):
        raise ReasonError(f"not a heal request: {reason!r}")
    words = reason.strip()[len(REQUEST_PREFIX):].split()
    if not words:
        raise ReasonError("heal request: no action given (expected reboot, rebuild or migrate)")
    try:
        action = Action(words[0].lower())
    except ValueError:
        raise ReasonError(
            f"heal request: unknown action {words[0]!r} (expected reboot, rebuild or migrate)"
        ) from None
    if action in (Action.NONE, Action.POWER_CYCLE):
        raise ReasonError(f"heal request: {action.value} cannot be requested")
    keys, text = _split_keys(words[1:], _REQUEST_KEYS, "heal request")
    return ReasonRequest(action=action, detector=keys.get("detector"),
                         request_id=keys.get("id"), text=text)


def request_problem(reason: str | None) -> str:
    """What is wrong in a ``heal-request:`` reason that does not parse (SPEC Q1, O6);
    "" for a request that parses and for a reason that is no request at all."""
    if not is_request(reason):
        return ""
    try:
        parse_request(reason or "")
    except ReasonError as exc:
        return str(exc)
    return ""
