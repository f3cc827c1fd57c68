"""The node agent (`slurm-heal agent`): the check's detectors as a long-running service.

It follows the kernel log as records arrive, so a critical fault (an Xid 79) is marked
within about a second instead of at the next HealthCheckInterval, and it still runs
the full check every ``interval`` seconds. The follower only wakes the agent up: the
kernel log detector itself reads through its cursor as in every check, so nothing is
read twice and nothing is missed between the two.

* /dev/kmsg (a character device): poll() on a descriptor positioned at the end; a new
  record with one of the kernel log needles triggers a kernel-log-only check.
* a file (``source = "file"``, or ``dev/kmsg`` under a replay root): its size is
  watched every 0.2 s and the new bytes are looked at.
* journald: no follower; the periodic check reads it.

SIGTERM/SIGINT stop the agent cleanly within half a second.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from slurm_heal.checks import kernlog, paths, runner
from slurm_heal.checks.config import CheckConfig
from slurm_heal.errors import HealError

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

FOLLOW_STEP = 0.2


class Follower:
    """Wakes the agent when the kernel log gains a line worth a check."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.fd: int | None = None
        self.device = False
        self.offset = 0
        self.inode = 0
        self.poller: select.poll | None = None
        if path is None:
            return
        try:
            st = os.stat(path)
        except OSError:
            return  # the periodic check reports the missing source
        self.device = stat.S_ISCHR(st.st_mode)
        if self.device:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLIN)
        else:
            self.offset, self.inode = st.st_size, st.st_ino

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when new lines hold a needle."""
        if self.path is None or (self.device and self.poller is None):
            time.sleep(timeout)
            return False
        if self.device:
            assert self.poller is not None and self.fd is not None
            if not self.poller.poll(int(timeout * 1000)):
                return False
            return self._hit(self._drain_device())
        deadline = time.monotonic() + timeout
        while True:
            data = self._new_file_bytes()
            if data:
                return self._hit(data)
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(FOLLOW_STEP, left))

    def _drain_device(self) -> bytes:
        assert self.fd is not None
        chunks = []
        while True:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten while we slept: go on
                continue
            if not rec:
                break
            chunks.append(rec if rec.endswith(b"\n") else rec + b"\n")
        return b"".join(chunks)

    def _new_file_bytes(self) -> bytes:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return b""
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset = st.st_ino, 0  # rotated or truncated
        if st.st_size == self.offset:
            return b""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(st.st_size - self.offset)
        self.offset += len(data)
        return data

    @staticmethod
    def _hit(data: bytes) -> bool:
        return bool(data) and any(n in data for n in kernlog.NEEDLES)


def follow_path(cfg: CheckConfig) -> str | None:
    """What the agent follows for the configured kernel log source."""
    kc = cfg.kernel_log
    if not kc.enabled or "agent" not in kc.modes:
        return None
    if kc.source == "kmsg":
        return paths.host_path("/dev/kmsg")
    if kc.source == "file":
        return paths.host_path(kc.path)
    return None


def run_agent(cfg: CheckConfig, *, node_name: str, interval: float, dry_run: bool,
              emit: Callable[[runner.CheckResult], None], stop: threading.Event,
              client_factory: Callable[[], SlurmClient] | None = None,
              on_error: Callable[[str], None] | None = None) -> None:
    """Run until ``stop`` is set: a full check every ``interval`` seconds, and a kernel
    log check whenever the follower sees a line worth it. Errors are reported through
    ``on_error`` and the agent carries on (after a short pause)."""
    report = on_error or (lambda msg: sys.stderr.write(f"slurm-heal agent: {msg}\n"))
    follower = Follower(follow_path(cfg))
    # One Slurm client for the agent's life (issue 32 item 12): a client per run asked
    # `sinfo --version` on every wake-up, a process start on the path from the kernel
    # record to the drain. After a Slurm error the next run makes a fresh one (a Slurm
    # upgraded under the agent is asked again).
    made: list[SlurmClient] = []

    def client() -> SlurmClient:
        if not made:
            made.append((client_factory or runner.default_client)())
        return made[0]

    next_full = 0.0
    try:
        while not stop.is_set():
            only: frozenset[str] | None = None
            if time.monotonic() < next_full:
                if not follower.wait(min(0.5, max(0.0, next_full - time.monotonic()))):
                    continue
                only = frozenset({"kernel_log"})
            else:
                next_full = time.monotonic() + interval
            try:
                emit(runner.run_check(cfg, node_name=node_name, mode="agent", dry_run=dry_run,
                                      client_factory=client, only=only))
            except HealError as exc:
                made.clear()
                report(str(exc))
                stop.wait(min(5.0, interval))
            except Exception as exc:  # a bug in the check: said centrally, the agent goes on
                what = f"{type(exc).__name__}: {exc}"
                report(f"the node check itself failed: {what}")
                if not dry_run:
                    try:
                        report(runner.report_crash(node_name, what, client(),
                                                   state_dir=cfg.state_path()))
                    except Exception as exc2:
                        report(f"the crash could not be reported in Slurm: {exc2}")
                stop.wait(min(5.0, interval))
    finally:
        follower.close()
