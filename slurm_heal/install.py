"""One documented install for sites (SPEC I1): slurm-heal in a virtual environment under a
prefix (default ``/opt/slurm-heal``), and the slurmd glue at one path.

``slurm-heal install-node`` / ``install-controller`` (commands/install.py) call `install`:

* ``PREFIX`` becomes a venv (``python3 -m venv``; Debian 12 refuses a system-wide pip
  install, PEP 668) and slurm-heal is pip-installed into it: ``--source``, else this
  source checkout when the running slurm-heal is one, else what the running slurm-heal
  was installed from (PEP 610's ``direct_url.json``) when that is still there; otherwise
  refused (slurm-heal is not on the package index: issue 36 item 4). A venv a failed
  install created is removed again. ``--no-venv``: the glue and the unit name
  ``PREFIX/bin/slurm-heal`` when it is there, else the running installation's console
  script (`program`), never a program that is not there.
* Both roles read the live Slurm configuration and print the slurm.conf lines merged
  with the site's (`slurm_heal.siteconf`, SPEC I7) into ``slurm.conf.snippet``; the node
  role writes ``PREFIX/libexec/slurm-heal-site-*`` where the site runs its own Prolog,
  Epilog or HealthCheckProgram (it runs the site's first, then ours).
* Node role: ``PREFIX/libexec/slurm-heal-healthcheck``, ``-prolog`` and ``-epilog`` are
  the glue scripts (``slurm_heal/glue/``) with the environment slurmd does not give them
  written in: ``SLURM_CONF`` (slurmd runs HealthCheckProgram without it, and the check then
  fails with "Could not establish a configuration source"), ``SLURM_HEAL_BIN`` (this
  venv's slurm-heal), ``SLURM_HEAL_SLURM_BIN`` (the directory of the site's Slurm
  commands, see `slurm_bin_dir`) and any ``--env NAME=VALUE``. The NHC plugin goes to
  ``PREFIX/share/slurm-heal/nhc/`` with the same three written in (`nhc_plugin`).
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
from typing import TYPE_CHECKING

from slurm_heal import __version__, fsio
from slurm_heal.errors import ConfigError, HealError
from slurm_heal.location import DEFAULT_CONFIG, ENV_CONFIG, slurm_conf_path

if TYPE_CHECKING:
    from slurm_heal.siteconf import SitePlan

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

def controller_unit(program: str, config: Path, slurm_conf: str, path: str) -> str:
    """The controller's unit for this install: the one unit the package carries
    (``data/systemd/slurm-heal.service``, contrib's; issue 38: two units had drifted
    apart), its ExecStart, SLURM_CONF and PATH set for this prefix."""
    data = resources.files("slurm_heal").joinpath("data/systemd/slurm-heal.service")
    template = data.read_text(encoding="utf-8")
    lines = [f"# Written by `slurm-heal install-controller` from the package's "
             f"slurm-heal.service (slurm-heal {__version__})."]
    for line in template.splitlines():
        if line.startswith("#") and len(lines) == 1:
            continue  # the template's own header: how to install it by hand
        if line.startswith("Environment=SLURM_CONF="):
            line = f"Environment=SLURM_CONF={slurm_conf}" + ("\n" + path.rstrip("\n")
                                                             if path else "")
        elif line.startswith("ExecStart="):
            line = f"ExecStart={program} daemon --config {config}"
        lines.append(line)
    return "\n".join(lines) + "\n"



@dataclass
class Installed:
    """What `install` did, for the command to print."""

    prefix: Path
    lines: list[str] = field(default_factory=list)
    snippet: Path | None = None
    config: Path | None = None

    slurm_bin: Path | None = None
    site: SitePlan | None = None
    program: Path | None = None

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
            slurm_bin: Path | None = None, bin_path: Path | None = None) -> str:
    """The glue script ``name`` with the environment slurmd does not pass written in."""
    text = glue_text(name)
    shebang, _, rest = text.partition("\n")
    block = [f"# Written by `slurm-heal install-node --prefix {prefix}`: slurmd runs this "
             "without SLURM_CONF.",
             f'SLURM_CONF="{slurm_conf}"', "export SLURM_CONF",
             f'SLURM_HEAL_BIN="{bin_path or prefix / "bin" / "slurm-heal"}"',
             "export SLURM_HEAL_BIN"]
    if slurm_bin is not None:  # the glue puts it first on PATH (see the module)
        block += [f'SLURM_HEAL_SLURM_BIN="{slurm_bin}"', "export SLURM_HEAL_SLURM_BIN"]
    for key, value in env.items():
        block += [f'{key}="{value}"', f"export {key}"]
    return shebang + "\n" + "\n".join(block) + "\n" + rest


def nhc_plugin(prog: Path, slurm_conf: Path, slurm_bin: Path | None) -> str:
    """The NHC plugin with its program, SLURM_CONF and the Slurm command directory written
    in (NHC resets PATH and slurmd gives it no SLURM_CONF: issue 36 item 2)."""
    text = glue_text("slurm_heal.nhc")
    for name, value in (("SLURM_HEAL_NHC_BIN", prog), ("SLURM_HEAL_NHC_SLURM_CONF", slurm_conf),
                        ("SLURM_HEAL_NHC_SLURM_BIN", slurm_bin or "")):
        if not _ENV_VALUE.match(str(value)) or "$" in str(value):
            raise ConfigError(f"{value!r} cannot be written into the NHC plugin")
        line = f'{name}=""\n'
        if line not in text:
            raise HealError(f"internal: the NHC plugin has no {name} line")
        text = text.replace(line, f'{name}="{value}"\n', 1)
    return text


def snippet(prefix: Path) -> str:
    """The slurm.conf lines for the glue installed under ``prefix`` (README, contrib/slurm)."""
    lib = prefix / "libexec"
    return (f"HealthCheckProgram={lib}/slurm-heal-healthcheck\n"
            "HealthCheckInterval=300\n"
            "HealthCheckNodeState=ANY,CYCLE\n"
            f"Prolog={lib}/slurm-heal-prolog\n"
            f"Epilog={lib}/slurm-heal-epilog\n"
            "SchedulerParameters=nohold_on_prolog_fail\n")


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT,
                              check=False, env=env)  # argv list, never a shell
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HealError(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise HealError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))


def installed_from() -> str | None:
    """What the running slurm-heal was pip-installed from, when that is still here: the
    wheel, sdist or directory named by its ``direct_url.json`` (PEP 610), else None."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        text = metadata.distribution("slurm-heal").read_text("direct_url.json")
        url = json.loads(text).get("url", "") if text else ""
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    parsed = urlparse(str(url))
    if parsed.scheme != "file":
        return None
    path = Path(unquote(parsed.path))
    return str(path) if path.exists() else None


def pip_source(source: str | None) -> str:
    """What pip installs into the new venv (issue 36 item 4): ``--source``, else this
    source checkout, else what the running installation was installed from; never a
    release from the package index (slurm-heal is not published there)."""
    if source:
        return source
    checkout = source_checkout()
    if checkout is not None:
        return str(checkout)
    found = installed_from()
    if found is not None:
        return found
    raise ConfigError(
        f"slurm-heal {__version__} runs from an installed package "
        f"({Path(__file__).resolve().parent}), not from a source checkout, and what it "
        "was installed from is not here any more: give --source with what to install (a "
        "wheel or sdist file, or a checkout directory), or make the venv yourself "
        "(`python3 -m venv PREFIX && PREFIX/bin/pip install WHEEL`) and run "
        "`PREFIX/bin/slurm-heal install-node` from it")


def pip_requirement(what: str, role: str) -> str:
    """What pip is asked for: the node set is the package itself; the controller adds
    the ``controller`` extra (issue 38), spelled for a wheel, sdist or directory as a
    PEP 508 direct reference. A requirement the operator wrote (a name, a URL) is theirs."""
    path = Path(what)
    if role != "controller" or not path.exists():
        return what
    return f"slurm-heal[controller] @ {path.resolve().as_uri()}"


def make_venv(prefix: Path, source: str | None, out: Installed, role: str = "node") -> None:
    """``prefix`` as a venv with slurm-heal installed (`pip_source`, with the ``role``'s
    dependencies: `pip_requirement`); a venv this call created is removed again when the
    install fails (no half-made venv is left)."""
    python = prefix / "bin" / "python"
    if source is None and Path(sys.prefix).resolve() == prefix.resolve():
        out.say(f"slurm-heal {__version__} runs from {prefix} already: nothing to pip-install")
        return
    what = pip_requirement(pip_source(source), role)  # refused before anything is made
    fresh = not prefix.exists() or (prefix.is_dir() and not any(prefix.iterdir()))
    try:
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(prefix)], f"python3 -m venv {prefix}")
            out.say(f"created the virtual environment {prefix}")
        _pip_install(python, what, role, prefix, out)
        if not (prefix / "bin" / "slurm-heal").exists():
            raise HealError(f"pip installed {what} but {prefix}/bin/slurm-heal is missing")
    except HealError as exc:
        if fresh and prefix.is_dir():
            shutil.rmtree(prefix, ignore_errors=True)
            raise HealError(f"{exc}; the half-made {prefix} was removed") from None
        raise
    out.say(f"installed slurm-heal ({what}) into {prefix}")


def _pip_install(python: Path, what: str, role: str, prefix: Path, out: Installed) -> None:
    """pip-install ``what`` into the venv of ``python``. On a node (issue 38) PyYAML, which
    ClusterShell requires and the node never imports, is built from its source as pure
    Python (``PYYAML_FORCE_LIBYAML=0 --no-binary pyyaml``: 3 MB of dependencies where its
    wheel alone is 3.2 MB), as the README's node line does; where that build cannot be
    had (a mirror with wheels only: it needs PyYAML's sdist, setuptools and Cython) the
    wheel is installed instead, and said."""
    argv = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--upgrade", what]
    if role == "node":
        try:
            # pip's wheel cache may hold a PyYAML built with LibYAML from the same sdist
            _run(argv[:-1] + ["--no-binary", "pyyaml", "--no-cache-dir", what],
                 f"pip install {what} (PyYAML pure Python) into {prefix}",
                 env=dict(os.environ, PYYAML_FORCE_LIBYAML="0"))
            return
        except HealError as exc:
            out.say(f"the install with PyYAML as pure Python failed ({exc}); trying again "
                    "with PyYAML's wheel (2.7 MB more; the node never imports PyYAML)")
    _run(argv, f"pip install {what} into {prefix}")


def program(prefix: Path, venv: bool) -> Path:
    """The slurm-heal program the glue, the unit and the printed commands name (issue
    36 item 3): ``PREFIX/bin/slurm-heal`` of the venv; with ``--no-venv`` that one when
    it is there, else the running installation's own console script."""
    own = prefix / "bin" / "slurm-heal"
    if venv or os.access(own, os.X_OK):
        return own
    import sysconfig

    for scripts in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        found = scripts / "slurm-heal"
        if os.access(found, os.X_OK):
            return found.absolute()
    raise ConfigError(f"--no-venv: there is no slurm-heal program at {own} nor beside the "
                      f"running Python ({sys.executable}); install without --no-venv, or "
                      f"give the --prefix of the venv slurm-heal is in")


def reboot_timeout(config: Path) -> tuple[float | None, str]:
    """The ``slurm`` provider's reboot timeout in ``config`` (for the ResumeTimeout
    warning, SPEC I7); None when the file is not there or reboots elsewhere."""
    from slurm_heal.config import load_policy
    from slurm_heal.siteconf import reboot_timeout_of

    try:
        return reboot_timeout_of(load_policy(config).provider, str(config))
    except (OSError, HealError, ImportError):  # ImportError: a node install (issue 38)
        return None, ""


def site_plan(prefix: Path, conf: Path, bindir: Path | None, config: Path) -> SitePlan:
    """The slurm.conf lines merged with the live configuration (`slurm_heal.siteconf`)."""
    from slurm_heal.siteconf import plan, read_live

    live, source = read_live(conf, bindir)
    timeout, why = reboot_timeout(config) if config.is_file() else (None, "")
    if timeout is None and not config.is_file() and live and live.get("RebootProgram"):
        # A node has no controller config to say how long a reboot may take; the site
        # reboots through Slurm (RebootProgram set), so ResumeTimeout is measured
        # against the slurm provider's default (SPEC I7).
        from slurm_heal.providers.base import SLURM_REBOOT_TIMEOUT

        timeout = SLURM_REBOOT_TIMEOUT
        why = ("the slurm provider's default timeout; this host has no controller "
               f"config {config}")
    return plan(live, prefix, source=source, reboot_timeout=timeout, reboot_source=why)


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
    if not venv:
        out.program = program(prefix, venv)  # refused before anything is written
    else:
        make_venv(prefix, source, out, role)
        out.program = program(prefix, venv)
    prog = out.program
    share = prefix / "share" / "slurm-heal"
    share.mkdir(parents=True, exist_ok=True)
    if role == "controller":
        if not config.exists():
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(STARTER_CONFIG.format(config=config, slurm_conf=conf))
            out.say(f"wrote a starter config {config} (recommend-only; edit, then "
                    f"`{prog} policy check {config}`)")
        else:
            out.say(f"kept the existing config {config}")
        out.config = config
    # SPEC I7: the slurm.conf lines merged with what the site runs (read live)
    out.site = site_plan(prefix, conf, bindir, config if role == "controller"
                         else DEFAULT_CONFIG)
    if role == "node":
        lib = prefix / "libexec"
        lib.mkdir(parents=True, exist_ok=True)
        for name in GLUE:
            target = lib / name
            # Atomic: slurmd may be running the old one right now.
            fsio.atomic_write(target, wrapper(name, prefix, conf, env or {}, bindir, prog),
                              0o755)
            out.say(f"wrote {target} (SLURM_CONF={conf}, Slurm commands from "
                    f"{bindir or 'the system PATH'})")
        from slurm_heal.siteconf import site_wrapper

        for hook, site in out.site.wrap.items():
            target = lib / f"slurm-heal-site-{hook}"
            fsio.atomic_write(target, site_wrapper(hook, site, lib / f"slurm-heal-{hook}"),
                              0o755)
            out.say(f"wrote {target}: runs the site's {site} first, then slurm-heal's")
        (share / "nhc").mkdir(exist_ok=True)
        fsio.atomic_write(share / "nhc" / "slurm_heal.nhc", nhc_plugin(prog, conf, bindir))
        out.say(f"wrote {share / 'nhc' / 'slurm_heal.nhc'} (for sites running NHC: "
                f"SLURM_HEAL_BIN={prog}, SLURM_CONF={conf} written in)")
    out.snippet = share / "slurm.conf.snippet"
    out.snippet.write_text(out.site.snippet())
    out.say(f"wrote {out.snippet}: merge these lines into slurm.conf as each says (a "
            "'merge' line REPLACES the site's line of that key, keeping its setting), then "
            "`scontrol reconfigure`")
    if role == "controller":
        unit = share / "slurm-heal.service"
        path = f"Environment=PATH={bindir}:{SYSTEM_PATH}\n" if bindir is not None else ""
        unit.write_text(controller_unit(str(prog), config, str(conf), path))
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
    if os.access(link.parent, os.W_OK) and prefix == DEFAULT_PREFIX and venv \
            and not link.exists():
        # documented (README, docs/cli.md): the admin commands on root's PATH
        link.symlink_to(prog)
        out.say(f"linked {link} -> {prog} (remove the link to undo)")
    if shutil.which("slurm-heal") is None:
        out.say(f"the admin commands are {prog} (add {prog.parent} to PATH)")
    return out
