"""The one atomic write and the one lock (house style 5 and 13; SPEC I5).

Every file slurm-heal keeps (the store, the check state, the API's idempotency keys,
provider records, tickets, validation results, the notification queue) is written with
`atomic_write` (or `atomic_open` for a writer that streams, like a tar archive) and
serialised with `locked`:

* **Atomic.** The data goes to a temp file in the same directory, named
  ``.<name>.<random>.tmp`` (unique: two writers, or a writer and the leftover of a killed
  one, never share it), is fsynced, gets its mode, is renamed over the target with
  ``os.replace`` and the directory is fsynced (so the rename survives a power cut). A
  crash at any point leaves the old file or the new one, never a torn one; an error
  (a full disk: ENOSPC, a file size limit: EFBIG) removes the temp file and raises the
  OSError, the old file untouched. A temp file left by a killed writer harms no later
  write; whoever holds the file's lock may sweep it with `remove_stale_temps`.
* **Locked.** ``locked(path, timeout)`` holds an exclusive ``flock`` on ``path`` (a side
  lock file, created when missing); it waits at most ``timeout`` seconds (None: as long
  as it takes) and raises `LockTimeout`, which names who holds it: the holder writes
  ``pid <n>`` into the lock file (diagnostics only). Closing the descriptor releases the
  lock, so a killed holder never leaves it held.

* **Set aside.** ``set_aside(path, target)`` moves a file that cannot be read out of the
  way (a corrupt state, an unreadable queue) so that a person can look at it, and makes
  the move durable. With `atomic_open` the only renames slurm-heal makes (the store's own
  set-aside, which words its failure for the person, aside: the import test holds it).

Callers turn OSError and LockTimeout into their own error of the tree (StoreError,
CheckError, ...), with their own words.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:  # pathlib (with urllib.parse, ipaddress) only where a Path is handed out:
    from pathlib import Path  # not on the node check's path (issue 26)
    from typing import IO

POLL_INTERVAL = 0.05  # seconds between tries of a lock held by another process
DEFAULT_MODE = 0o640


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the caller would wait."""

    def __init__(self, path: Path, timeout: float, holder: str) -> None:
        self.path = path
        self.timeout = timeout
        self.holder = holder
        super().__init__(f"{path}: held by {holder} for more than {timeout:g}s")


def _temp_prefix(path: str | os.PathLike[str]) -> str:
    return f".{os.path.basename(os.fspath(path))}."


def temps(path: str | os.PathLike[str]) -> list[Path]:
    """Temp files of `atomic_write` for ``path`` (a live writer's, or a killed one's)."""
    from pathlib import Path

    p = Path(path)
    return sorted(p.parent.glob(f"{_temp_prefix(p)}*.tmp"))


def remove_stale_temps(path: str | os.PathLike[str]) -> None:
    """Remove the temp files a killed writer of ``path`` left. Only safe while holding
    the lock every writer of ``path`` holds (no live writer then owns one)."""
    for stale in temps(path):
        with contextlib.suppress(OSError):
            stale.unlink()


def _mkstemp(directory: str, prefix: str) -> tuple[int, str]:
    """A new temp file ``<prefix><random>.tmp`` in ``directory``, opened O_EXCL (what
    `tempfile.mkstemp` does, without importing tempfile, shutil and random on the node
    check's path: issue 26)."""
    for _ in range(100):
        name = os.path.join(directory, f"{prefix}{os.urandom(6).hex()}.tmp")
        try:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temp file name", str(directory))


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename (or a create) in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: int = DEFAULT_MODE) -> Iterator[IO[bytes]]:
    """A binary file to write; when the block exits without an error it replaces
    ``path`` atomically (fsync, mode, rename, directory fsync). On an error nothing
    changes and the temp file is gone."""
    target = os.fspath(path)
    parent = os.path.dirname(target) or os.curdir
    fd, tmp = _mkstemp(parent, _temp_prefix(target))
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        fsync_dir(parent)  # the rename is done; a failed directory fsync loses nothing


def atomic_write(path: str | os.PathLike[str], data: bytes | str,
                 mode: int = DEFAULT_MODE) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) atomically, file mode
    ``mode``. Raises the OSError of a failed write; the old file is then untouched."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, mode) as fh:
        fh.write(payload)


def set_aside(path: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Move ``path`` to ``target`` (replacing it) and fsync the directory. Raises the
    OSError of a failed move; a failed directory fsync loses nothing (the move is done)."""
    os.replace(path, target)
    with contextlib.suppress(OSError):
        fsync_dir(os.path.dirname(os.fspath(target)) or os.curdir)


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], timeout: float | None = None) -> Iterator[None]:
    """Hold the exclusive lock ``path``; wait at most ``timeout`` seconds (None: no
    limit), then raise `LockTimeout`. An OSError opening the lock file propagates."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                if time.monotonic() >= deadline:
                    from pathlib import Path

                    lock = Path(path)
                    raise LockTimeout(lock, timeout, _holder(lock))
                time.sleep(POLL_INTERVAL)
        # Who holds it, for the message another process may show (diagnostics only).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
