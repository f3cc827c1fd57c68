"""`slurm-heal install-node` / `install-controller`: the documented site install
(`slurm_heal.install`): a venv under a prefix (default /opt/slurm-heal) and the glue."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_heal.location import DEFAULT_CONFIG


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
                     help="What pip installs (default: this source checkout, else "
                          "slurm-heal==VERSION)."),
        click.option("--no-venv", is_flag=True,
                     help="Write the glue and files only (the venv is already there)."),
    ]):
        func = option(func)
    return func


def _report(done: object) -> None:
    for line in getattr(done, "lines", []):
        click.echo(line)


@click.command("install-node")
@_options
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the glue (repeatable); ${NAME} expands when slurmd "
                   "runs it, e.g. SLURM_HEAL_ROOT=/srv/replay/${SLURMD_NODENAME}.")
def install_node(prefix: Path, slurm_conf: str | None, slurm_bin: str | None,
                 source: str | None, no_venv: bool, env: tuple[str, ...]) -> None:
    """Install slurm-heal on a node: the venv, and the HealthCheckProgram, Prolog and
    Epilog wrappers at PREFIX/libexec/ with SLURM_CONF and the Slurm command directory
    carried in (SPEC I1)."""
    from slurm_heal.install import install, parse_env

    done = install(prefix, "node", slurm_conf=slurm_conf, source=source,
                   env=parse_env(env), venv=not no_venv, slurm_bin=slurm_bin)
    _report(done)
    if done.snippet is not None:
        click.echo("")
        click.echo(f"# slurm.conf ({done.snippet}):")
        click.echo(done.snippet.read_text().rstrip())


@click.command("install-controller")
@_options
@click.option("--config", type=click.Path(path_type=Path), default=str(DEFAULT_CONFIG),
              show_default=True, help="Where the daemon's config goes (kept when present).")
def install_controller(prefix: Path, slurm_conf: str | None, slurm_bin: str | None,
                       source: str | None, no_venv: bool, config: Path) -> None:
    """Install slurm-heal on the controller host (next to slurmctld): the venv, a starter
    config (recommend-only) and the systemd unit for the daemon."""
    from slurm_heal.install import install

    _report(install(prefix, "controller", slurm_conf=slurm_conf, source=source,
                    config=config, venv=not no_venv, slurm_bin=slurm_bin))
