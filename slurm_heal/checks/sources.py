"""Kernel log sources with a cursor (SPEC D1): each run reads only what is new.

* ``kmsg`` (default): /dev/kmsg, one record per read(); the cursor is the last record's
  sequence number. Sequence numbers restart at boot, so the caller drops the cursor when
  the boot id changes and the whole (bounded) kernel ring buffer is read afresh.
  Under a replay root ``dev/kmsg`` is a regular file and is read like a log file.
* ``file``: a log file; the cursor is (inode, offset). Rotation is followed: when the
  inode changed, the rest of the rotated file (``PATH.1`` or ``PATH-*`` with the old
  inode) is read first; a truncated file is read from its start.
* ``journal``: ``journalctl -k`` with its own cursor (``--after-cursor``).

The first read (no cursor) is bounded: the last ``first_read_mb`` of a file, the
current boot's last lines of the journal.

A file outlives boots: on its first read (no cursor: a new install, a wiped or corrupt
state), and on the first read after a reboot (the state marks the kept cursor
``new_boot``), an event line from before this boot (boot wall time = now -
/proc/uptime) is skipped, so a fault the reboot already fixed is not raised again
(`before_boot`): by its own wall time where the line has one. Where it has none (kmsg
records, plain dmesg, a bare message), the line is kept only when the data shows this
boot before it: the kernel's "Linux version" line (or a monotonic stamp / kmsg sequence
number that went back) with none after the line, a monotonic stamp within this boot's
uptime, in a file written since this boot began. A line that nothing dates is not
raised on such a read (SPEC D1: a line from before this boot never raises after it; a
fault it reports, if current, is in the next lines the driver prints, read as new). A
kmsg replay file is this boot's ring buffer, like /dev/kmsg: there a line with no wall
time is this boot's unless a boot follows it or its stamp passes the uptime. Without
/proc/uptime nothing is skipped.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from slurm_heal.checks import kernlog, paths, proc
from slurm_heal.errors import CheckError

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    Cursor = dict[str, Any]


def boot_wall(now: datetime | None = None) -> datetime | None:
    """This boot's wall time: ``now`` (default: the clock) minus /proc/uptime, read under
    the replay root; None when the uptime cannot be read."""
    text = paths.read_text(paths.host_path("/proc/uptime")).split()
    try:
        uptime = float(text[0])
    except (IndexError, ValueError):
        return None
    return (now or datetime.now(timezone.utc)) - timedelta(seconds=uptime)


def before_boot(found: kernlog.ScanResult, since: datetime, now: datetime | None,
                written: float | None, ring: bool = False) -> list[kernlog.Event]:
    """The events of ``found`` that are not from before this boot (``since``, its wall
    time; module docstring). ``written``: the file's last write (st_mtime), None when
    unknown; ``ring``: the data is this boot's ring buffer (a kmsg replay). Pure."""
    uptime_usec = int(((now or datetime.now(timezone.utc)) - since).total_seconds()
                      * 1_000_000)
    stale = written is not None and written < since.timestamp()
    kept: list[kernlog.Event] = []
    for i, ev in enumerate(found.events):
        line = ev.line
        if line.at is not None and _parses(line.at):
            if not _before(line, since):
                kept.append(ev)
            continue
        if i < found.boot_at or stale:
            continue  # a boot came after it, or the file was last written before this boot
        if not ring and not found.boots:
            continue  # nothing shows this boot before it: it may be from any boot
        if line.usec is not None and line.usec > uptime_usec:
            continue  # longer after its boot than this boot has lasted
        kept.append(ev)
    return kept


def _parses(at: str) -> bool:
    try:
        datetime.fromisoformat(at)
    except ValueError:
        return False
    return True


def _before(line: kernlog.Line, since: datetime) -> bool:
    """Whether the line's own wall time is before ``since``; False when it has none."""
    if line.at is None:
        return False
    try:
        at = datetime.fromisoformat(line.at)
    except ValueError:
        return False
    if at.tzinfo is None:
        at = at.astimezone()  # dmesg -T and syslog stamps are the node's local time
    return at < since


def _scan_file(fd: int, start: int, drop_partial_first: bool,
               result: kernlog.ScanResult, now: datetime | None = None) -> int:
    """Scan the whole lines from ``start`` to the end of the file; return the offset
    after the last complete line (a partial last line waits for the next run).

    The file is mapped, not read: the scan searches the page cache in place, so a big
    first read costs no copies (SPEC D1 speed target).
    """
    size = os.fstat(fd).st_size
    if size <= start:
        return start
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
        if drop_partial_first:
            nl = mm.find(b"\n", start, size)
            if nl == -1:
                return start
            start = nl + 1
        end = mm.rfind(b"\n", start, size) + 1
        if end <= start:
            return start
        spans = grep_spans(fd, mm, start, end) if end - start >= GREP_MIN_BYTES else None
        kernlog.scan(mm, result, start, end, now, spans=spans)
        return end


# From this many bytes on, one `grep -F` pass for all the needles beats one bytes.find
# pass per needle even with the process start (~2 ms); issue 26: 11 needles at ~360 MB/s
# in Python, grep -F ~900 MB/s on the same 2-core VM (benchmarks/run.py).
GREP_MIN_BYTES = 4 << 20
GREP_TIMEOUT = 60.0  # seconds; a 1 GB read takes about 1 s


def grep_spans(fd: int, data: kernlog.Buffer, lo: int, hi: int,
               needles: tuple[bytes, ...] = kernlog.NEEDLES) -> list[tuple[int, int]] | None:
    """The lines of ``data[lo:hi]`` (the file ``fd`` mapped; ``hi`` after a newline)
    holding a needle, found by one ``grep -F -b`` pass over the file from ``lo``: what
    `kernlog.candidate_spans` finds, in one pass instead of one per needle. None when grep
    is not there, fails, or says something else than that (the caller then searches
    itself): each line it names is checked against the mapped bytes."""
    grep = proc.which("grep")
    if grep is None or not needles:
        return None
    import subprocess

    argv = [grep, "-F", "-a", "-b", "-s"]
    for needle in needles:
        argv += ["-e", needle.decode("latin-1")]
    os.lseek(fd, lo, os.SEEK_SET)
    try:
        child = subprocess.Popen(argv, stdin=fd, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, start_new_session=True,
                                 env={"LC_ALL": "C", "PATH": os.defpath})
    except OSError:
        return None
    out, _, timed_out = proc.finish(child, GREP_TIMEOUT)
    if timed_out:
        return None
    if child.returncode not in (0, 1):
        return None
    spans: list[tuple[int, int]] = []
    for line in out.split(b"\n")[:-1]:
        offset, sep, text = line.partition(b":")
        if not sep or not offset.isdigit():
            return None
        start = lo + int(offset)
        if start >= hi:
            break  # appended after this read's end: the next run's
        end = start + len(text)
        if end > hi or data[start:end] != text:
            return None
        spans.append((start, end))
    return spans


def read_file(path: str, cursor: Cursor | None, first_read_bytes: int,
              result: kernlog.ScanResult, now: datetime | None = None,
              ring: bool = False) -> Cursor:
    """Scan what is new in a log file since ``cursor``; return the new cursor.

    On a first read, and on the first read after a reboot, events older than this boot
    are skipped (see the module docstring; ``ring``: the file is a kmsg replay).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckError(f"kernel log file {path} does not exist") from None
    except OSError as exc:
        raise CheckError(f"cannot open kernel log file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        size = st.st_size
        old_inode = (cursor or {}).get("inode")
        offset = int((cursor or {}).get("offset", 0))
        ours = bool(cursor) and (cursor or {}).get("kind") == "file"
        since = boot_wall(now) if not ours or (cursor or {}).get("new_boot") else None
        found = kernlog.ScanResult() if since is not None else result
        if ours and old_inode == st.st_ino:
            if offset > size:  # truncated in place (copytruncate): all of it is new
                offset = 0
            start, partial = offset, False
        elif ours and old_inode is not None:
            _finish_rotated(path, int(old_inode), offset, found, now)
            start, partial = 0, False
        else:
            start = max(0, size - first_read_bytes)
            partial = start > 0
        end = _scan_file(fd, start, partial, found, now)
        if since is not None:
            result.events.extend(before_boot(found, since, now, st.st_mtime, ring))
            result.gpu_uuids.update(found.gpu_uuids)
            result.lines += found.lines
            # what could not be read, or was another program's, is said as on any read
            result.skipped += found.skipped
            result.skipped_sample = result.skipped_sample or found.skipped_sample
            result.foreign += found.foreign
            result.foreign_sample = result.foreign_sample or found.foreign_sample
        return {"kind": "file", "path": path, "inode": st.st_ino, "offset": end}
    finally:
        os.close(fd)


def _finish_rotated(path: str, inode: int, offset: int, result: kernlog.ScanResult,
                    now: datetime | None = None) -> None:
    """Read the unread rest of the file ``path`` was before it was rotated."""
    import glob  # only after a rotation

    for candidate in [path + ".1", *sorted(glob.glob(glob.escape(path) + "-*"))]:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        if st.st_ino == inode and not candidate.endswith((".gz", ".xz", ".zst")):
            fd = os.open(candidate, os.O_RDONLY)
            try:
                _scan_file(fd, min(offset, st.st_size), False, result, now)
            finally:
                os.close(fd)
            return


def read_kmsg(path: str, cursor: Cursor | None, result: kernlog.ScanResult) -> Cursor:
    """Read the records of /dev/kmsg newer than the cursor's sequence number."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckError(f"{path} does not exist") from None
    if not stat.S_ISCHR(st.st_mode):
        # Replay: a regular file in kmsg record format.
        new = read_file(path, cursor if (cursor or {}).get("kind") == "file" else None,
                        1 << 62, result, ring=True)
        return new
    last = int((cursor or {}).get("seq", -1)) if (cursor or {}).get("kind") == "kmsg" else -1
    records: list[bytes] = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: skip ahead
                    continue
                raise CheckError(f"reading {path}: {exc.strerror}") from None
            if not rec:
                break
            seq = _seq(rec)
            if seq > last:
                records.append(rec if rec.endswith(b"\n") else rec + b"\n")
                last = seq
    finally:
        os.close(fd)
    if records:
        kernlog.scan(b"".join(records), result)
    return {"kind": "kmsg", "seq": last}


def _seq(record: bytes) -> int:
    try:
        return int(record.split(b",", 2)[1])
    except (IndexError, ValueError):
        return -1


def read_journal(cursor: Cursor | None, timeout: float, max_lines: int,
                 result: kernlog.ScanResult) -> Cursor:
    """Scan the kernel messages journald has since the cursor."""
    if proc.which("journalctl") is None:
        raise CheckError("journalctl not found on PATH")
    argv = ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q", "--show-cursor"]
    if cursor and cursor.get("kind") == "journal" and cursor.get("cursor"):
        argv.append(f"--after-cursor={cursor['cursor']}")
    else:
        argv += ["-b", "-n", str(max_lines)]
    res = proc.run(argv, timeout)
    if res.returncode != 0:
        raise CheckError(f"journalctl failed (exit {res.returncode}): {res.stderr.strip()[:200]}")
    text = res.stdout
    new_cursor = (cursor or {}).get("cursor", "")
    marker = text.rfind("-- cursor: ")
    if marker != -1:
        new_cursor = text[marker + len("-- cursor: "):].strip()
        text = text[:marker]
    # journalctl -k: the kernel's records only (_TRANSPORT=kernel), whatever tag journald
    # shows for one root wrote to /dev/kmsg (issue 34 item 1)
    kernlog.scan(text.encode("utf-8", "replace"), result, kernel=True)
    return {"kind": "journal", "cursor": new_cursor}


def gpu_indexes(root_path: Callable[[str], str]) -> dict[str, int]:
    """PCI bus -> GPU index from /proc/driver/nvidia/gpus (cheap: no nvidia-smi).

    ``Device Minor`` (the /dev/nvidiaN number) when the file says it, else the
    position in PCI order, which is how nvidia-smi numbers GPUs by default.
    """
    base = root_path("/proc/driver/nvidia/gpus")
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return {}
    out: dict[str, int] = {}
    for pos, bus in enumerate(buses):
        index = pos
        try:
            with open(os.path.join(base, bus, "information"), encoding="utf-8",
                      errors="replace") as fh:
                for line in fh:
                    if line.startswith("Device Minor:"):
                        index = int(line.split(":", 1)[1])
                        break
        except (OSError, ValueError):
            pass
        out[kernlog.norm_pci(bus)] = index
    return out
