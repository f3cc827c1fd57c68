"""The kernel-log scan's one pass for all needles over a big file (issue 26: >= 500 MB/s):
a ``grep -F`` child finds the candidate lines of a file read of at least
`sources.GREP_MIN_BYTES`, and the scan then finds exactly what the per-needle
``bytes.find`` passes find (SPEC D1, D2, D4, D9, D10), on the real captures and on a
generated log with every awkward line; without grep (or with a grep that says something
else) the scan searches itself."""

from __future__ import annotations

import mmap
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.checks import kernlog, sources
from tests.realdata import REAL as SHARED_REAL

DATA = Path(__file__).resolve().parent.parent / "data"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
LOGS = sorted([*(DATA / "real" / "kernlog").glob("*.log"), *(DATA / "kmsg").glob("*"),
               *[p for p in (SHARED_REAL / "dmesg-xid-119.log", SHARED_REAL / "kmsg-1.log")
                 if p.is_file()]])


def _read(path: Path) -> kernlog.ScanResult:
    res = kernlog.ScanResult()
    sources.read_file(str(path), None, 1 << 62, res, now=NOW)
    return res


def _same(a: kernlog.ScanResult, b: kernlog.ScanResult) -> None:
    assert a.events == b.events
    assert (a.gpu_uuids, a.lines, a.skipped) == (b.gpu_uuids, b.lines, b.skipped)


@pytest.fixture(autouse=True)
def _no_replay(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # no /proc/uptime under the root: a first read skips nothing by its age
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path / "empty-root"))


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_every_real_capture_gives_the_same_events_through_grep(
        log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kern.log"
    raw = log.read_bytes()
    path.write_bytes(raw if raw.endswith(b"\n") else raw + b"\n")
    by_find = _read(path)
    monkeypatch.setattr(sources, "GREP_MIN_BYTES", 0)
    _same(_read(path), by_find)


def test_the_captures_compared_hold_events_to_compare(tmp_path: Path) -> None:
    found = sum(len(kernlog.scan(log.read_bytes() + b"\n", now=NOW).events) for log in LOGS)
    assert found >= 10, found


def _awkward_log(path: Path) -> None:
    """A file over the threshold with needle lines first, last, long, with CR, NULs,
    bytes that are not UTF-8, two needles on one line, and noise between."""
    noise = b"".join(b"6,%d,%d,-;IPv6: ADDRCONF(NETDEV_CHANGE): cali%x: link becomes ready\n"
                     % (i, i * 1000, i) for i in range(2000))
    xid = b"2,9,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, GPU has fallen off the bus.\n"
    parts = [xid, noise,
             b"[  12.5] NVRM: GPU at PCI:0000:18:00: GPU-aaaa-bbbb\r\n",
             noise,
             b"[  13.0] \x00\xff\xfe INFO: rcu_sched self-detected stall on CPU\n",
             b"x" * 70000 + b" watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [k:1]\n",
             noise * ((sources.GREP_MIN_BYTES // len(noise)) + 1),
             # two needles, one line: one candidate, the Xid (it is looked for first)
             b"[  14.0] XFS (sda1): Shutting down filesystem; NVRM: Xid (PCI:0000:5d:00): 48, "
             b"pid=2, name=q, DBE\n",
             b"[  15.0] amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!\n",
             xid]
    path.write_bytes(b"".join(parts))


def test_a_big_awkward_file_gives_the_same_lines_and_events_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    _awkward_log(path)
    size = path.stat().st_size
    assert size >= sources.GREP_MIN_BYTES
    fd = os.open(path, os.O_RDONLY)
    try:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
            by_grep = sources.grep_spans(fd, mm, 0, size)
            by_find = kernlog.candidate_spans(mm, 0, size)
            assert by_grep == by_find and len(by_find) == 7
            # from an offset inside the file, as an incremental read starts
            lo = mm.find(b"\n", 1000) + 1
            assert sources.grep_spans(fd, mm, lo, size) == kernlog.candidate_spans(mm, lo, size)
    finally:
        os.close(fd)
    grepped = _read(path)
    assert [e.fault for e in grepped.events] == [
        "gpu.xid.79", "kernel.rcu_stall", "kernel.soft_lockup", "gpu.xid.48", "gpu.reset",
        "gpu.xid.79"]
    assert grepped.gpu_uuids == {"0000:18:00": "GPU-aaaa-bbbb"}
    _same(grepped, kernlog.scan(path.read_bytes(), now=NOW))


def test_without_grep_or_with_a_grep_that_says_something_else_the_scan_searches_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kern.log"
    _awkward_log(path)
    want = kernlog.scan(path.read_bytes(), now=NOW)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    _same(_read(path), want)
    fake = tmp_path / "bin" / "grep"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '0:not the line at offset 0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    _same(_read(path), want)
    fd = os.open(path, os.O_RDONLY)
    try:
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            assert sources.grep_spans(fd, mm, 0, len(mm)) is None
    finally:
        os.close(fd)
