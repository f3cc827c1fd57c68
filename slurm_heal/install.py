"""One documented install for sites (SPEC I1): slurm-heal in a virtual environment under a
prefix (default ``/opt/slurm-heal``), and the slurmd glue at one path.

``slurm-heal install-node`` / ``install-controller`` (commands/install.py) call `install`:

* ``PREFIX`` becomes a venv (``python3 -m venv``; Debian 12 refuses a system-wide pip
  install, PEP 668) and slurm-heal is pip-installed into it: from this source checkout
  when the running slurm-heal is one, else ``slurm-heal==VERSION`` from the package index.
* Node role: ``PREFIX/libexec/slurm-heal-healthcheck``, ``-prolog`` and ``-epilog`` are
  the glue scripts (``slurm_heal/glue/``) with the environment slurmd does not give them
  written in: ``SLURM_CONF`` (slurmd runs HealthCheckProgram without it, and the check then
  fails with "Could not establish a configuration source"), ``SLURM_HEAL_BIN`` (this
  venv's slurm-heal), ``SLURM_HEAL_SLURM_BIN`` (the directory of the site's Slurm
  commands, see `slurm_bin_dir`) and any ``--env NAME=VALUE``. The NHC plugin goes to
  ``PREFIX/share/slurm-heal/nhc/``. ``PREFIX/share/slurm-heal/slurm.conf.snippet`` holds
  the exact slurm.conf lines for those paths.
* Controller role: a starter config at ``/etc/slurm-heal/heal.toml`` (only when there is
  none: the file the daemon and every admin command read, `slurm_heal.location`) and a
  systemd unit ``PREFIX/share/slurm-heal/slurm-heal.service`` running this venv's daemon,
  with that Slurm command directory first on its PATH.

The Slurm commands: slurm-heal runs `scontrol`, `sinfo` & co. from PATH, and neither slurmd
(HealthCheckProgram, Prolog, Epilog) nor systemd gives a PATH with a Slurm built into its
own prefix (``/opt/slurm/bin``). Worse, a host may also have a distribution's older Slurm
in ``/usr/bin``, whose commands cannot talk to the newer slurmctld (seen with Debian's
22.05 `scontrol` against a 25.11 slurmctld: "Zero Bytes were transmitted or received").
So the install writes the directory in: ``--slurm-bin DIR``, else the directory of the
`scontrol` on the installer's PATH (the Slurm the operator uses).

Nothing here runs on import; every step says what it did (the returned lines).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from slurm_heal import __version__, fsio
from slurm_heal.errors import ConfigError, HealError
from slurm_heal.location import DEFAULT_CONFIG, ENV_CONFIG, slurm_conf_path

DEFAULT_PREFIX = Path("/opt/slurm-heal")
GLUE = ("slurm-heal-healthcheck", "slurm-heal-prolog", "slurm-heal-epilog")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Values are written in double quotes: ${VAR} expands when slurmd runs the script (e.g.
# SLURM_HEAL_ROOT=/srv/replay/${SLURMD_NODENAME}); nothing else may escape the quotes.
_ENV_VALUE = re.compile(r'^(?:[^"\\`$]|\$\{[A-Za-z_][A-Za-z0-9_]*\})*$')
PIP_TIMEOUT = 900.0
# The glue's PATH after the Slurm command directory (slurm_heal/glue/*), and the unit's.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

STARTER_CONFIG = """\
# slurm-heal controller config, written by `slurm-heal install-controller`.
# Check it with `slurm-heal policy check {config}`; every knob: docs/policy.md.
# Start in recommend-only mode: everything is proposed and recorded, nothing executed.
mode = "recommend_only"

[approvals]
default = "manual"

[controller]
slurm_conf = "{slurm_conf}"
# state_dir: default beside slurmctld's StateSaveLocation (docs/store.md)

[provider]
# http, exec, slurm, openstack or simulator: docs/providers.md
type = "slurm"
"""

UNIT = """\
[Unit]
Description=slurm-heal remediation controller
After=network-online.target slurmctld.service
Wants=network-online.target

[Service]
Type=simple
Environment=SLURM_CONF={slurm_conf}
{path}ExecStart={prefix}/bin/slurm-heal daemon --config {config}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


@dataclass
class Installed:
    """What `install` did, for the command to print."""

    prefix: Path
    lines: list[str] = field(default_factory=list)
    snippet: Path | None = None
    config: Path | None = None

    slurm_bin: Path | None = None

    def say(self, line: str) -> None:
        self.lines.append(line)


def parse_env(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs for the glue; ConfigError for one that cannot be written safely."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ConfigError(f"--env {pair!r}: use NAME=VALUE with an upper-case NAME")
        if not _ENV_VALUE.match(value):
            raise ConfigError(f"--env {pair!r}: the value may not contain \", \\, ` or $ "
                              "other than ${NAME}")
        out[name] = value
    return out


def slurm_bin_dir(explicit: str | None = None) -> Path | None:
    """The directory of the site's Slurm commands for the glue and the unit: ``explicit``
    (``--slurm-bin``), which must hold an executable `scontrol`; else the directory of
    the `scontrol` on PATH; None when there is none (the glue's system PATH then)."""
    if explicit:
        found = Path(explicit)
        if not found.is_absolute():
            raise ConfigError(f"--slurm-bin must be an absolute path: {explicit}")
        if not os.access(found / "scontrol", os.X_OK):
            raise ConfigError(f"--slurm-bin {explicit}: no executable scontrol there "
                              "(give the directory of the site's Slurm commands)")
    else:
        which = shutil.which("scontrol")
        if which is None:
            return None
        found = Path(which).absolute().parent
    if not _ENV_VALUE.match(str(found)) or "$" in str(found) or ":" in str(found):
        raise ConfigError(f"the Slurm command directory {str(found)!r} cannot be written "
                          "into the glue (it contains \", \\, `, $ or :)")
    return found


def source_checkout() -> Path | None:
    """The source tree this slurm-heal runs from, when it is one (pyproject.toml beside)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "slurm_heal").is_dir() \
        else None


def glue_text(name: str) -> str:
    return resources.files("slurm_heal").joinpath("glue").joinpath(name).read_text()


def wrapper(name: str, prefix: Path, slurm_conf: Path, env: dict[str, str],
            slurm_bin: Path | None = None) -> str:
    """The glue script ``name`` with the environment slurmd does not pass written in."""
    text = glue_text(name)
    shebang, _, rest = text.partition("\n")
    block = [f"# Written by `slurm-heal install-node --prefix {prefix}`: slurmd runs this "
             "without SLURM_CONF.",
             f'SLURM_CONF="{slurm_conf}"', "export SLURM_CONF",
             f'SLURM_HEAL_BIN="{prefix}/bin/slurm-heal"', "export SLURM_HEAL_BIN"]
    if slurm_bin is not None:  # the glue puts it first on PATH (see the module)
        block += [f'SLURM_HEAL_SLURM_BIN="{slurm_bin}"', "export SLURM_HEAL_SLURM_BIN"]
    for key, value in env.items():
        block += [f'{key}="{value}"', f"export {key}"]
    return shebang + "\n" + "\n".join(block) + "\n" + rest


def snippet(prefix: Path) -> str:
    """The slurm.conf lines for the glue installed under ``prefix`` (README, contrib/slurm)."""
    lib = prefix / "libexec"
    return (f"HealthCheckProgram={lib}/slurm-heal-healthcheck\n"
            "HealthCheckInterval=300\n"
            "HealthCheckNodeState=ANY,CYCLE\n"
            f"Prolog={lib}/slurm-heal-prolog\n"
            f"Epilog={lib}/slurm-heal-epilog\n"
            "SchedulerParameters=nohold_on_prolog_fail\n")


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT,
                              check=False)  # argv list, never a shell
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HealError(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise HealError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))


def make_venv(prefix: Path, source: str | None, out: Installed) -> None:
    """``prefix`` as a venv with slurm-heal installed (from ``source`` or the default)."""
    python = prefix / "bin" / "python"
    if source is None and Path(sys.prefix).resolve() == prefix.resolve():
        out.say(f"slurm-heal {__version__} runs from {prefix} already: nothing to pip-install")
        return
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(prefix)], f"python3 -m venv {prefix}")
        out.say(f"created the virtual environment {prefix}")
    what = source or (str(source_checkout()) if source_checkout() else
                      f"slurm-heal=={__version__}")
    _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
          "--upgrade", what], f"pip install {what} into {prefix}")
    if not (prefix / "bin" / "slurm-heal").exists():
        raise HealError(f"pip installed {what} but {prefix}/bin/slurm-heal is missing")
    out.say(f"installed slurm-heal ({what}) into {prefix}")


def install(prefix: Path, role: str, *, slurm_conf: str | None = None,
            source: str | None = None, env: dict[str, str] | None = None,
            config: Path = DEFAULT_CONFIG, venv: bool = True,
            slurm_bin: str | None = None) -> Installed:
    """Install the ``role`` ("node" or "controller") under ``prefix``; see the module.
    ``slurm_bin``: the site's Slurm command directory (default: `scontrol` on PATH)."""
    if role not in ("node", "controller"):
        raise ConfigError(f"role must be node or controller, not {role!r}")
    if not prefix.is_absolute():
        raise ConfigError(f"--prefix must be an absolute path (slurm.conf names it): {prefix}")
    conf = slurm_conf_path(slurm_conf)  # the slurm.conf carried into the glue, checked now
    bindir = slurm_bin_dir(slurm_bin)  # checked before anything is written
    out = Installed(prefix=prefix, slurm_bin=bindir)
    if venv:
        make_venv(prefix, source, out)
    share = prefix / "share" / "slurm-heal"
    share.mkdir(parents=True, exist_ok=True)
    if role == "node":
        lib = prefix / "libexec"
        lib.mkdir(parents=True, exist_ok=True)
        for name in GLUE:
            target = lib / name
            # Atomic: slurmd may be running the old one right now.
            fsio.atomic_write(target, wrapper(name, prefix, conf, env or {}, bindir), 0o755)
            out.say(f"wrote {target} (SLURM_CONF={conf}, Slurm commands from "
                    f"{bindir or 'the system PATH'})")
        (share / "nhc").mkdir(exist_ok=True)
        (share / "nhc" / "slurm_heal.nhc").write_text(glue_text("slurm_heal.nhc"))
        out.say(f"wrote {share / 'nhc' / 'slurm_heal.nhc'} (for sites running NHC)")
        out.snippet = share / "slurm.conf.snippet"
        out.snippet.write_text(snippet(prefix))
        out.say(f"wrote {out.snippet}: add these lines to slurm.conf, then "
                "`scontrol reconfigure`")
    else:
        if not config.exists():
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(STARTER_CONFIG.format(config=config, slurm_conf=conf))
            out.say(f"wrote a starter config {config} (recommend-only; edit, then "
                    f"`{prefix}/bin/slurm-heal policy check {config}`)")
        else:
            out.say(f"kept the existing config {config}")
        out.config = config
        unit = share / "slurm-heal.service"
        path = f"Environment=PATH={bindir}:{SYSTEM_PATH}\n" if bindir is not None else ""
        unit.write_text(UNIT.format(prefix=prefix, config=config, slurm_conf=conf, path=path))
        out.say(f"wrote {unit}: `systemctl link {unit} && systemctl enable --now "
                "slurm-heal`")
        if config.resolve() != DEFAULT_CONFIG.resolve():
            # the admin commands look at DEFAULT_CONFIG: elsewhere, they would read another
            # store and say NO CONTROLLER (issue 25 item 9)
            out.say(f"the config is not at {DEFAULT_CONFIG}, where the admin commands look "
                    f"for it: set {ENV_CONFIG}={config.resolve()} for them (e.g. in "
                    "/etc/profile.d/slurm-heal.sh), or pass --config to each; otherwise "
                    "`slurm-heal status` reads another store")
    link = Path("/usr/local/bin/slurm-heal")
    if os.access(link.parent, os.W_OK) and prefix == DEFAULT_PREFIX and not link.exists():
        link.symlink_to(prefix / "bin" / "slurm-heal")
        out.say(f"linked {link} -> {prefix}/bin/slurm-heal")
    if shutil.which("slurm-heal") is None:
        out.say(f"the admin commands are {prefix}/bin/slurm-heal (add {prefix}/bin to PATH)")
    return out
