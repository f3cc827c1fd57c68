"""Local disk space (SPEC D6, D8): ``disk.low_space`` is record only, never a reboot.

``[disk] paths = ["/", "/var", "/tmp"]``: each path's file system is below
``min_free_percent`` free (or ``min_free_gb`` when set) -> a warning recorded and sent to
support (the catalog marks it ``record_only``). A path that does not exist is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime

from slurm_heal.checks import paths as check_paths
from slurm_heal.checks.config import DiskConfig
from slurm_heal.frozen import dataclass
from slurm_heal.types import Evidence, Finding, Severity

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from slurm_heal.checks.config import CheckConfig


@dataclass(frozen=True, slots=True)
class Usage:
    path: str
    total: int  # bytes
    free: int  # bytes available to unprivileged users (what jobs get)


def gather(paths: tuple[str, ...], host_path: Callable[[str], str]) -> list[Usage]:
    """statvfs of each path (under the replay root when set)."""
    out = []
    for p in paths:
        try:
            st = os.statvfs(host_path(p))
        except OSError:
            continue
        out.append(Usage(p, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
    return out


def evaluate(usage: list[Usage], now: datetime, node: str, *, min_free_percent: float,
             min_free_gb: float = 0.0) -> list[Finding]:
    """Usage -> findings for file systems below the threshold (pure)."""
    out = []
    for u in usage:
        if u.total <= 0:
            continue
        pct = 100.0 * u.free / u.total
        gb = u.free / 1e9
        low = gb < min_free_gb if min_free_gb > 0 else pct < min_free_percent
        if not low:
            continue
        limit = f"{min_free_gb:g} GB" if min_free_gb > 0 else f"{min_free_percent:g}%"
        out.append(Finding(
            fault="disk.low_space", severity=Severity.WARNING,
            summary=f"{u.path} has {gb:.1f} GB ({pct:.1f}%) free, below {limit}",
            detector="disk", node=node,
            evidence=(Evidence(source="statvfs", at=now.isoformat(),
                               text=f"{u.path} free={u.free} total={u.total}",
                               data={"path": u.path, "free_bytes": u.free,
                                     "total_bytes": u.total,
                                     "free_percent": round(pct, 2)}),)))
    return out


class Disk:
    """SPEC D6, D8: free space on configured paths (record only)."""

    name = "disk"
    settings = DiskConfig
    modes = DiskConfig().modes

    def gather(self, cfg: CheckConfig, st: dict[str, Any], node: str,
               now: datetime) -> list[Usage]:
        return gather(cfg.disk.paths, check_paths.host_path)

    def evaluate(self, cfg: CheckConfig, st: dict[str, Any], node: str, now: datetime,
                 seen: list[Usage]) -> tuple[list[Finding], dict[str, Any]]:
        dc = cfg.disk
        return evaluate(seen, now, node, min_free_percent=dc.min_free_percent,
                        min_free_gb=float(dc.min_free_gb)), {}


DETECTOR = Disk()
