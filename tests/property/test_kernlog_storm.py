"""Issue 35 item 6 (SPEC D1), a property over the real captures' kernel-log lines: a fault
storm (a few lines repeated with other digits: stamps, sequence numbers, GPC numbers)
reads exactly as its lines read one at a time. The scan reads each shape of line once and
each message once (`kernlog._SHAPE`), and finds a storm's lines in blocks; a line read
alone, with nothing kept from the lines before it, is the reference."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_heal.checks import kernlog

DATA = Path(__file__).resolve().parent.parent / "data"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
# Every line of the real captures (and the golden files) that holds a needle: each
# format the scan reads, each message it classifies.
LINES = sorted({line for path in [*(DATA / "real" / "kernlog").glob("*.log"),
                                  *(DATA / "kmsg").glob("*.log")]
                for line in path.read_bytes().splitlines()
                if any(n in line for n in kernlog.NEEDLES)})
# Made up here, not captured: stamps as long as a number may be (a time since boot that
# can be out of range, `kernlog.MAX_USEC`), in each form that carries one.
LONG = [b"4,1,1234567890123456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, off",
        b"[1234567890.123456] NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=q, DBE",
        b"Feb 23 16:24:18 gpu07 kernel: [1234567890.123456] NVRM: Xid (PCI:0000:3b:00): 79, "
        b"pid=3, name=r, GPU has fallen off the bus.",
        b"kern  :err   : [1234567890.5] INFO: rcu_sched self-detected stall on CPU"]
LINES = LINES + LONG
# What a line may hold besides: a "<N>" remote-syslog prefix, a "dmesg --decode" head;
# a carriage return, bytes that are not UTF-8 (an unfinished sequence at the line's end).
HEADS = [b"", b"", b"", b"<4>", b"<13>", b"kern  :err   : "]
TAILS = [b"", b"", b"\r", b" \xe2\x82", b"\xff\xfe\r"]


# Digits to draw from: any, and few (all zeros: a stamp that is not a time, a fraction of
# 000000; nines: a month 99, a number out of range).
DIGITS = [b"0123456789", b"0", b"09", b"19", b"9"]


def _digits(line: bytes, rng: random.Random, share: float,
            digits: bytes = DIGITS[0]) -> bytes:
    """``line`` with ``share`` of its ASCII digits drawn anew: the same shape."""
    return bytes(rng.choice(digits) if 48 <= c <= 57 and rng.random() < share else c
                 for c in line)


def _one_at_a_time(data: bytes, kernel: bool) -> kernlog.ScanResult:
    """The reference: every line holding a needle scanned alone, into one result (a scan
    keeps nothing from one call to the next but the result)."""
    out = kernlog.ScanResult()
    start = 0
    for line in data.split(b"\n"):
        end = start + len(line)
        if any(n in line for n in kernlog.NEEDLES):
            kernlog.scan(data, out, now=NOW, spans=[(start, end)], kernel=kernel)
        start = end + 1
    return out


def _same(a: kernlog.ScanResult, b: kernlog.ScanResult) -> None:
    assert a.events == b.events
    assert [e.line for e in a.events] == [e.line for e in b.events]
    assert (a.gpu_uuids, a.lines, a.skipped, a.skipped_sample, a.foreign, a.foreign_sample,
            a.boot_at, a.boots, a.last_usec, a.last_seq) == (
        b.gpu_uuids, b.lines, b.skipped, b.skipped_sample, b.foreign, b.foreign_sample,
        b.boot_at, b.boots, b.last_usec, b.last_seq)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(st.tuples(st.sampled_from(LINES), st.sampled_from(HEADS),
                                st.sampled_from(TAILS), st.integers(1, 40),
                                st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from(DIGITS)),
                      min_size=1, max_size=6),
       seed=st.integers(0, 2**32 - 1), kernel=st.booleans(),
       dense=st.sampled_from([(32, 512, 1 << 16), (1, 1 << 20, 64), (3, 1 << 20, 700)]))
def test_a_storm_reads_as_its_lines_read_one_at_a_time(
        picks: list[tuple[bytes, bytes, bytes, int, float, bytes]], seed: int, kernel: bool,
        dense: tuple[int, int, int]) -> None:
    rng = random.Random(seed)
    lines = [_digits(head + line + tail, rng, share, digits)
             for line, head, tail, times, share, digits in picks for _ in range(times)]
    rng.shuffle(lines)
    data = b"\n".join(lines) + b"\n"
    saved = kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK
    kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK = dense  # small blocks too
    try:
        _same(kernlog.scan(data, now=NOW, kernel=kernel), _one_at_a_time(data, kernel))
    finally:
        kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK = saved


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.tuples(st.sampled_from(LINES + [b"", b"usb 1-1: new device",
                                                         b"x" * 300]),
                                st.integers(1, 60)), min_size=1, max_size=8),
       seed=st.integers(0, 2**32 - 1), end=st.sampled_from([b"", b"\n", b"\n\n"]),
       dense=st.sampled_from([(32, 512, 1 << 16), (1, 1 << 20, 1), (2, 64, 300)]))
def test_a_storms_candidate_lines_are_the_lines_holding_a_needle(
        picks: list[tuple[bytes, int]], seed: int, end: bytes,
        dense: tuple[int, int, int]) -> None:
    rng = random.Random(seed)
    lines = [_digits(line, rng, 1.0) for line, times in picks for _ in range(times)]
    rng.shuffle(lines)
    data = b"\n".join(lines) + end
    want, start = [], 0
    for line in data.split(b"\n"):
        if any(n in line for n in kernlog.NEEDLES):
            want.append((start, start + len(line)))
        start += len(line) + 1
    saved = kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK
    kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK = dense
    try:
        assert kernlog.candidate_spans(data) == want
        lo = data.find(b"\n", len(data) // 3) + 1  # from a line inside, as a cursor reads
        if lo:
            assert kernlog.candidate_spans(data, lo) == [s for s in want if s[0] >= lo]
    finally:
        kernlog._DENSE_AFTER, kernlog._DENSE_BYTES, kernlog._BLOCK = saved


def test_a_line_of_a_known_shape_reads_as_split_line_reads_it() -> None:
    """The reader a shape gets gives what `split_line` gives for every line of that shape,
    a stamp that is not a time and a number out of range included."""
    rng = random.Random(35)
    for line in LINES:
        raw = line.decode("utf-8", "replace").rstrip("\r")
        how: list[object] = []
        try:
            kernlog._split(raw, NOW, False, how)
        except ValueError:
            continue
        if not how:
            continue
        read = kernlog._reader(how[0])  # type: ignore[arg-type]
        for k in range(25):
            other = _digits(line, rng, 1.0, DIGITS[k % len(DIGITS)])
            other = other.decode("utf-8", "replace").rstrip("\r")
            try:
                want = kernlog.split_line(other, NOW)
            except ValueError as exc:
                try:
                    read(other, NOW)
                except ValueError as got:
                    assert str(got) == str(exc)
                    continue
                raise AssertionError(f"{other!r}: read, yet split_line refuses it") from exc
            assert read(other, NOW) == want, other
