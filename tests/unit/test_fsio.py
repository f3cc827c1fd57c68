"""The one atomic write and the one lock (SPEC I5; house style 5, 13): a writer killed
mid-write or stopped by a full disk leaves the old file whole, and nothing it left
behind gets in the way of the next write."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_heal import fsio
from tests.disks import fill, small_tmpfs

REPO = Path(__file__).resolve().parents[2]

# The child stops inside atomic_write after the new bytes are in the temp file and before
# the rename (its fsync blocks), says so, and waits to be killed: the worst moment.
KILLED_WRITER = textwrap.dedent("""
    import os, sys, time
    from slurm_heal import fsio
    def stuck(fd):
        print("writing", flush=True)
        time.sleep(3600)
    fsio.os.fsync = stuck
    fsio.atomic_write(sys.argv[1], b"new " * 100_000)
""")


def _kill_mid_write(target: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def test_a_writer_killed_mid_write_leaves_the_old_file_and_the_next_write_works(
        tmp_path: Path) -> None:
    """SPEC I5: SIGKILL between writing the temp file and the rename: the old file is
    intact, the stray temp file is the only trace, and the next write (another
    process) replaces the file all the same; the lock holder's sweep removes the stray."""
    target = tmp_path / "doc.json"
    fsio.atomic_write(target, b"old")
    _kill_mid_write(target)
    assert target.read_bytes() == b"old"
    strays = fsio.temps(target)
    assert len(strays) == 1 and strays[0].name.startswith(".doc.json.")
    assert strays[0].stat().st_size == 400_000  # it was killed after writing, before renaming
    fsio.atomic_write(target, b"next")
    assert target.read_bytes() == b"next"
    assert fsio.temps(target) == strays  # the next write used its own temp name
    fsio.remove_stale_temps(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


def test_two_killed_writers_never_share_a_temp_file(tmp_path: Path) -> None:
    """The temp name is unique (before: ``<file>.tmp-<pid>`` in the check state, where
    a reused pid met a leftover file)."""
    target = tmp_path / "state.json"
    fsio.atomic_write(target, "old")
    _kill_mid_write(target)
    _kill_mid_write(target)
    assert len(fsio.temps(target)) == 2
    assert target.read_text() == "old"


def test_the_mode_is_set_and_the_directory_has_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "records.json"
    fsio.atomic_write(target, "{}", 0o600)
    assert target.stat().st_mode & 0o777 == 0o600
    fsio.atomic_write(target, "{}\n", 0o644)
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]


def test_an_error_while_streaming_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "logs.tar.gz"
    fsio.atomic_write(target, b"old")
    with pytest.raises(RuntimeError, match="mid-stream"), fsio.atomic_open(target) as fh:
        fh.write(b"half")
        raise RuntimeError("mid-stream")
    assert target.read_bytes() == b"old"
    assert fsio.temps(target) == []


# ------------------------------------------------------------------ a full disk


def test_a_full_disk_is_a_clear_error_and_the_old_file_is_intact(tmp_path: Path) -> None:
    """SPEC I5: ENOSPC on a really full file system (a small tmpfs) raises the OSError
    that says so, the old file keeps its bytes, no temp file stays; once there is space
    the same write goes through."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        target = disk / "queue.json"
        fsio.atomic_write(target, b"old" * 100)
        fill(disk)
        with pytest.raises(OSError) as info:
            fsio.atomic_write(target, b"new" * 10_000)
        assert info.value.errno == errno.ENOSPC
        assert "No space left on device" in str(info.value)
        assert target.read_bytes() == b"old" * 100
        assert fsio.temps(target) == []
        (disk / "filler").unlink()
        fsio.atomic_write(target, b"new" * 10_000)
        assert target.read_bytes() == b"new" * 10_000


# ------------------------------------------------------------------ the lock


def test_a_held_lock_times_out_naming_its_holder(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from slurm_heal import fsio
            with fsio.locked(sys.argv[1]):
                print("held", flush=True)
                time.sleep(3600)
        """), str(lock)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(fsio.LockTimeout, match=rf"held by pid {holder.pid} for more "
                                                   r"than 0\.1s") as info, \
                fsio.locked(lock, timeout=0.1):
            pass
        assert info.value.holder == f"pid {holder.pid}"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    with fsio.locked(lock, timeout=0.1):  # a killed holder leaves the lock free
        pass

