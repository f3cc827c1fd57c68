"""Kernel log parsing and evaluation (SPEC D1, D2, D4). Pure: bytes in, events out.

Speed matters (the target is >= 500 MB/s): a big chunk is never split into lines in
Python. Only the lines holding one of a handful of literal needles (`NEEDLES`) are
decoded and parsed; `candidate_spans` finds them with one ``bytes.find`` pass per
needle (C speed, no process), and a big file is searched for all of them in one pass
by a ``grep -F`` child instead (`slurm_heal.checks.sources`), which `scan` is handed.
A fault storm (issue 35: <= 10 us an event) repeats a few lines with new digits: where a
needle is on most lines, the rest is split into lines in blocks in C (`_dense_spans`);
each shape of line (`_SHAPE`) is parsed once and its later lines read from the offsets
found (`_reader`); each message is classified once.

Line formats understood, detected per line (a file may mix them after rotation):

* kmsg records ``prio,seq,usec,flags;message`` (/dev/kmsg, or a replay file of it);
  continuation lines (``" KEY=value"``) are skipped
* ``dmesg -T``: ``[Sun Feb 23 16:24:18 2025] message``
* plain ``dmesg``: ``[  123.456789] message``
* ``journalctl -k -o short-iso`` / rsyslog: ``2025-02-23T16:24:18+0000 host kernel: message``
* ``dmesg --time-format=iso``: ``2024-11-15T12:02:03,470068+00:00 message`` (a comma
  before the fraction), and ``dmesg --decode`` (``-x``) in any of the dmesg forms:
  ``kern  :err   : <stamp> message``
* ``talosctl dmesg``: ``10.5.0.3: kern: warning: [2026-04-22T21:25:20.505406921Z]:
  message`` (the node prefix optional, the level padded); remote syslog's ``<4>`` (RFC
  3164) and ``<4>1 <stamp> host kernel - - - message`` (RFC 5424); a container
  runtime's log (CRI ``<stamp> stdout F <line>``) of any form, whose inner time wins
* classic syslog: ``Feb 23 16:24:18 host kernel: [ 123.4] message``. The stamp has no
  year and no zone: ``at`` is that local time, zone-less like ``dmesg -T``, in the year
  that puts it at most a day after the scan's ``now`` (so a December line read in
  January is last year's). The ``[sec.usec]`` stamp is kept as ``usec`` but not used for
  the wall time: in a file it may belong to an earlier boot.

A message the driver prints over several lines (drivers 570+: "NVRM: The NVIDIA GPU
<pci>" / "(PCI ID: ...) installed in this system has" / "NVRM: fallen off the bus ...")
is read as one: the last line takes the GPU from the lines just before it (SPEC D2).

Work is linear in the size of the data (a 32 KB line costs what 32 KB of short lines
cost): every pattern runs anchored where its needle was found, or on a bounded window
around it, never as an unanchored search over a whole line. ``WORK`` counts the
characters each pattern may examine, so a test can check this without a clock.

A line that cannot be parsed (a 20-digit timestamp, a 5,000-digit Xid code, anything
else that breaks the parse) is skipped and counted in ``ScanResult.skipped``, never
fatal: the scan goes on and the source's cursor moves past it, so one bad record
cannot blind the detector for the lines that follow (a real Xid 79 after it is found).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import partial
from itertools import accumulate, compress, repeat
from operator import add as _add

from slurm_heal.frozen import dataclass, field, maker, replace
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

# Every line that can produce an event contains one of these. Keep them literal and
# few: each costs one pass of bytes.find over a chunk below sources.GREP_MIN_BYTES (a
# bigger file is searched for all of them in one pass).
# Longer needles ending in a rare byte are faster for bytes.find (it skips by the last
# byte): "soft lockup - CPU#" runs at ~5 GB/s where "soft lockup" manages ~3.
NEEDLES: tuple[bytes, ...] = (
    b"NVRM: Xid (",
    b"NVRM: GPU at PCI:",
    b"fallen off the bus",
    b"Shutting down filesystem",
    b"shut down due to",
    b"blocked for more than",
    b"soft lockup - CPU#",
    # Every RCU stall report starts "INFO: rcu_<flavour> ..." (kernel/rcu/tree_stall.h,
    # tree_exp.h, tasks.h; since 4.19 after an "rcu: " prefix): "self-detected stall on
    # CPU", "detected stalls on CPUs/tasks", and "detected expedited stalls on
    # CPUs/tasks", which "detected stall" missed. One needle for all, ending in a rare byte.
    b"INFO: rcu_",
    # amdgpu (SPEC D9): RAS "N [new ]uncorrectable hardware errors detected in [total in]
    # BLOCK block" and the fatal "[{N}]uncorrectable hardware error(ERREVENT_...) detected!"
    # (the RAS manager of 6.1x kernels writes it "Uncorrectable": one needle without the
    # first letter); the driver's "GPU reset begin!", "GPU reset(N) failed", "GPU reset
    # end with ret = -62" (drivers/gpu/drm/amd/amdgpu); KFD's "RAS poison consumption"
    # and "poison is consumed by client N" (amdkfd/kfd_int_process_v9.c): "oison ".
    b"ncorrectable hardware error",
    b"GPU reset",
    b"oison ",
    # NVSwitch (SPEC D10): "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link
    # 48 LTSSM Fault Up" (the driver's lwswitch SXid print).
    b"SXid (PCI:",
    # The kernel's first line, "Linux version 6.8.0-45-generic (buildd@...) ...": a boot
    # in a file that outlives boots. Lines before it are from an earlier boot (D1).
    b"Linux version",
)

# Characters the patterns were allowed to examine, summed over calls: the work bound of
# the scan (module docstring). A list so it can be reset and read from tests.
WORK = [0]
# How far around a needle a pattern looks (a real message's parts sit within a few
# dozen characters of it; the windows only bound the work on garbage).
_BEFORE = 256
_AFTER = 512

_PCI = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
class _Lazy:
    """A regex compiled on first use: a healthy run with no candidate line compiles
    none of them (start-up time is most of a check's cost)."""

    __slots__ = ("_args", "_re")

    def __init__(self, *args: Any) -> None:
        self._args = args
        self._re: re.Pattern[str] | None = None

    def _get(self) -> re.Pattern[str]:
        if self._re is None:
            self._re = re.compile(*self._args)
        return self._re

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        """Anchored at ``pos``. The patterns matched so are written to be linear."""
        WORK[0] += len(text) - pos
        return (self._re or self._get()).match(text, pos)

    def search(self, text: str) -> re.Match[str] | None:
        """Unanchored: each start may run to the end, so only on bounded windows."""
        WORK[0] += len(text) * (len(text) + 1) // 2
        return self._get().search(text)


def _window(msg: str, at: int, before: int = _BEFORE, after: int = _AFTER) -> tuple[str, int]:
    """``msg`` around offset ``at``: the window and where it starts in ``msg``."""
    start = max(0, at - before)
    return msg[start:at + after], start


# The PCI field may be redacted in a posted log ("Xid (PCI:...): 145"): still an Xid, on
# an unknown GPU (a line is never dropped).
_XID = _Lazy(r"NVRM: Xid \((?:PCI:)?(" + _PCI + r"|[^)]{0,32})\): (\d+),\s*(.*)$")
_PIDNAME = _Lazy(r"^pid=([^,]*),\s*(?:name=([^,]*),\s*)?(.*)$")
_GPU_AT = _Lazy(r"NVRM: GPU at PCI:(" + _PCI + r"): (GPU-[0-9a-fA-F-]+)")
_PCI_AT = _Lazy(r"(" + _PCI + r")\b")
_PCI_ONLY = _Lazy(_PCI + r"\Z")
_GPU_NAMED = b"NVRM: The NVIDIA GPU "
_RECOVERY = _Lazy(r"to 0x[0-9a-fA-F]{1,16} \(([^)]{1,64})\)")
# Xid 144-150 (NVLink5): "<sub-code> <Fatal|Nonfatal> XC<n> i<n> Link <n> (<intrInfo>
# <errorStatus> <debug0..4>)"; drivers before R575 print "XC 1 i 2 ... [0x...]".
# "Link -1": the error is not on one link (NETIR, seen on GB200).
_NVL5 = _Lazy(r"^([A-Za-z0-9_/]+)\s+(Fatal|Non-?fatal|Non_fatal)\s+XC\s*(\d{1,3})\s+"
              r"i\s*(\d{1,3})\s+Link\s+(-?\d{1,4})\s*[(\[]\s*(0x[0-9a-fA-F]{1,16})"
              r"(?:\s+(0x[0-9a-fA-F]{1,16}))?", re.IGNORECASE)
_XFS = _Lazy(r"XFS \(([^)]{1,64})\):")
_HUNG = _Lazy(r"INFO: task (.{1,64}):(\d+) blocked for more than (\d+) seconds")
_AMD_DEV = _Lazy(r"amdgpu (" + _PCI + r"):")
_AMD_RAS = _Lazy(r"(\d+) (?:new )?[Uu]ncorrectable hardware errors? detected in (?:total in )?"
                 r"(\w{1,32}) block")
# "GPU reset begin!", "GPU reset(1) failed", "GPU reset failed", "GPU reset end with ret =
# -62" (and the successes, which are not faults).
_AMD_RESET = _Lazy(r"GPU reset( begin!|(?:\(\d{1,4}\))? ?(failed)|(?:\(\d{1,4}\))? "
                   r"end with ret = -?(\d{1,6})|)")
_SOFT = _Lazy(r"soft lockup - CPU#(\d+) stuck for (\d+)s!(?: \[(.{1,64}):(\d+)\])?")
_RCU = _Lazy(r"detected (?:expedited )?stall")
# "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"; the
# same SXid's "Severity 1 Engine instance ..." and "Data {...}" lines carry no verdict.
_SXID = _Lazy(r"SXid \((?:PCI:)?(" + _PCI + r")\): (\d+), (Fatal|Non-fatal|Nonfatal),"
              r"\s*(?:Link (-?\d{1,4})\s*)?(.*)$", re.IGNORECASE)
_SWITCH = _Lazy(r"(nvidia-nvswitch\d{1,4}): $")

_KMSG = _Lazy(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_DMESG_T = _Lazy(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\] ?(.*)$")
_DMESG = _Lazy(r"^\[ *(\d+)\.(\d+)\] ?(.*)$")
_STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
# journalctl short-iso, rsyslog; RFC 5424 (remote syslog): "<stamp> host kernel - - - ".
_ISO = _Lazy(r"^" + _STAMP + r" \S+ kernel(?::| - - -) ?(?:\[ *\d+\.\d+\] )?(.*)$")
_LONG_FRACTION = _Lazy(r"\.\d{7,}")
_PRIO = _Lazy(r"<\d{1,3}>(?:1 )?")
# talosctl dmesg: "[<node>: ]<facility>: <level>: [<RFC 3339 stamp>]: <message>".
_TALOS = _Lazy(r"^(?:[^\s:]{1,253}: )?([a-z]{1,10}): *[a-z]{1,8}: \[" + _STAMP + r"\]: ?(.*)$")
# A container runtime's (CRI) log line after its stamp: "stdout F " / "stderr P ".
_CRI = _Lazy(r"(?:stdout|stderr) [FP] ")
# dmesg --time-format=iso: the stamp, then the message (no host, no "kernel:").
_DMESG_ISO = _Lazy(r"^" + _STAMP + r" (.*)$")
# dmesg --decode: "kern  :err   : " before the stamp (facility and level, padded).
_DECODE = _Lazy(r"^[a-z0-9]{2,8} *:[a-z]{0,6} *: ")
_DECODED: dict[str, int] = {}  # a line's first 24 characters -> the end of _DECODE's match
# Timestamps beyond a century of uptime are not timestamps (and would overflow the
# wall-time arithmetic): such a record is skipped.
MAX_USEC = 100 * 366 * 86400 * 1_000_000
# Characters of a line kept as a latched fault's evidence in the state file.
MAX_EVIDENCE_TEXT = 2048
# Digits in any number of a kernel message we convert with int(): sequence numbers,
# Xid codes, pids, CPUs. Longer is garbage (and Python refuses over 4,300 digits).
MAX_DIGITS = 20

_SYSLOG = _Lazy(r"^(\w{3} +\d+ \d\d:\d\d:\d\d) \S+ kernel: ?(?:\[ *(\d+)\.(\d+)\] )?(.*)$")
# A syslog header with the program's tag (RFC 3164 after its stamp: "host tag[pid]: ";
# RFC 5424 after "<PRI>1 <stamp> ": "host app procid msgid "): the tag a program gives
# itself (`logger` writes the user's name, `logger -t NAME` any name). Host names hold no
# colon and tags no parenthesis, so no kernel message of the dmesg forms reads as one.
_TAG_3164 = _Lazy(r"^(?:\w{3} +\d+ \d\d:\d\d:\d\d )?[^\s:]{1,253} ([\w.\-/@]{1,64})"
                  r"(?:\[\d{1,10}\])?: ")
_SYSLOG_STAMP = _Lazy(r"^(\w{3} +\d+ \d\d:\d\d:\d\d) ")
_TAG_5424 = _Lazy(r"^[^\s:]{1,253} (\S{1,48}) \S{1,128} \S{1,32} ")


@dataclass(frozen=True, slots=True)
class Line:
    """One kernel log line split into its time and message."""

    raw: str
    message: str
    at: str | None = None  # ISO-8601 wall time when the format carries it
    usec: int | None = None  # microseconds since boot (kmsg, plain dmesg)
    seq: int | None = None  # kmsg sequence number
    # A syslog line another program wrote (its tag, or its facility, is not the
    # kernel's): never a kernel event, whatever its text (issue 34 item 1, SPEC D1).
    foreign: str = ""


@dataclass(frozen=True, slots=True)
class Event:
    """One kernel message that means a fault (or maps a GPU)."""

    fault: str  # catalog id
    key: str  # what makes two events the same alert on this node (e.g. the PCI bus)
    line: Line
    pci: str | None = None
    xid: int | None = None
    pid: int | None = None
    process: str | None = None
    detail: str = ""  # the driver's/kernel's own words
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ScanResult:
    """Events in order, plus what the log says about which GPU sits on which bus."""

    events: list[Event] = field(default_factory=list)
    gpu_uuids: dict[str, str] = field(default_factory=dict)  # pci -> GPU-uuid
    lines: int = 0  # lines parsed (after the prefilter)
    skipped: int = 0  # lines that could not be parsed: skipped, never fatal
    skipped_sample: str = ""  # the first skipped line (trimmed), for the detector's status
    # Lines with a fault's text that another program wrote (a syslog tag or facility that
    # is not the kernel's: `logger "NVRM: Xid ..."`): never events (issue 34 item 1).
    foreign: int = 0
    foreign_sample: str = ""
    # How many of ``events`` came before the last boot the data shows (a "Linux version"
    # line, or a monotonic stamp / kmsg sequence number that went back): those are from
    # an earlier boot, whatever their own time says (0: no boot seen).
    boot_at: int = 0
    boots: int = 0  # boots seen in the data
    # The last monotonic stamp and kmsg sequence number seen (to see them go back).
    last_usec: int | None = None
    last_seq: int | None = None


# Fast positional constructors of the two records a storm makes for each line
# (`slurm_heal.frozen.maker`; issue 35): made on the scan's first candidate line, so a
# healthy run never pays for them.
_LINE: list[Callable[..., Line]] = []
_EVENT: list[Callable[..., Event]] = []


def _makers() -> None:
    if not _EVENT:
        _LINE.append(maker(Line))
        _EVENT.append(maker(Event))


def norm_pci(text: str) -> str:
    """``00000000:3B:00.0`` / ``0000:3b:00`` -> ``0000:3b:00`` (domain:bus:device)."""
    text = text.lower().split(".", 1)[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}"


def split_line(raw: str, now: datetime | None = None, kernel: bool = False) -> Line | None:
    """Split one log line into time and message; None for kmsg continuation lines.

    ``now`` (default: the clock) only fills in the year a classic syslog stamp lacks.
    ``kernel``: the source has only the kernel's records (``journalctl -k``: journald
    shows a record root wrote to /dev/kmsg under the tag it gave itself), so a syslog
    tag or facility says nothing; elsewhere another program's line is ``foreign``.
    """
    if raw[:1] == " " and "=" in raw:
        return None  # kmsg dictionary line (" SUBSYSTEM=pci")
    line = _split(raw, now, kernel)
    if line.usec is not None and not 0 <= line.usec <= MAX_USEC:
        raise ValueError(f"timestamp {line.usec} is out of range")
    return line


def _num(text: str) -> int:
    """A number of a log line; ValueError when it is too long to be one."""
    if len(text) > MAX_DIGITS:
        raise ValueError(f"a {len(text)}-digit number")
    return int(text)


def _split(raw: str, now: datetime | None, kernel: bool = False,
           how: list[Any] | None = None) -> Line:
    """`split_line`'s work. ``how``: where to put how the line was read (`_reader`), when
    a line of the same shape would be read the same way."""
    text = raw
    off = 0  # where ``text`` starts in ``raw``
    rfc5424 = False
    if raw[:1] == "<":
        how = None  # the facility's value decides (and "<4>1 " has a digit in its form)
        p = _PRIO.match(raw[:8])
        if p:  # remote syslog: "<4>" (RFC 3164) or "<4>1 " (RFC 5424) before the stamp
            text = raw[p.end():]
            off = p.end()
            rfc5424 = p.group().endswith("1 ")
            if not kernel and int(p.group()[1:p.group().index(">")]) >> 3 != 0:
                # Issue 34 item 1 (SPEC D1): a facility other than kern (0) is a program's
                # message; journald gives a program's facility 0 the user facility.
                return Line(raw=raw, message="", foreign="syslog facility "
                            + p.group()[1:p.group().index(">")])
    c = text[:1]
    j = text.find(": [", 0, 300)
    if j != -1 and text[j + 3:j + 7].isdigit():
        m = _TALOS.match(text)
        if m:  # talosctl dmesg: "<node>: kern: warning: [2026-04-22T21:26:20.599488292Z]: "
            if m.group(1) != "kern" and not kernel:  # a program's message (issue 34)
                return Line(raw=raw, message="", foreign=f"facility {m.group(1)}")
            if how is not None:
                how.append((_R_ISO, off + m.start(2), off + m.end(2), off + m.start(3),
                            off + m.end(3), _zone_at(m.group(2), off + m.start(2))))
            return Line(raw=raw, message=m.group(3), at=_iso(m.group(2)))
    if c.isalpha() and ":" in text[:20]:
        head = text[:24]
        cut = _DECODED.get(head)
        if cut is None:  # a storm's lines share their head: each is matched once
            if len(_DECODED) >= 4096:
                _DECODED.clear()
            d = _DECODE.match(head)
            cut = _DECODED[head] = d.end() if d else 0
        if cut:  # dmesg --decode: the rest is one of the dmesg forms
            text = text[cut:]
            off += cut
            c = text[:1]
    if c.isdigit():
        m = _KMSG.match(text) if text is raw else None
        if m:
            if how is not None:
                how.append((_R_KMSG, m.start(2), m.end(2), m.start(3), m.end(3), m.start(4),
                            m.end(4)))
            return Line(raw=raw, message=m.group(4).replace("\\x0a", " "),
                        usec=_num(m.group(3)), seq=_num(m.group(2)))
        m = _ISO.match(text) if text.find(" kernel", 19, 160) != -1 else None
        if m:
            if how is not None:
                how.append((_R_ISO, off + m.start(1), off + m.end(1), off + m.start(2),
                            off + m.end(2), _zone_at(m.group(1), off + m.start(1))))
            return Line(raw=raw, message=m.group(2), at=_iso(m.group(1)))
        m = _DMESG_ISO.match(text)
        if m:
            at = _iso(m.group(1))
            if at is not None:
                rest = m.group(2)
                cri = _CRI.match(rest) if rest[:3] == "std" else None
                if cri:
                    # A container's log (CRI: "<stamp> stdout F <line>") of a kernel log
                    # line: the line's own time is truer than when the container wrote it.
                    inner = _split(rest[cri.end():], now, kernel)
                    return Line(raw=raw, message=inner.message, at=inner.at or at,
                                usec=inner.usec, seq=inner.seq, foreign=inner.foreign)
                if not kernel and "," not in m.group(1):  # dmesg's ISO stamp has a comma
                    tag = (_TAG_5424 if rfc5424 else _TAG_3164).match(rest)
                    if tag and tag.group(1) != "kernel":
                        return Line(raw=raw, message="", at=at,
                                    foreign=f"syslog tag {tag.group(1)!r}")
                if how is not None:
                    how.append((_R_DMESG_ISO, off + m.start(1), off + m.end(1),
                                off + m.start(2), off + m.end(2),
                                _zone_at(m.group(1), off + m.start(1))))
                return Line(raw, rest, at)
            how = None  # read as a whole line only because this stamp is not a time
    elif c == "[":
        m = _DMESG_T.match(text)
        if m:
            if how is not None:
                how.append((_R_CTIME, off + m.start(1), off + m.end(1), off + m.start(2),
                            off + m.end(2)))
            return Line(raw=raw, message=m.group(2), at=_ctime(m.group(1)))
        m = _DMESG.match(text)
        if m:
            if how is not None:
                how.append((_R_MONO, off + m.start(3), off + m.end(3), off + m.start(1),
                            off + m.end(1), off + m.start(2), off + m.end(2)))
            usec = _num(m.group(1)) * 1_000_000 + int(m.group(2).ljust(6, "0")[:6])
            return Line(raw=raw, message=m.group(3), usec=usec)
    elif c.isalpha():
        m = _SYSLOG.match(text)
        if m:
            if how is not None:
                how.append((_R_SYSLOG, off + m.start(4), off + m.end(4), off + m.start(1),
                            off + m.end(1)) + ((off + m.start(2), off + m.end(2),
                                               off + m.start(3), off + m.end(3))
                                               if m.group(2) is not None else ()))
            mono = (_num(m.group(2)) * 1_000_000 + int(m.group(3).ljust(6, "0")[:6])
                    if m.group(2) is not None else None)
            return Line(raw=raw, message=m.group(4), at=_syslog_time(m.group(1), now),
                        usec=mono)
        stamp = _SYSLOG_STAMP.match(text) if not kernel else None
        tag = _TAG_3164.match(text) if stamp else None
        if stamp and tag:  # a classic syslog line of another program (issue 34, SPEC D1)
            return Line(raw=raw, message="", at=_syslog_time(stamp.group(1), now),
                        foreign=f"syslog tag {tag.group(1)!r}")
        if text.startswith("kernel: "):
            # A journal's line printed without its stamp ("kernel: NVRM: Xid ..."): the
            # message is after the tag, so its "Linux version" line marks the boot
            # (issue 35 item 3: that file's lines of this boot were never raised).
            if how is not None:
                how.append((_R_TEXT, off + 8, len(raw)))
            return Line(raw=raw, message=text[8:])
    if how is not None:
        how.append((_R_TEXT, 0, len(raw)))
    return Line(raw=raw, message=raw)


# How `_split` read a line (``how``), for the next line of the same shape: the kind of
# line, then the offsets in the line of its message and its stamp's parts. "The same
# shape": the same text but for the ASCII digits (`_SHAPE`; the digits' own values are
# read anew: the stamp, the numbers). Each test `_split` makes of a line is a pattern or a
# string test that does not tell one ASCII digit from another (a \d class, [0-9],
# isdigit, lengths of digit runs), except where it takes ``how`` away: the facility of a
# "<N>" prefix, and a stamp that is not a time. A line another program wrote, and a
# container's line, are never read from a shape (each is read whole).
_R_TEXT, _R_KMSG, _R_ISO, _R_DMESG_ISO, _R_CTIME, _R_MONO, _R_SYSLOG = range(7)
_SHAPE = bytes.maketrans(b"0123456789", b"0000000000")


def _reader(how: tuple[Any, ...]) -> Any:
    """A function ``(raw, now) -> Line`` that reads a line as ``how`` says: what
    `split_line` gives for a line of the shape ``how`` was taken from (see `_SHAPE`). Its
    offsets are bound in a closure: a storm's line costs a few slices and no dispatch.
    A number's length is the shape's, so `_num`'s length test passed already (int)."""
    _makers()
    line = _LINE[0]
    kind = how[0]
    if kind == _R_DMESG_ISO or kind == _R_ISO:
        _, s, e, ms, me, z = how
        whole = kind == _R_DMESG_ISO  # a stamp that is not a time: the whole line
        if z == -1:
            def read_iso(raw: str, now: datetime | None) -> Line:
                at = _iso(raw[s:e])
                if at is None and whole:
                    return line(raw, raw, None, None, None, "")
                return line(raw, raw[ms:me], at, None, None, "")
            return read_iso
        s20, s26 = s + 20, s + 26
        # The last stamp's second and zone, and its reading: the time without a fraction
        # and its two parts around one ("" for each: not a time). A storm's lines share
        # their second: the next line's is compared in place, without a copy.
        last = ["\0", "\0", "", "", ""]

        def read_iso_by_hand(raw: str, now: datetime | None) -> Line:
            # `_iso` of a stamp of the form it reads by hand, that form known
            second, zone, value, head, tail = last
            if not (raw.startswith(second, s) and raw.startswith(zone, z)):
                second, zone = raw[s:s + 19], raw[z:e]
                value = _iso(second + zone) or ""
                head, tail = value[:19] + ".", value[19:]
                last[:] = second, zone, value, head, tail
            if not value:
                if whole:
                    return line(raw, raw, None, None, None, "")
                return line(raw, raw[ms:me], None, None, None, "")
            micro = raw[s20:s26]
            if micro == "000000":
                return line(raw, raw[ms:me], value, None, None, "")
            return line(raw, raw[ms:me], head + micro + tail, None, None, "")
        return read_iso_by_hand
    if kind == _R_KMSG:
        _, qs, qe, us, ue, ms, me = how

        def read_kmsg(raw: str, now: datetime | None) -> Line:
            usec = int(raw[us:ue])
            if not 0 <= usec <= MAX_USEC:
                raise ValueError(f"timestamp {usec} is out of range")
            return line(raw, raw[ms:me].replace("\\x0a", " "), None, usec, int(raw[qs:qe]), "")
        return read_kmsg
    if kind == _R_TEXT:
        _, ms, me = how

        def read_text(raw: str, now: datetime | None) -> Line:
            return line(raw, raw[ms:me], None, None, None, "")
        return read_text
    if kind == _R_CTIME:
        _, s, e, ms, me = how

        def read_ctime(raw: str, now: datetime | None) -> Line:
            return line(raw, raw[ms:me], _ctime(raw[s:e]), None, None, "")
        return read_ctime
    if kind == _R_MONO:
        _, ms, me, ss, se, fs, fe = how

        def read_mono(raw: str, now: datetime | None) -> Line:
            usec = int(raw[ss:se]) * 1_000_000 + int(raw[fs:fe].ljust(6, "0")[:6])
            if not 0 <= usec <= MAX_USEC:
                raise ValueError(f"timestamp {usec} is out of range")
            return line(raw, raw[ms:me], None, usec, None, "")
        return read_mono
    # _R_SYSLOG
    ms, me, ts, te = how[1:5]
    mono = how[5:]

    def read_syslog(raw: str, now: datetime | None) -> Line:
        usec = None
        if mono:  # the "[sec.usec]" after the tag
            usec = (int(raw[mono[0]:mono[1]]) * 1_000_000
                    + int(raw[mono[2]:mono[3]].ljust(6, "0")[:6]))
            if not 0 <= usec <= MAX_USEC:
                raise ValueError(f"timestamp {usec} is out of range")
        return line(raw, raw[ms:me], _syslog_time(raw[ts:te], now), usec, None, "")
    return read_syslog


def _zone_at(stamp: str, at: int) -> int:
    """Where the zone of ``stamp`` (at ``at`` in its line) starts when `_iso` reads it by
    hand (six fraction digits or more; the tests depend on no digit's value); else -1."""
    micro = stamp[20:26]
    zone = stamp[26:].lstrip("0123456789")
    if (stamp[19:20] not in (".", ",") or len(micro) < 6 or not micro.isdigit()
            or not micro.isascii() or zone[:1] not in ("", "Z", "+", "-")):
        return -1
    return at + len(stamp) - len(zone)


# A fault storm's stamps share their second and zone: each second and zone is read once
# (`_iso_read`) and the fraction put in by hand (issue 35: <= 10 us an event).
_ISO_SECONDS: dict[str, str | None] = {}


def _iso(text: str) -> str | None:
    """An ISO 8601 stamp of a `_STAMP` form as ``datetime.isoformat`` writes it (None:
    not a time): the fraction cut to microseconds, left out when they are 0."""
    micro = text[20:26]
    zone = text[26:].lstrip("0123456789")
    # Six ASCII digits or more (Python 3.10 reads fewer only with a zone), then the zone.
    if (text[19:20] not in (".", ",") or len(micro) < 6 or not micro.isdigit()
            or not micro.isascii() or zone[:1] not in ("", "Z", "+", "-")):
        return _iso_read(text)
    key = text[:19] + zone  # the stamp without its fraction
    value = _ISO_SECONDS.get(key, "")
    if value == "":
        if len(_ISO_SECONDS) >= 4096:
            _ISO_SECONDS.clear()
        value = _ISO_SECONDS[key] = _iso_read(key)
    if value is None or micro == "000000":
        return value
    return value[:19] + "." + micro + value[19:]


def _iso_read(text: str) -> str | None:
    try:  # Python 3.11+ reads every form below as it is
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        pass
    text = text.replace(",", ".", 1)  # dmesg --time-format=iso: "12:02:03,470068+00:00"
    m = _LONG_FRACTION._get().search(text)  # linear: one run of digits
    if m:  # talos and CRI print nanoseconds: datetime takes six digits at most
        text = text[:m.start() + 7] + text[m.end():]
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        # Python 3.10 rejects "+0000" (journalctl short-iso prints it that way) and
        # fractions of other than 3 or 6 digits.
        for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"):
            try:
                value = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
        else:
            return None
    return value.isoformat()


def _ctime(text: str) -> str | None:
    # dmesg -T prints local time without a zone; keep it naive rather than guess.
    try:
        return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").isoformat()
    except ValueError:
        return None


def _syslog_time(text: str, now: datetime | None) -> str | None:
    """``Feb 23 16:24:18`` (local time, no year) -> ``2026-02-23T16:24:18`` in the year
    that puts it no more than a day after ``now`` (zone-less, like ``dmesg -T``)."""
    ref = (now or datetime.now(timezone.utc)).astimezone().replace(tzinfo=None)
    for year in (ref.year, ref.year - 1):
        try:
            value = datetime.strptime(f"{year} {' '.join(text.split())}", "%Y %b %d %H:%M:%S")
        except ValueError:
            continue  # Feb 29 in a year without one: try the year before
        if value <= ref + timedelta(days=1):
            return value.isoformat()
    return None


def classify(line: Line) -> Event | tuple[str, str] | None:
    """The event a message means; a ``(pci, uuid)`` pair for a GPU-at line; else None.

    Each pattern runs where its needle is (anchored) or on a bounded window around it:
    linear in the message (module docstring)."""
    msg = line.message
    at = msg.find("NVRM: Xid (")
    if at != -1:
        m = _XID.match(msg, at)
        if m is None:
            return None
        bus = m.group(1)
        pci = norm_pci(bus) if _PCI_ONLY.match(bus) else None
        code, rest = _num(m.group(2)), m.group(3).strip()
        pid: int | None = None
        process: str | None = None
        pm = _PIDNAME.match(rest)
        if pm:
            pid_text = pm.group(1).strip().strip("'")
            pid = _num(pid_text) if pid_text.isascii() and pid_text.isdigit() else None
            name = (pm.group(2) or "").strip().strip("'")
            process = name if name and name != "<unknown>" else None
            rest = pm.group(3).strip()
        data: dict[str, Any] = {}
        if code == 154:
            i = rest.find("to 0x")
            rm = _RECOVERY.match(rest[:i + 96], i) if i != -1 else None
            if rm:
                data["recovery_action"] = rm.group(1)
        elif 144 <= code <= 150:
            data.update(nvlink5(rest))
        if pci is None:
            data["pci_field"] = bus[:32]  # what the line had instead of a bus id
        return Event(fault=f"gpu.xid.{code}", key=pci or "", line=line, pci=pci, xid=code,
                     pid=pid, process=process, detail=rest, data=data)
    at = msg.find("NVRM: GPU at PCI:")
    if at != -1:
        m = _GPU_AT.match(msg, at)
        return (norm_pci(m.group(1)), m.group(2)) if m else None
    at = msg.find("fallen off the bus")
    if at != -1:
        window, _ = _window(msg, at, after=0)
        m = _PCI_AT.search(window)
        bus = norm_pci(m.group(1)) if m else None
        return Event(fault="gpu.off_bus", key=bus or "", line=line, pci=bus, detail=msg)
    at = msg.find("SXid (")
    if at != -1:
        return _sxid(line, msg, at)
    at = msg.find("XFS (")
    if at != -1:
        m = _XFS.match(msg, at)
        if m and ("Shutting down filesystem" in msg or "shut down due to" in msg):
            return Event(fault="fs.xfs_shutdown", key=m.group(1), line=line, detail=msg,
                         data={"device": m.group(1)})
        return None
    at = msg.find("blocked for more than")
    if at != -1:
        start = msg.rfind("INFO: task ", 0, at)
        m = _HUNG.match(msg[:at + 48], start) if start != -1 else None
        if m:
            return Event(fault="kernel.hung_task", key="", line=line, pid=_num(m.group(2)),
                         process=m.group(1), detail=msg,
                         data={"blocked_seconds": _num(m.group(3))})
        return None
    at = msg.find("soft lockup - CPU#")
    if at != -1:
        m = _SOFT.match(msg[:at + _AFTER], at)
        if m:
            return Event(fault="kernel.soft_lockup", key="", line=line,
                         pid=_num(m.group(4)) if m.group(4) else None, process=m.group(3),
                         detail=msg, data={"cpu": _num(m.group(1))})
        return None
    at = msg.find("rcu")
    if at != -1 and _rcu_stall(msg, at):
        return Event(fault="kernel.rcu_stall", key="", line=line, detail=msg)
    if ("ncorrectable hardware error" in msg or "GPU reset" in msg
            or "oison " in msg):
        return _amdgpu(line, msg)
    return None


def _rcu_stall(msg: str, at: int) -> bool:
    """"rcu" followed, anywhere later, by "detected [expedited ]stall" (two finds)."""
    for needle in ("detected stall", "detected expedited stall"):
        if msg.find(needle, at) != -1:
            WORK[0] += len(msg) - at
            return True
    return False


def _sxid(line: Line, msg: str, at: int) -> Event | None:
    """An NVSwitch SXid line (SPEC D10). The line with the driver's verdict (``Fatal`` /
    ``Non-fatal``) is the event; the same SXid's ``Severity ...`` and ``Data {...}``
    lines are not. Keyed by switch and code: a fatal SXid on 12 links is one alert."""
    m = _SXID.match(msg[:at + _AFTER], at)
    if m is None:
        return None
    pci, code = norm_pci(m.group(1)), _num(m.group(2))
    fatal = m.group(3).lower() == "fatal"
    sw = _SWITCH.search(msg[max(0, at - 24):at])
    data: dict[str, Any] = {"sxid": code, "fatal": fatal, "nvswitch_pci": pci}
    if sw:
        data["nvswitch"] = sw.group(1)
    if m.group(4) is not None:
        data["link"] = int(m.group(4))
    fault = "nvswitch.sxid.fatal" if fatal else "nvswitch.sxid.nonfatal"
    return Event(fault=fault, key=f"{pci}:{code}", line=line, detail=msg[at:at + 400],
                 data=data)


def _amdgpu(line: Line, msg: str) -> Event | None:
    """amdgpu's RAS and reset messages (SPEC D9), mapped as AMD documents them (the
    kernel's "AMDGPU RAS Reboot Behavior for Unrecoverable Errors"; ROCm issue 3766: a
    reset after an uncorrectable error may not complete, "a system reboot is needed"):

    * uncorrectable errors in the memory (umc) block: ``gpu.ecc.dbe``, critical, the
      double-bit ECC fault NVIDIA's GPUs report too (Xid 48); in another block
      ``gpu.health`` (recorded);
    * the fatal ``uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT)`` (a sync flood:
      the driver resets the GPU at once): ``gpu.ras.fatal``, critical;
    * RAS poison consumption (a job read corrupt memory; KFD falls back to a GPU reset):
      ``gpu.ras.poison``, critical;
    * a GPU reset that failed (``GPU reset(N) failed``, ``GPU reset failed``, ``GPU reset
      end with ret = -N``): ``gpu.reset.failed``, critical, the GPU is unusable until the
      node reboots (whatever came before it: a ring timeout, a RAS event);
    * a reset that begins: ``gpu.reset`` (recorded: jobs on it were killed).
    """
    dev = None
    at = msg.find("amdgpu ")
    for _ in range(3):  # the device prefix is the first "amdgpu " that names a bus
        if at == -1:
            break
        dev = _AMD_DEV.match(msg[:at + 40], at)
        if dev:
            break
        at = msg.find("amdgpu ", at + 1)
    pci = norm_pci(dev.group(1)) if dev else None
    data: dict[str, Any] = {"vendor": "amd"}
    at = msg.find("GPU reset")
    if at != -1:
        m = _AMD_RESET.match(msg[:at + 64], at)
        if m is None:
            return None  # "VRAM is lost due to GPU reset!": the reset's own report follows
        if m.group(1) == " begin!":
            return Event(fault="gpu.reset", key=pci or "", line=line, pci=pci, detail=msg,
                         data=data)
        ret = m.group(3)
        if ret is not None and _num(ret) == 0:
            return None  # "GPU reset end with ret = 0": it worked
        if m.group(2) is None and ret is None:
            return None  # "GPU reset succeeded", "GPU reset(2) succeeded!"
        if ret is not None:
            data["ret"] = -_num(ret)
        return Event(fault="gpu.reset.failed", key=pci or "", line=line, pci=pci,
                     detail=msg, data=data)
    if "oison consum" in msg or "oison is consum" in msg:
        return Event(fault="gpu.ras.poison", key=pci or "", line=line, pci=pci,
                     detail=msg, data=data)
    at = msg.find("ncorrectable hardware error")
    window, start = _window(msg, at, 32, 128)
    m = _AMD_RAS.search(window)
    if m is None:
        if "(ERREVENT_" in msg[at + 27:at + 40]:
            # "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!" (6.1x:
            # a space before the parenthesis): fatal
            return Event(fault="gpu.ras.fatal", key=pci or "", line=line, pci=pci,
                         detail=msg, data=data)
        # Another uncorrectable report: recorded, never dropped.
        return Event(fault="gpu.health", key=f"{pci or ''}:ras", line=line, pci=pci,
                     detail=msg, data=data)
    if m.start() == 0 and start > 0 and msg[start - 1].isdigit():
        raise ValueError("an error count longer than the window: not a count")
    count, block = _num(m.group(1)), m.group(2).lower()
    if count == 0:
        return None
    fault = "gpu.ecc.dbe" if block == "umc" else "gpu.health"
    data.update(block=block, uncorrectable=count)
    return Event(fault=fault, key=f"{pci or ''}:{block}", line=line, pci=pci, detail=msg,
                 data=data)


def nvlink5(text: str) -> dict[str, Any]:
    """The parts of an Xid 144-150 (NVLink5) message: sub-code, whether the driver calls
    it fatal, the link, and the intrInfo/errorStatus registers NVIDIA's decode table
    keys on. Empty when the text is not in that form (the Xid's catalog entry stands)."""
    m = _NVL5.match(text.strip())
    if m is None:
        return {}
    out: dict[str, Any] = {"subcode": m.group(1), "fatal": m.group(2).lower() == "fatal",
                           "link": int(m.group(5)), "intr_info": m.group(6).lower()}
    if m.group(7):
        out["error_status"] = m.group(7).lower()
    return out


if TYPE_CHECKING:  # for the type checker only: typing stays off the check path
    class Buffer(Protocol):
        """What the scan needs of its data: bytes, or an mmap of a log file (no copy)."""

        def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
        def rfind(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
        def __getitem__(self, index: slice) -> bytes: ...
        def __len__(self) -> int: ...


def candidate_spans(data: Buffer, lo: int = 0, hi: int | None = None,
                    needles: tuple[bytes, ...] = NEEDLES, dense: bool = True,
                    keep: list[tuple[str, bytes] | None] | None = None,
                    ) -> list[tuple[int, int]]:
    """Start/end offsets of the lines in ``data[lo:hi]`` holding a needle, in order,
    without duplicates. ``lo`` must be the start of a line.

    Each needle is searched with ``bytes.find``: one pass over the data, and a few calls
    for each line found. In a storm (a needle on most lines: `_DENSE_AFTER` lines in a
    few KB) the calls for each line cost more than the passes: from there on the data is
    read in blocks of lines (`_dense_spans`). ``dense``: whether it may be. ``keep``: a
    list to put, for each line returned, what a block read of it (its text as `scan`
    decodes it, and its shape) or None."""
    found: list[list[tuple[int, int]]] = []
    find, rfind = data.find, data.rfind
    size = len(data) if hi is None else hi
    until = size  # where the blocks of lines start (size: nowhere)
    storm = b""  # the needle seen on many lines
    for needle in needles:
        i = find(needle, lo, until)
        if i == -1:
            continue
        spans: list[tuple[int, int]] = []  # in order, each line once (the next find starts
        add = spans.append                 # at its end)
        while i != -1:
            start = rfind(b"\n", lo, i) + 1 or lo  # 0: none since lo, a line's start
            end = find(b"\n", i, size)
            if end == -1:
                end = size
            add((start, end))
            if (len(spans) == _DENSE_AFTER and dense and until == size and end < size
                    and end - spans[0][0] < _DENSE_AFTER * _DENSE_BYTES):
                until = end + 1  # the rest of the data, for every needle: in blocks
                storm = needle
                break
            i = find(needle, end, until)
        found.append(spans)
    if until < size:
        # The lines before ``until`` (the needles searched before the storm was seen
        # found the lines after it too, which the blocks find), then the blocks'.
        head = sorted({span for spans in found for span in spans if span[0] < until})
        if keep is not None:
            keep.extend(repeat(None, len(head)))
        return head + _dense_spans(data, until, size, needles, keep, storm)
    out = (found[0] if len(found) == 1  # a storm's one needle (issue 35): no merge
           else sorted({span for spans in found for span in spans}))
    if keep is not None:
        keep.extend(repeat(None, len(out)))
    return out


# A storm in `candidate_spans`: a needle on this many lines within this many bytes a line.
_DENSE_AFTER = 32
_DENSE_BYTES = 512
_BLOCK = 1 << 16  # bytes of whole lines `_dense_spans` splits at a time
_PLUS_ONE = partial(_add, 1)


def _dense_spans(data: Buffer, a: int, size: int, needles: tuple[bytes, ...],
                 keep: list[tuple[str, bytes] | None] | None,
                 storm: bytes) -> list[tuple[int, int]]:
    """`candidate_spans` from ``a`` (a line's start) to ``size`` where needles are on
    many lines. A block of whole lines is split into lines in C, each line's shape taken
    (`_SHAPE`: no needle has a digit, so a line holds a needle exactly when its shape
    does) and each shape searched once; a storm repeats a few shapes. A block whose lines
    are mostly new shapes is searched needle by needle instead. ``keep``: where to put
    each line's text and shape (`candidate_spans`): the block is decoded at once, which
    gives each line's text as decoding the line alone does (a newline ends any sequence
    a decoder reads, and only a newline byte decodes to one). Where the needle of the
    storm (``storm``) is no longer dense, the storm is over: the rest is searched needle
    by needle (a storm's first lines before a healthy log cost one block's splitting)."""
    out: list[tuple[int, int]] = []
    holds: dict[bytes, bool] = {}  # a shape -> whether it holds a needle
    find = data.find
    while a < size:
        b = find(b"\n", min(a + _BLOCK, size - 1), size)
        if b == -1:
            b = size
        block = data[a:b]  # whole lines: [a, b) ends before a newline or at size
        if block.count(storm) * _DENSE_BYTES < len(block):
            out.extend(candidate_spans(data, a, size, needles, False, keep))
            break
        lines = block.split(b"\n")
        shapes = list(map(bytes.translate, lines, repeat(_SHAPE)))
        new = set(shapes).difference(holds)
        if len(new) * 4 > len(shapes) or len(holds) + len(new) > 4096:
            out.extend(candidate_spans(data, a, b, needles, False, keep))
            a = b + 1
            continue
        for shape in new:
            holds[shape] = any(n in shape for n in needles)
        flags = list(map(holds.__getitem__, shapes))
        if any(flags):
            lens = list(map(len, lines))
            starts = list(accumulate(map(_PLUS_ONE, lens), initial=a))
            ends = map(_add, starts, lens)  # starts has one more: the next block's
            out.extend(compress(zip(starts, ends, strict=False), flags))
            if keep is not None:
                texts = block.decode("utf-8", "replace").split("\n")
                keep.extend(zip(map(str.rstrip, compress(texts, flags), repeat("\r")),
                                compress(shapes, flags), strict=True))
        a = b + 1
    return out


_UNSEEN: Any = object()  # a message the scan has not read yet


def scan(data: Buffer, result: ScanResult | None = None, lo: int = 0,
         hi: int | None = None, now: datetime | None = None,
         spans: list[tuple[int, int]] | None = None, kernel: bool = False) -> ScanResult:
    """Parse the interesting lines of ``data[lo:hi]`` (whole lines) into events.
    ``now`` (default: the clock) dates classic syslog stamps, which have no year.
    ``spans``: the candidate lines when the caller found them already (one multi-pattern
    pass over a big file, `slurm_heal.checks.sources`), else `candidate_spans`."""
    out = result if result is not None else ScanResult()
    # A fault storm (issue 35: <= 10 us an event) repeats a few messages with new stamps:
    # each shape of line (`_SHAPE`) is read once, and its later lines as it says
    # (`_reader`); each message is classified once, and its event given each line anew.
    shapes: dict[bytes, Any] = {}  # a line's shape -> its reader (`_reader`)
    # message -> None (no event), a GPU-at line's (pci, uuid), or an event's fields but
    # its line, after the marker `_EV`
    memo: dict[str, tuple[Any, ...] | None] = {}
    read_by_block: list[tuple[str, bytes] | None] = []  # a storm's lines (candidate_spans)
    if spans is None:
        spans = candidate_spans(data, lo, hi, keep=read_by_block)
    if spans and not _EVENT:
        _makers()
    event = _EVENT[0] if _EVENT else Event
    events = out.events
    append, shape_of, message_of, digits = events.append, shapes.get, memo.get, _SHAPE
    lines = 0
    try:
        for (start, end), pre in zip(spans, read_by_block or repeat(None), strict=False):
            if pre is None:
                chunk = data[start:end]
                raw = chunk.decode("utf-8", "replace").rstrip("\r")
                shape = chunk.translate(digits)
            else:
                raw, shape = pre
            try:
                how = shape_of(shape)
                if how is not None:
                    line = how[0](raw, now)
                    seen = message_of(line.message)
                    if seen is not None and seen[0] is _EV:
                        # A storm's line: a line of a known shape, of a known message whose
                        # event is neither a GPU off the bus nor at a boot's first line.
                        _, fault, key, pci, xid, pid, process, detail, fields = seen
                        lines += 1
                        if how[1]:  # the kmsg and dmesg forms: a stamp since boot
                            _boot_seen(out, line)
                        append(event(fault, key, line, pci, xid, pid, process, detail,
                                     dict(fields) if fields else {}))
                        continue
                else:
                    if raw[:1] == " " and "=" in raw:
                        continue  # kmsg dictionary line (" SUBSYSTEM=pci"), as split_line
                    read: list[Any] = []
                    line = _split(raw, now, kernel, read)
                    if line.usec is not None and not 0 <= line.usec <= MAX_USEC:
                        raise ValueError(f"timestamp {line.usec} is out of range")
                    if read and len(shapes) < 4096:
                        shapes[shape] = (_reader(read[0]),
                                         read[0][0] in (_R_KMSG, _R_MONO, _R_SYSLOG))
                if line.foreign:
                    out.foreign += 1
                    if not out.foreign_sample:
                        out.foreign_sample = f"{line.foreign}: {raw[:160]!r}"[:240]
                    continue
                msg = line.message
                seen = memo.get(msg, _UNSEEN)
                if seen is _UNSEEN:
                    ev = classify(line)
                    if len(memo) < 4096:
                        memo[msg] = (((_EV if ev.fault != "gpu.off_bus"
                                       and not msg.startswith("Linux version ") else _EV_SLOW),
                                      ev.fault, ev.key, ev.pci, ev.xid, ev.pid, ev.process,
                                      ev.detail, ev.data) if isinstance(ev, Event) else ev)
                elif seen is None:
                    ev = None
                elif seen[0] is _EV or seen[0] is _EV_SLOW:  # the fields in order
                    _, fault, key, pci, xid, pid, process, detail, fields = seen
                    ev = event(fault, key, line, pci, xid, pid, process, detail, dict(fields))
                else:
                    ev = seen
            except (ValueError, OverflowError, IndexError) as exc:
                # One record that cannot be parsed never blinds the detector (module doc).
                out.skipped += 1
                if not out.skipped_sample:
                    out.skipped_sample = f"{raw[:120]!r}: {exc}"[:240]
                continue
            lines += 1
            if line.usec is not None or line.seq is not None or msg[:14] == "Linux version ":
                _boot_seen(out, line)
            if ev is None:
                continue
            if isinstance(ev, tuple):
                out.gpu_uuids[ev[0]] = ev[1]
                continue
            if ev.fault == "gpu.off_bus":
                if ev.pci is None:
                    ev = _named_before(data, lo, start, end, ev)
                if any(e.fault == "gpu.xid.79" and e.key == ev.key for e in events[-8:]):
                    continue  # the Xid 79 line already says it; one alert, not two
            events.append(ev)
    finally:
        out.lines += lines
    return out


# The markers of an event's fields in `scan`'s memo: an event a storm's line makes at
# once (_EV), or one whose line needs a look (_EV_SLOW: a GPU off the bus, a boot's line).
_EV: Any = object()
_EV_SLOW: Any = object()


def _boot_seen(out: ScanResult, line: Line) -> None:
    """Note a boot between the events so far and this line: the kernel's first line, or
    a monotonic stamp (more than a second) / kmsg sequence number lower than the last
    one (a file or replay that outlives boots; SPEC D1)."""
    back = (line.message.startswith("Linux version ")
            or (line.usec is not None and out.last_usec is not None
                and line.usec + 1_000_000 < out.last_usec)
            or (line.seq is not None and out.last_seq is not None
                and line.seq < out.last_seq))
    if back:
        out.boot_at = len(out.events)
        out.boots += 1
    if line.usec is not None:
        out.last_usec = line.usec
    if line.seq is not None:
        out.last_seq = line.seq


def _named_before(data: Buffer, lo: int, start: int, end: int, ev: Event) -> Event:
    """A "fallen off the bus" line that names no GPU: drivers 570+ print the message
    over three lines, "NVRM: The NVIDIA GPU <pci>" first (SPEC D2). Look back a bounded
    stretch (three lines, 1 KB) for it; the event then names that GPU and its evidence
    holds all the lines."""
    back = max(lo, start - 1024)
    j = data.rfind(_GPU_NAMED, back, start)
    if j == -1:
        return ev
    first = data.rfind(b"\n", back, j) + 1 if j > back else back
    if data[first:start].count(b"\n") > 3:
        return ev
    WORK[0] += end - first
    head = data[j + len(_GPU_NAMED):j + len(_GPU_NAMED) + 24].decode("ascii", "replace")
    m = _PCI_AT.match(head)
    if m is None:
        return ev
    bus = norm_pci(m.group(1))
    raw = data[first:end].decode("utf-8", "replace").replace("\r", "")
    line = replace(ev.line, raw=raw)
    if line.at is None and line.usec is None:
        # The time is on the first line (the others are the driver's continuation):
        # "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0" (SPEC D1).
        head_line = split_line(raw.split("\n", 1)[0])
        if head_line is not None:
            line = replace(line, at=head_line.at, usec=head_line.usec, seq=head_line.seq)
    return replace(ev, key=bus, pci=bus, line=line, detail=" ".join(raw.split())[:400])


# ----------------------------------------------------------------------------- evaluate

@dataclass(frozen=True, slots=True)
class GpuMap:
    """What is known about the GPUs: PCI bus -> index / UUID."""

    index: dict[str, int] = field(default_factory=dict)
    uuid: dict[str, str] = field(default_factory=dict)

    def describe(self, pci: str | None) -> str:
        if not pci:
            return "a GPU"
        idx = self.index.get(pci)
        return f"GPU {idx} (PCI {pci})" if idx is not None else f"the GPU at PCI {pci}"


def event_at(line: Line, boot_wall: datetime | None) -> str | None:
    """Wall time of a line: its own stamp, or boot time + microseconds since boot."""
    if line.at is not None:
        return line.at
    if line.usec is not None and boot_wall is not None:
        try:
            return (boot_wall + timedelta(microseconds=line.usec)).isoformat()
        except OverflowError:
            return None
    return None


def _summary(ev: Event, gpus: GpuMap, explanation: str, count: int) -> str:
    times = f" ({count} times)" if count > 1 else ""
    if ev.xid is not None:
        who = f", process {ev.process}" if ev.process else ""
        detail = ev.detail[:160]
        return f"{gpus.describe(ev.pci)} reported Xid {ev.xid}{who}: {detail}{times}"
    if ev.fault == "gpu.off_bus":
        return f"{gpus.describe(ev.pci)} has fallen off the bus{times}"
    if ev.fault.startswith("nvswitch.sxid."):
        who = ev.data.get("nvswitch") or "an NVSwitch"
        verdict = "fatal" if ev.data.get("fatal") else "non-fatal"
        link = f" on link {ev.data['link']}" if "link" in ev.data else ""
        words = ev.detail.split(", ", 2)[-1][:160]
        return (f"{who} (PCI {ev.data.get('nvswitch_pci')}) reported {verdict} SXid "
                f"{ev.data.get('sxid')}{link}: {words}{times}")
    if ev.data.get("vendor") == "amd" or ev.fault == "gpu.reset":
        return f"{gpus.describe(ev.pci)}: {ev.detail[:160]}{times}"
    if ev.fault == "fs.xfs_shutdown":
        return f"XFS on {ev.key} shut down: {ev.detail[:160]}{times}"
    if ev.fault == "kernel.hung_task":
        return f"kernel task {ev.process} (pid {ev.pid}) hung{times}"
    if ev.fault == "kernel.soft_lockup":
        return f"soft lockup on CPU {ev.data.get('cpu')} ({ev.process}){times}"
    return explanation.split(". ")[0] + times


def latch(latched: dict[str, dict[str, Any]], events: list[Event], gpus: GpuMap,
          now: datetime, boot_wall: datetime | None, severity_of: Any,
          explanation_of: Any, recovery_of: Any) -> dict[str, dict[str, Any]]:
    """Fold new events into the latched kernel faults (pure; returns a new dict).

    ``latched`` maps ``fault|key`` to a JSON-able record kept in the state file. The
    lookups are passed in (the catalog) so this stays testable without I/O.
    """
    out = {k: dict(v) for k, v in latched.items()}
    stamp = now.astimezone(timezone.utc).isoformat()
    # A fault storm (issue 35: <= 10 us an event) folds many events into one record,
    # which keeps of them only the count, the evidence of the first and the last two,
    # and the last one's severity and summary: the events are gathered by record first,
    # and only what is kept is made.
    grouped: dict[str, list[Event]] = {}
    for ev in events:
        k = f"{ev.fault}|{ev.key}"
        group = grouped.get(k)
        if group is None:
            grouped[k] = [ev]
        else:
            group.append(ev)
    # One catalog lookup per fault, not per event.
    severities: dict[str, Severity] = {}
    explanations: dict[str, str] = {}
    for k, group in grouped.items():
        last = group[-1]
        if last.fault not in severities:
            severities[last.fault] = severity_of(last.fault)
            explanations[last.fault] = explanation_of(last.fault)
        rec = out.get(k)
        # The evidence folded one event at a time keeps the first and the latest two
        # (where it started and where it is now): of all of them in order, the first
        # and the last two.
        kept: list[Any] = ([] if rec is None else list(rec.get("evidence", []))) + group
        if len(kept) > 3:
            kept = [kept[0], kept[-2], kept[-1]]
        evidence: list[Any] = []
        severity = severities[last.fault]
        for item in kept:
            if isinstance(item, Event):  # the last one is the group's last event
                item, severity = _evidence(item, gpus, boot_wall, recovery_of,
                                           severities[last.fault])
            evidence.append(item)
        if rec is None:
            count = len(group)
            out[k] = {"fault": last.fault, "severity": severity.value,
                      "summary": _summary(last, gpus, explanations[last.fault], count),
                      "first_seen": stamp, "last_seen": stamp, "count": count,
                      "evidence": evidence}
        else:
            count = rec.get("count", 0) + len(group)
            rec.update(severity=severity.value,
                       summary=_summary(last, gpus, explanations[last.fault], count),
                       last_seen=stamp, count=count, evidence=evidence)
    return out


def _evidence(ev: Event, gpus: GpuMap, boot_wall: datetime | None, recovery_of: Any,
              severity: Severity) -> tuple[dict[str, Any], Severity]:
    """An event's evidence in the state file, and its severity given its fault's."""
    data: dict[str, Any] = {"pci": ev.pci} if ev.pci else {}
    if ev.pci and ev.pci in gpus.index:
        data["gpu_index"] = gpus.index[ev.pci]
    if ev.pci and ev.pci in gpus.uuid:
        data["gpu_uuid"] = gpus.uuid[ev.pci]
    if ev.xid is not None:
        data["xid"] = ev.xid
    if ev.pid is not None:
        data["pid"] = ev.pid
    if ev.process:
        data["process"] = ev.process
    if ev.line.seq is not None:
        data["seq"] = ev.line.seq
    data.update(ev.data)
    if ev.data.get("fatal") is False:
        # Xid 144-150: NVIDIA's decode table makes the non-fatal sub-codes IGNORE or
        # "follow the Xid 154 seen with it": recorded, never a drain or a remediation
        # on their own (like an Xid 154 whose action is None).
        severity = Severity.INFO
    if ev.xid == 154:
        # SPEC D1: Xid 154 carries the driver's own recovery action. "None" means
        # the GPU needs nothing any more: record it, never cordon for it.
        action = recovery_of(ev.data.get("recovery_action", ""))
        if action is not None:
            data["action"] = action
            if action == "none":
                severity = Severity.INFO
    # A line can be 32 KB of garbage around its needle: the state file keeps enough
    # of it to read (Extra keeps less, extra.MAX_TEXT).
    return ({"source": "kernel_log", "text": ev.line.raw[:MAX_EVIDENCE_TEXT],
             "at": event_at(ev.line, boot_wall), "data": data}, severity)


def expire(latched: dict[str, dict[str, Any]], now: datetime,
           hold_seconds: float) -> dict[str, dict[str, Any]]:
    """Drop latched faults that no longer count (pure).

    Critical kernel faults stay until the node reboots (the caller drops everything on
    a new boot id): a GPU off the bus does not come back by itself. Others stay
    ``hold_seconds`` after they were last seen.
    """
    out: dict[str, dict[str, Any]] = {}
    for k, rec in latched.items():
        if rec.get("severity") == Severity.CRITICAL.value:
            out[k] = rec
            continue
        try:
            last = datetime.fromisoformat(str(rec.get("last_seen")))
        except ValueError:
            continue
        if (now - last).total_seconds() < hold_seconds:
            out[k] = rec
    return out


def findings(latched: dict[str, dict[str, Any]], node: str,
             detector: str = "kernel_log") -> list[Finding]:
    """The latched kernel faults as findings."""
    out: list[Finding] = []
    for rec in latched.values():
        out.append(Finding(
            fault=str(rec["fault"]), severity=Severity(rec["severity"]),
            summary=str(rec["summary"]), detector=detector, node=node,
            evidence=tuple(Evidence.from_json(e) for e in rec.get("evidence", []))))
    return out
