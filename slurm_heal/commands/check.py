"""`slurm-heal check`: the node health check (SPEC D1-D4, I1, I2).

The implementation lives in `slurm_heal.checks.fastcli`, which also serves the fast
entry point ``python -m slurm_heal.checks`` (no click import); this click command only
maps options onto it so the check shows up in ``slurm-heal --help``.
"""

from __future__ import annotations

import click

from slurm_heal.checks import fastcli
from slurm_heal.commands.jsonmode import json_option


@click.command("check")
@click.option("--mode", type=click.Choice(["healthcheck", "prolog", "epilog"]),
              default="healthcheck", show_default=True,
              help="prolog: fail only for faults that make the node unusable; "
                   "epilog: fast checks, always exit 0.")
@json_option(help="Print the findings as one JSON list (docs/cli.md); an error is one "
             "JSON object {\"error\": ...} on stdout.")
@click.option("--dry-run", is_flag=True, help="Write nothing to Slurm.")
@click.option("--publish", is_flag=True,
              help="Write the findings and the check time into Extra now, changed or not "
                   "(after a repair; otherwise only changes and the heartbeat are written).")
@click.option("--check-config", "--config", "config_file", metavar="FILE", default=None,
              help="The node check's configuration, check.toml (default "
                   "/etc/slurm-heal/check.toml if present); --config is the old spelling, "
                   "kept for one release.")
@click.option("--node", metavar="NAME", default=None,
              help="Node name (default $SLURMD_NODENAME, else the short host name).")
@click.pass_context
def check(ctx: click.Context, mode: str, as_json: bool, dry_run: bool, publish: bool,
          config_file: str | None, node: str | None) -> None:
    """Run the node health checks; publish alerts and drain for critical faults.

    Exit status: 0 healthy, 1 findings (prolog: only faults that make the node
    unusable; epilog: always 0), 2 usage or configuration error, 3 Slurm error,
    10 a detector failed and nothing was found.
    """
    ctx.exit(fastcli.run(mode, as_json, dry_run, config_file, node, publish=publish))
