"""The kernel log detector (SPEC D1, D2, D4): new kernel log lines since the cursor,
folded into the latched kernel faults of this boot (`slurm_heal.checks.kernlog`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone

from slurm_heal.checks import kernlog, paths, sources
from slurm_heal.checks.config import KernelLogConfig
from slurm_heal.frozen import dataclass
from slurm_heal.types import Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

    from slurm_heal.checks.detector import State, Update

if TYPE_CHECKING:
    from slurm_heal.checks.config import CheckConfig


def _boot_wall(now: datetime) -> datetime | None:
    text = paths.read_text(paths.host_path("/proc/uptime")).split()
    try:
        return datetime.fromtimestamp(now.timestamp() - float(text[0]), timezone.utc)
    except (IndexError, ValueError):
        return None


def _recovery(text: str) -> str | None:
    from slurm_heal import catalog

    action = catalog.load().recovery_action(text)
    return action.value if action is not None else None


def _unused(fid: str) -> Any:
    raise AssertionError(f"no events, yet asked about {fid}")


@dataclass(frozen=True, slots=True)
class Seen:
    """What one read of the kernel log gave."""

    result: kernlog.ScanResult
    cursor: Any
    gpus: kernlog.GpuMap
    uuids: dict[str, str]
    boot_wall: datetime | None


class KernelLog:
    name = "kernel_log"
    settings = KernelLogConfig
    modes = KernelLogConfig().modes

    def gather(self, cfg: CheckConfig, st: State, node: str, now: datetime) -> Seen:
        kc = cfg.kernel_log
        result = kernlog.ScanResult()
        cursor = st.get("cursor")
        if kc.source == "kmsg":
            new_cursor = sources.read_kmsg(paths.host_path("/dev/kmsg"), cursor, result)
        elif kc.source == "file":
            new_cursor = sources.read_file(paths.host_path(kc.path), cursor,
                                           int(kc.first_read_mb * (1 << 20)), result, now=now)
        else:
            new_cursor = sources.read_journal(cursor, kc.timeout, 20000, result)
        uuids = dict(st.get("gpu_uuids") or {})
        uuids.update(result.gpu_uuids)
        gpus = kernlog.GpuMap(index=sources.gpu_indexes(paths.host_path), uuid=uuids)
        return Seen(result, new_cursor, gpus, uuids, _boot_wall(now))

    def evaluate(self, cfg: CheckConfig, st: State, node: str, now: datetime,
                 seen: Seen) -> tuple[list[Finding], Update]:
        result = seen.result
        if result.events:
            # The catalog costs a TOML parse: only when there is something to classify.
            from slurm_heal import catalog

            cat = catalog.load()
            severity_of: Callable[[str], Severity] = lambda fid: cat.get(fid).severity  # noqa: E731
            explanation_of: Callable[[str], str] = lambda fid: cat.get(fid).explanation  # noqa: E731
        else:
            severity_of = explanation_of = _unused
        latched = kernlog.latch(
            st.get("kernel") or {}, result.events, seen.gpus, now, seen.boot_wall,
            severity_of=severity_of, explanation_of=explanation_of, recovery_of=_recovery)
        latched = kernlog.expire(latched, now, cfg.kernel_log.hold)
        if os.path.exists(os.path.join(cfg.state_path(), "gpu-reset.json")):
            from slurm_heal.checks import reset  # SPEC E6: no Xid from before a GPU reset

            done = reset.read(cfg.state_path())
            latched = reset.after_reset(latched, *done) if done else latched
        update: Update = {"cursor": seen.cursor, "kernel": latched, "gpu_uuids": seen.uuids}
        if result.skipped:
            # Records that could not be parsed were skipped (the cursor is past them):
            # counted in the state file, so a person can see that some were.
            old = st.get("kernel_skipped")
            count = old.get("count", 0) if isinstance(old, dict) else 0
            update["kernel_skipped"] = {"count": (count if isinstance(count, int) else 0)
                                        + result.skipped, "last": result.skipped_sample,
                                        "at": now.isoformat()}
        if result.foreign:
            # Issue 34 item 1 (SPEC D1): fault text another program logged (its syslog tag
            # or facility is not the kernel's) is never a kernel event; counted, so a
            # person can see that someone wrote it.
            old = st.get("kernel_foreign")
            count = old.get("count", 0) if isinstance(old, dict) else 0
            update["kernel_foreign"] = {"count": (count if isinstance(count, int) else 0)
                                        + result.foreign, "last": result.foreign_sample,
                                        "at": now.isoformat()}
        return kernlog.findings(latched, node), update


DETECTOR = KernelLog()
