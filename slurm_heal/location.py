"""Where things are: the config file, slurm.conf and the store, found the same way by
the daemon and every admin command (SPEC I4, I5).

A person's word must never land in a store no controller reads. So:

* **Config file**: ``--config``, else ``$SLURM_HEAL_CONFIG``, else
  ``/etc/slurm-heal/heal.toml`` when it exists (what ``install-controller`` writes and
  the systemd unit names). The daemon and the admin commands read the same one.
  (Every built-in default here is looked for under ``$SLURM_HEAL_DEFAULT_ROOT`` when
  that is set: `slurm_heal.checks.paths.default`; the test suite sets it.)
* **State directory**: ``--state-dir``, else ``$SLURM_HEAL_STATE_DIR``, else the
  config's ``[controller] state_dir``, else ``slurm-heal`` beside slurmctld's
  StateSaveLocation (asked of ``scontrol show config``).
* **slurm.conf**: the config's ``[controller] slurm_conf``, else ``$SLURM_CONF``, else
  ``/etc/slurm/slurm.conf``. A missing or unreadable one is a `SlurmError` at once, with
  one message (asking Slurm without it hangs for a minute in Slurm's configless lookup).

`Location.check_writable` refuses a write (an inbox command) to a store that does not
exist yet or that no controller has a heartbeat in: such a command would never be read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_heal.checks import paths
from slurm_heal.errors import SlurmError, StoreError

if TYPE_CHECKING:
    from slurm_heal.heartbeat import Heartbeat

ENV_CONFIG = "SLURM_HEAL_CONFIG"
ENV_STATE_DIR = "SLURM_HEAL_STATE_DIR"
DEFAULT_CONFIG = Path("/etc/slurm-heal/heal.toml")
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
HOW_TO_POINT = (f"point at the controller's store with --config FILE (its [controller] "
                f"state_dir) or --state-dir DIR / ${ENV_STATE_DIR}")


class NoController(StoreError):
    """A write to a store no controller reads (missing, or no heartbeat)."""


def config_path(explicit: str | Path | None) -> Path | None:
    """The config file every command reads: explicit, ``$SLURM_HEAL_CONFIG``, the default."""
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    default = default_config()
    return default if default.is_file() else None


def default_config() -> Path:
    """`DEFAULT_CONFIG` as looked for here (under ``$SLURM_HEAL_DEFAULT_ROOT`` when set)."""
    return Path(paths.default(str(DEFAULT_CONFIG)))


def slurm_conf_path(configured: str | Path | None = None,
                    source: str = "[controller] slurm_conf") -> Path:
    """The slurm.conf Slurm will read; SlurmError (one message) when it cannot be read.
    ``source`` names where ``configured`` came from (the config, ``--slurm-conf``)."""
    if configured:
        path = Path(configured)
    elif os.environ.get("SLURM_CONF"):
        path, source = Path(os.environ["SLURM_CONF"]), "$SLURM_CONF"
    else:
        path, source = Path(paths.default(str(DEFAULT_SLURM_CONF))), "Slurm's default"
    if not path.is_file():
        raise SlurmError(f"slurm.conf not found: {path} ({source}); set SLURM_CONF or "
                         "[controller] slurm_conf to the cluster's slurm.conf")
    if not os.access(path, os.R_OK):
        raise SlurmError(f"slurm.conf not readable: {path} ({source}); run as a user who "
                         "can read it")
    return path


@dataclass(frozen=True)
class Location:
    """The store a command uses and how it was found (said on every admin command)."""

    state_dir: Path
    source: str  # how it was found, e.g. "--config /etc/slurm-heal/heal.toml"
    config: Path | None = None
    heartbeat: Path | None = None
    controller: dict[str, Any] = field(default_factory=dict)  # the config's [controller]

    @property
    def heartbeat_file(self) -> Path:
        return self.heartbeat or self.state_dir / "heartbeat"

    def describe(self) -> str:
        return f"{self.state_dir} (from {self.source})"

    def as_json(self) -> dict[str, Any]:
        return {"dir": str(self.state_dir), "from": self.source,
                "config": str(self.config) if self.config else None}

    def last_heartbeat(self) -> datetime | None:
        """When a controller last tried a cycle on this store (None: never)."""
        beat = self.heartbeat_record()
        return beat.at if beat is not None else None

    def heartbeat_record(self) -> Heartbeat | None:
        """The controller's whole heartbeat (`slurm_heal.heartbeat`), or None."""
        # here, not at the top: install-node reads DEFAULT_CONFIG on a node install, which
        # has no pydantic (the controller extra, issue 38)
        from slurm_heal.heartbeat import read as read_heartbeat

        return read_heartbeat(self.heartbeat_file)

    def check_writable(self) -> None:
        """Refuse (NoController) a write no controller would read."""
        if not self.state_dir.is_dir():
            raise NoController(f"store {self.describe()} does not exist: no controller runs "
                               f"on it; {HOW_TO_POINT} (or --force to write anyway)")
        if self.last_heartbeat() is None:
            raise NoController(f"store {self.describe()} has no controller heartbeat "
                               f"({self.heartbeat_file}): no daemon reads it; {HOW_TO_POINT} "
                               "(or --force to write anyway)")


def locate(state_dir: str | Path | None = None, config: str | Path | None = None,
           slurm_conf: str | Path | None = None) -> Location:
    """Find the store the same way the daemon does (see the module docstring)."""
    from slurm_heal.config import load_policy

    cfg = config_path(config)
    section: dict[str, Any] = dict(load_policy(cfg).controller) if cfg is not None else {}
    heartbeat = Path(section["heartbeat"]) if section.get("heartbeat") else None
    if state_dir:
        return Location(Path(state_dir), "--state-dir", cfg, heartbeat, section)
    if os.environ.get(ENV_STATE_DIR):
        return Location(Path(os.environ[ENV_STATE_DIR]), f"${ENV_STATE_DIR}", cfg, heartbeat,
                        section)
    if section.get("state_dir"):
        return Location(Path(str(section["state_dir"])), f"[controller] state_dir of {cfg}",
                        cfg, heartbeat, section)
    from slurm_heal.store import default_state_dir, fallback_state_dir

    if section.get("slurm_conf"):
        conf = slurm_conf_path(section["slurm_conf"])
    else:
        conf = slurm_conf_path(slurm_conf, "--slurm-conf")
    found = default_state_dir(conf)
    source = (f"fallback: scontrol show config (SLURM_CONF={conf}) named no StateSaveLocation"
              if found == fallback_state_dir() else f"beside StateSaveLocation of {conf}")
    return Location(found, source, cfg, heartbeat, section)


def usable_state_dir(path: Path, create: bool = True) -> None:
    """Make sure the daemon can keep its store in ``path``: a StoreError (exit 5) naming
    the path and why otherwise (issue 22: a file, a read-only file system, /proc), never
    a traceback. The directory is created when missing and a probe file written and
    removed, because permission bits do not tell (root ignores them). Without ``create``
    (``policy check``, and the daemon's own config check) nothing is created: a missing
    directory is judged by a probe file in its nearest existing parent, where it would be
    made. (Before, the check made the directory and removed it again: a second daemon
    starting beside it on the same fresh state_dir could find its directory gone between
    its mkdir and its first file, and exit 5; a 25.11 rest pass lost a replica so.)"""
    import tempfile

    if path.exists() and not path.is_dir():
        raise StoreError(f"state_dir {path} is not a directory; slurm-heal keeps its store "
                         "there: point [controller] state_dir (or $SLURM_HEAL_STATE_DIR) at "
                         "a directory")
    probe_dir = path
    if not create:
        while not probe_dir.exists() and probe_dir != probe_dir.parent:
            probe_dir = probe_dir.parent
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreError(f"state_dir {path} cannot be written ({exc.strerror or exc}); "
                         "slurm-heal keeps its store there: make it a writable directory "
                         "or point [controller] state_dir elsewhere") from None
