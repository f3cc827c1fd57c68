"""SPEC D1 (issue 35 item 3), a property over every kernel-log format the corpus holds: a
line from before the current boot never raises after it, on the first read of a file
(a new install, a rebuilt node whose state was wiped) as on the first read after a
reboot, whether the line's own time can be read or not; and a line of this boot is
raised where its format dates it (or a boot marker precedes it)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_heal.checks import kernlog, paths, sources

OLD_BUS, NEW_BUS = "0000:0a:00", "0000:0b:00"


def _local(t: datetime) -> datetime:
    return t.astimezone()


def _dmesg(u: int) -> str:
    return f"[{u // 1_000_000:5d}.{u % 1_000_000:06d}]"


def _off_bus(m: str, u: int) -> str:
    """An Xid line's GPU in the driver's three-line "fallen off the bus" message, as the
    real capture prints it (nvsentinel-155-off-bus-dmesg.log: the GPU on the first line,
    the words on the third); any other message in plain dmesg."""
    bus = re.search(r"\(PCI:([0-9a-f:]+)\)", m)
    if bus is None:
        return f"{_dmesg(u)} {m}"
    return (f"{_dmesg(u)} NVRM: The NVIDIA GPU {bus.group(1)}.0\n"
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
            "               NVRM: fallen off the bus and is not responding to commands.")


# Each format renders (message, wall time, microseconds since its boot, kmsg sequence
# number) as the tool prints it (the real captures in tests/data/real/kernlog and
# tests/data/kmsg); ``dated``: whether the line carries its wall time. Issue 35 item 3:
# rsyslog's ISO stamp before the ring buffer's [sec.usec] (kmsg/kern-log-across-boot.log),
# syslog without [sec.usec] (loongson-89-syslog-...), a journal's bare "kernel:" line
# (nvidia-ogkm-1150-journal-...) and the three-line "fallen off the bus" message
# (nvsentinel-155-off-bus-dmesg.log), with the first eleven.
FORMATS: dict[str, tuple[bool, Callable[[str, datetime, int, int], str]]] = {
    "kmsg": (False, lambda m, t, u, s: f"4,{s},{u},-;{m}"),
    "dmesg": (False, lambda m, t, u, s: f"[{u // 1_000_000:5d}.{u % 1_000_000:06d}] {m}"),
    "bare": (False, lambda m, t, u, s: m),
    "dmesg-T": (True, lambda m, t, u, s: f"[{_local(t):%a %b %e %H:%M:%S %Y}] {m}"),
    "dmesg-iso": (True, lambda m, t, u, s:
                  f"{t.isoformat(timespec='microseconds').replace('.', ',')} {m}"),
    "dmesg-decode-iso": (True, lambda m, t, u, s: "kern  :warn  : "
                         f"{t.isoformat(timespec='microseconds').replace('.', ',')} {m}"),
    "journal-short-iso": (True, lambda m, t, u, s: f"{t:%Y-%m-%dT%H:%M:%S%z} gpu07 kernel: {m}"),
    "syslog": (True, lambda m, t, u, s:
               f"{_local(t):%b %e %H:%M:%S} gpu07 kernel: [{u // 1_000_000}.{u % 1_000_000:06d}] {m}"),
    "talos": (True, lambda m, t, u, s:
              f"10.5.0.3: kern: warning: [{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}123Z]: {m}"),
    "rfc5424": (True, lambda m, t, u, s:
                f"<4>1 {t.isoformat(timespec='milliseconds')} gpu07 kernel - - - {m}"),
    "cri": (True, lambda m, t, u, s:
            f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}000Z stdout F "
            f"[{u // 1_000_000}.{u % 1_000_000:06d}] {m}"),
    "rsyslog-iso-dmesg": (True, lambda m, t, u, s:
                          f"{t.isoformat(timespec='microseconds')} gpu07 kernel: {_dmesg(u)} {m}"),
    "syslog-no-usec": (True, lambda m, t, u, s: f"{_local(t):%b %e %H:%M:%S} gpu07 kernel: {m}"),
    "journal-bare": (False, lambda m, t, u, s: f"kernel: {m}"),
    "dmesg-off-bus": (False, lambda m, t, u, s: _off_bus(m, u)),
}

XIDS = [f"NVRM: Xid (PCI:{{bus}}): {code}, pid=7, name=python3, {words}" for code, words in (
    (79, "GPU has fallen off the bus."), (74, "NVLink: fatal error detected on link 3"),
    (48, "An uncorrectable double bit error (DBE) has been detected on GPU"),
    (154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"))]
MARKER = "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP"


def _lines(fmt: str, boot: datetime, events: list[tuple[int, str]], seq0: int,
           marker: bool) -> list[str]:
    render = FORMATS[fmt][1]
    out = [render(MARKER, boot, 0, seq0)] if marker else []
    for i, (usec, msg) in enumerate(sorted(events)):  # a log is in time order
        out.append(render(msg, boot + timedelta(microseconds=usec), usec, seq0 + 1 + i))
    return out


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(sorted(FORMATS)),
       gap_h=st.integers(min_value=1, max_value=24 * 200),
       old=st.lists(st.tuples(st.integers(1, 3600 * 1_000_000), st.sampled_from(XIDS)),
                    min_size=1, max_size=4),
       old_marker=st.booleans(),
       new_marker=st.booleans(),
       new=st.lists(st.tuples(st.integers(1, 600 * 1_000_000), st.sampled_from(XIDS)),
                    max_size=3),
       uptime_s=st.integers(min_value=601, max_value=86400),
       after_reboot=st.booleans())
def test_a_line_from_before_this_boot_never_raises_after_it(
        tmp_path_factory: object, fmt: str, gap_h: int, old: list[tuple[int, str]],
        old_marker: bool, new_marker: bool, new: list[tuple[int, str]], uptime_s: int,
        after_reboot: bool) -> None:
    tmp = Path(tmp_path_factory.mktemp("boot"))  # type: ignore[attr-defined]
    os.environ[paths.ROOT_ENV] = str(tmp)
    try:
        (tmp / "proc").mkdir()
        (tmp / "proc" / "uptime").write_text(f"{uptime_s}.00 1.00\n")
        now = datetime.now(timezone.utc).replace(microsecond=0)
        boot = now - timedelta(seconds=uptime_s)
        old_boot = boot - timedelta(hours=gap_h) - timedelta(seconds=3601)
        old_lines = _lines(fmt, old_boot, [(u, m.format(bus=OLD_BUS)) for u, m in old],
                           100, old_marker)
        new_lines = _lines(fmt, boot, [(u, m.format(bus=NEW_BUS)) for u, m in new],
                           0, new_marker or bool(new) and not FORMATS[fmt][0])
        log = tmp / "kern.log"
        cursor = None
        if after_reboot:
            # our last run (in the earlier boot) read the file up to here; the rest was
            # written after it: the old boot's last lines, then this boot's
            log.write_text("noise before our last run\n")
            res = kernlog.ScanResult()
            cursor = dict(sources.read_file(str(log), None, 1 << 30, res, now=old_boot),
                          new_boot=True)
            with log.open("a") as fh:
                fh.write("\n".join(old_lines + new_lines) + "\n")
        else:
            log.write_text("\n".join(old_lines + new_lines) + "\n")
        if not new_lines:  # nothing written during this boot: the file is older than it
            stamp = (boot - timedelta(seconds=60)).timestamp()
            os.utime(log, (stamp, stamp))
        res = kernlog.ScanResult()
        sources.read_file(str(log), cursor, 1 << 30, res, now=now)
        raised = [e.pci for e in res.events]
        assert OLD_BUS not in raised, (fmt, old_lines, new_lines)
        # this boot's faults are raised where the format dates them or a marker precedes
        assert raised.count(NEW_BUS) == len(new), (fmt, new_lines, raised)
    finally:
        os.environ.pop(paths.ROOT_ENV, None)
