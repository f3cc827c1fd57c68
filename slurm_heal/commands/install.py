"""`slurm-heal install-node` / `install-controller`: the documented site install
(`slurm_heal.install`): a venv under a prefix (default /opt/slurm-heal) and the glue."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurm_heal.commands.jsonmode import emit_line, json_option
from slurm_heal.location import DEFAULT_CONFIG

if TYPE_CHECKING:
    from slurm_heal.install import Installed


def _options(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed([
        click.option("--prefix", type=click.Path(path_type=Path), default="/opt/slurm-heal",
                     show_default=True, help="The virtual environment slurm-heal goes into."),
        click.option("--slurm-conf", default=None, metavar="FILE",
                     help="The cluster's slurm.conf, carried into the glue (default: "
                          "$SLURM_CONF, else /etc/slurm/slurm.conf)."),
        click.option("--slurm-bin", default=None, metavar="DIR",
                     help="The directory of the site's Slurm commands (scontrol, sinfo), "
                          "put first on the glue's and the daemon unit's PATH (default: "
                          "where `scontrol` on PATH is)."),
        click.option("--source", default=None, metavar="PIP_SPEC",
                     help="What pip installs (default: this source checkout, else the "
                          "wheel, sdist or directory the running slurm-heal was installed "
                          "from)."),
        click.option("--no-venv", is_flag=True,
                     help="Write the glue and files only (the venv is already there)."),
    ]):
        func = option(func)
    return func


def _report(done: Installed, role: str, as_json: bool) -> None:
    """What the install did: its lines and the slurm.conf lines merged with the site's
    (SPEC I7), or one JSON object ``{"role", "prefix", "program", "lines", "snippet_file",
    "snippet", "slurm_conf", "config", "slurm_bin"}``."""
    site = done.site
    if as_json:
        emit_line({"role": role, "prefix": str(done.prefix),
                   "program": str(done.program) if done.program else None,
                   "lines": done.lines,
                   "snippet_file": str(done.snippet) if done.snippet else None,
                   "snippet": done.snippet.read_text() if done.snippet else None,
                   "slurm_conf": site.as_dict() if site else None,
                   "config": str(done.config) if done.config else None,
                   "slurm_bin": str(done.slurm_bin) if done.slurm_bin else None})
        return
    for line in done.lines:
        click.echo(line)
    if site is not None:
        click.echo("")
        click.echo(f"# slurm.conf, merged with {site.source} ({done.snippet}):")
        click.echo(site.snippet().rstrip())
        for warning in site.warnings:
            click.echo(f"warning: {warning}", err=True)


@click.command("install-node")
@_options
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the glue (repeatable); ${NAME} expands when slurmd "
                   "runs it, e.g. SLURM_HEAL_ROOT=/srv/replay/${SLURMD_NODENAME}.")
@json_option(help="Print one JSON object: what was done, the snippet (docs/cli.md).")
def install_node(prefix: Path, slurm_conf: str | None, slurm_bin: str | None,
                 source: str | None, no_venv: bool, env: tuple[str, ...],
                 as_json: bool) -> None:
    """Install slurm-heal on a node: the venv, and the HealthCheckProgram, Prolog and
    Epilog wrappers at PREFIX/libexec/ with SLURM_CONF and the Slurm command directory
    carried in (SPEC I1)."""
    from slurm_heal.install import install, parse_env

    done = install(prefix, "node", slurm_conf=slurm_conf, source=source,
                   env=parse_env(env), venv=not no_venv, slurm_bin=slurm_bin)
    _report(done, "node", as_json)


@click.command("install-controller")
@_options
@click.option("--config", type=click.Path(path_type=Path), default=str(DEFAULT_CONFIG),
              show_default=True, help="Where the daemon's config goes (kept when present).")
@json_option(help="Print one JSON object: what was done (docs/cli.md).")
def install_controller(prefix: Path, slurm_conf: str | None, slurm_bin: str | None,
                       source: str | None, no_venv: bool, config: Path,
                       as_json: bool) -> None:
    """Install slurm-heal on the controller host (next to slurmctld): the venv, a starter
    config (recommend-only) and the systemd unit for the daemon."""
    from slurm_heal.install import install

    _report(install(prefix, "controller", slurm_conf=slurm_conf, source=source,
                    config=config, venv=not no_venv, slurm_bin=slurm_bin),
            "controller", as_json)
