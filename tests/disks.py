"""A really full file system for the tests of a full disk (SPEC I5: fsio, the store):
a small tmpfs mounted for the test, and a file that fills it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (created) for the block; the test is
    skipped, saying why, where one cannot be mounted (not root, no CAP_SYS_ADMIN)."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run the tests as root to cover ENOSPC")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip()}); a container needs "
                    "CAP_SYS_ADMIN for this test")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> None:
    """Write zeros to ``disk/filler`` until the file system says it is full."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)
