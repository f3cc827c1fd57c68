"""System paths, optionally under a replay root (``SLURM_HEAL_ROOT``).

Operators and tests replay a captured node by pointing ``SLURM_HEAL_ROOT`` at a
directory holding the files a check reads (``dev/kmsg`` as a regular file in kmsg
record format, ``proc/mounts``, ``proc/sys/kernel/random/boot_id``, ``var/log/...``
and the state dir). Tools (nvidia-smi, systemctl, journalctl) still come from PATH.

The built-in default locations of slurm-heal's own files (``/etc/slurm-heal/heal.toml``,
``/etc/slurm-heal/check.toml``, ``/var/lib/slurm-heal``, ``/etc/slurm/slurm.conf``) are
looked for under ``SLURM_HEAL_DEFAULT_ROOT`` when it is set (`default`): a directory that
stands for ``/`` for those defaults only. The test suite sets it, so that no test reads
the host's own install (issue 36 item 10); a path named explicitly (``--config``,
``$SLURM_HEAL_CONFIG``, ``$SLURM_CONF``, a configured ``state_dir``) is never moved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ROOT_ENV = "SLURM_HEAL_ROOT"
DEFAULT_ROOT_ENV = "SLURM_HEAL_DEFAULT_ROOT"
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


def default(path: str, env: Mapping[str, str] | None = None) -> str:
    """A built-in default location (absolute) as looked for here: under
    ``$SLURM_HEAL_DEFAULT_ROOT`` when it is set, else ``path`` itself."""
    base = (env if env is not None else os.environ).get(DEFAULT_ROOT_ENV, "").rstrip("/")
    if not base or not path.startswith("/"):
        return path
    return base + path


def own(path: str, env: Mapping[str, str] | None = None) -> str:
    """One of the node check's own default files (`CONFIG_FILE`, `STATE_DIR`): under the
    replay root when one is set, else where `default` puts it."""
    return host_path(path, env) if root(env) else default(path, env)


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
