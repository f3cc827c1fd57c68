"""Kernel log sources and their cursors (SPEC D1: incremental, survives rotation and
reboots, first read bounded)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.checks import kernlog, paths, sources, state

DATA = Path(__file__).resolve().parent.parent / "data" / "kmsg"

XID = b"4,%d,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
NOISE = b"6,1,1,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"


def read(path: Path, cursor: sources.Cursor | None, first: int = 1 << 30
         ) -> tuple[list[int | None], sources.Cursor]:
    res = kernlog.ScanResult()
    new = sources.read_file(str(path), cursor, first, res)
    return [e.line.seq for e in res.events], new


def _no_uptime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay root without /proc/uptime: no line is dated against a boot, so a test of
    the cursor alone does not depend on this machine's uptime (SPEC D1, issue 35)."""
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path / "root"))


def test_second_run_reads_only_what_is_new(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _no_uptime(tmp_path, monkeypatch)
    log = tmp_path / "kern.log"
    log.write_bytes(NOISE + XID % 2)
    seqs, cur = read(log, None)
    assert seqs == [2]
    assert read(log, cur)[0] == []
    with log.open("ab") as fh:
        fh.write(XID % 3)
    assert read(log, cur)[0] == [3]


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    line = XID % 5
    log.write_bytes(NOISE + line[:20])
    seqs, cur = read(log, None)
    assert seqs == []
    with log.open("ab") as fh:
        fh.write(line[20:])
    assert read(log, cur)[0] == [5]


def test_rotation_reads_the_rest_of_the_old_file_then_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(NOISE)
    _, cur = read(log, None)
    with log.open("ab") as fh:
        fh.write(XID % 7)  # written after our last run, before the rotation
    os.rename(log, tmp_path / "kern.log.1")
    log.write_bytes(XID % 8)
    seqs, cur2 = read(log, cur)
    assert seqs == [7, 8]
    assert read(log, cur2)[0] == []


def test_a_truncated_file_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(NOISE * 10)
    _, cur = read(log, None)
    with log.open("wb") as fh:  # copytruncate, then one new line
        fh.write(XID % 9)
    assert read(log, cur)[0] == [9]


def test_the_first_read_is_bounded_to_the_tail(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _no_uptime(tmp_path, monkeypatch)
    log = tmp_path / "kern.log"
    log.write_bytes(XID % 1 + NOISE * 1000 + XID % 2)
    seqs, _ = read(log, None, first=len(NOISE) * 10)
    assert seqs == [2]


def test_a_kmsg_replay_file_is_read_incrementally(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(NOISE + XID % 2)
    res = kernlog.ScanResult()
    cur = sources.read_kmsg(str(kmsg), None, res)
    assert [e.line.seq for e in res.events] == [2]
    res2 = kernlog.ScanResult()
    sources.read_kmsg(str(kmsg), cur, res2)
    assert res2.events == []


def test_gpu_index_comes_from_the_drivers_proc_files(tmp_path: Path) -> None:
    base = tmp_path / "proc/driver/nvidia/gpus"
    for bus, minor in (("0000:3b:00.0", "5"), ("0000:1a:00.0", None)):
        (base / bus).mkdir(parents=True)
        if minor:
            (base / bus / "information").write_text(f"Model: H100\nDevice Minor: {minor}\n")
    got = sources.gpu_indexes(lambda p: str(tmp_path) + p)
    assert got == {"0000:3b:00": 5, "0000:1a:00": 0}


def test_a_kmsg_replay_reads_exactly_the_records_added_since_the_last_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1 in replay mode: ``dev/kmsg`` under the replay root is a regular file in
    kmsg record format; the second read returns the records appended after the first,
    no more and no less."""
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    (tmp_path / "dev").mkdir()
    kmsg = tmp_path / "dev" / "kmsg"
    kmsg.write_bytes(XID % 1 + NOISE + XID % 3)
    res = kernlog.ScanResult()
    cur = sources.read_kmsg(paths.host_path("/dev/kmsg"), None, res)
    assert [e.line.seq for e in res.events] == [1, 3]
    with kmsg.open("ab") as fh:
        fh.write(XID % 4 + XID % 5 + XID % 6)
    again = kernlog.ScanResult()
    cur2 = sources.read_kmsg(paths.host_path("/dev/kmsg"), cur, again)
    assert [e.line.seq for e in again.events] == [4, 5, 6]
    third = kernlog.ScanResult()
    sources.read_kmsg(paths.host_path("/dev/kmsg"), cur2, third)
    assert third.events == []


BOOTED = datetime(2026, 2, 5, 11, 0, tzinfo=timezone.utc)  # kern-log-across-boot.log
NOW = BOOTED + timedelta(hours=1)


def _replay_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A replay root whose node booted at BOOTED, holding the golden kern.log."""
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "uptime").write_text(
        f"{(NOW - BOOTED).total_seconds():.2f} 100.00\n")
    (tmp_path / "var" / "log").mkdir(parents=True)
    log = tmp_path / "var" / "log" / "kern.log"
    log.write_bytes((DATA / "kern-log-across-boot.log").read_bytes())
    return log


def test_the_first_read_of_a_file_skips_faults_from_before_this_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1: a new install (no cursor) must not raise a three-week-old Xid 79 that
    the reboot since fixed; this boot's Xid 119 is raised."""
    _replay_root(tmp_path, monkeypatch)
    res = kernlog.ScanResult()
    sources.read_file(paths.host_path("/var/log/kern.log"), None, 1 << 30, res, now=NOW)
    assert [e.fault for e in res.events] == ["gpu.xid.119"]


def test_the_first_read_raises_no_line_that_nothing_dates_to_this_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1, issue 35 item 3 (this reverses the earlier "a line whose time is unknown
    is kept"): kmsg records in a file carry microseconds since *some* boot only; with
    nothing showing this boot before them, the first read does not raise them. After
    the kernel's "Linux version" record (this boot began there) the Xid is this boot's."""
    log = _replay_root(tmp_path, monkeypatch)
    log.write_bytes(NOISE + XID % 2)  # kmsg records: microseconds since some boot only
    seqs, _ = read(log, None)
    assert seqs == []
    log.write_bytes(b"5,0,0,-;Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45\n"
                    + NOISE + XID % 2)
    seqs, _ = read(log, None)
    assert seqs == [2]


def test_the_first_read_after_a_reboot_skips_the_unread_lines_from_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1 "survives reboots": the file cursor is kept across a reboot, but the
    lines written after the last run and before the reboot are faults it fixed."""
    log = _replay_root(tmp_path, monkeypatch)
    first_line = len(log.read_bytes().split(b"\n", 1)[0]) + 1
    state_dir = str(tmp_path / "state")
    before = state.empty("boot-A")
    before["cursor"] = {"kind": "file", "path": str(log), "inode": log.stat().st_ino,
                        "offset": first_line}
    state.save(state_dir, before)
    st, existed = state.load(state_dir, "boot-B")
    assert existed and st["cursor"]["new_boot"] is True
    res = kernlog.ScanResult()
    cur = sources.read_file(str(log), st["cursor"], 1 << 30, res, now=NOW)
    assert [e.fault for e in res.events] == ["gpu.xid.119"]
    assert "new_boot" not in cur
    with log.open("ab") as fh:  # later in this boot, with the cursor carried on
        fh.write(b"2026-02-05T11:45:00+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                 b"pid=1, name=x, GPU has fallen off the bus.\n")
    again = kernlog.ScanResult()
    sources.read_file(str(log), cur, 1 << 30, again, now=NOW)
    assert [e.fault for e in again.events] == ["gpu.xid.79"]


def test_journal_source_uses_and_advances_journald_cursor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "journalctl"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/calls\n'
        "echo '2025-02-23T16:24:18+0000 gpu07 kernel: NVRM: Xid (PCI:0000:9b:00): 119, "
        "pid=1, name=x, Timeout'\n"
        "echo '-- cursor: s=abc;i=42'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    res = kernlog.ScanResult()
    cur = sources.read_journal(None, 5.0, 1000, res)
    assert cur == {"kind": "journal", "cursor": "s=abc;i=42"}
    assert [e.fault for e in res.events] == ["gpu.xid.119"]
    assert res.events[0].line.at == "2025-02-23T16:24:18+00:00"
    sources.read_journal(cur, 5.0, 1000, kernlog.ScanResult())
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "-b -n 1000" in calls[0]  # the first read is bounded to this boot
    assert "--after-cursor=s=abc;i=42" in calls[1]
