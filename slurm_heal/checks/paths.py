"""System paths, optionally under a replay root (``SLURM_HEAL_ROOT``).

Operators and tests replay a captured node by pointing ``SLURM_HEAL_ROOT`` at a
directory holding the files a check reads (``dev/kmsg`` as a regular file in kmsg
record format, ``proc/mounts``, ``proc/sys/kernel/random/boot_id``, ``var/log/...``
and the state dir). Tools (nvidia-smi, systemctl, journalctl) still come from PATH.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ROOT_ENV = "SLURM_HEAL_ROOT"
STATE_DIR = "/var/lib/slurm-heal/node"
CONFIG_FILE = "/etc/slurm-heal/check.toml"


def root(env: Mapping[str, str] | None = None) -> str:
    """The replay root, or "" for the live system."""
    value = (env if env is not None else os.environ).get(ROOT_ENV, "")
    return value.rstrip("/")


def host_path(path: str, env: Mapping[str, str] | None = None) -> str:
    """``path`` (absolute) as read on this node: under the replay root when one is set."""
    base = root(env)
    if not base or not path.startswith("/"):
        return path
    return base + path


def read_text(path: str, default: str = "") -> str:
    """Read a small system file (already mapped); ``default`` when it is absent."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return default


def boot_id() -> str:
    """The kernel's boot id: cursors and latched kernel faults are tied to it."""
    return read_text(host_path("/proc/sys/kernel/random/boot_id")).strip()
