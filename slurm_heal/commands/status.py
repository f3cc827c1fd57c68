"""`slurm-heal status [--json] [--node NODES] [--check]`: the cluster at a glance (SPEC
I4, O1, O2, S5, D5); gathering is `slurm_heal.readmodel.overview.gather`, rendering `overview.render`.

``--json`` also carries ``node_status``, for each node: Slurm's state flags; the reason, classified as ours (our cordon marker,
parsed), a request (``heal-request:``), or foreign (someone else's, shown as such); and
the active alerts the node side published in ``Extra``. With no cluster reachable the
Slurm adapter raises SlurmUnreachable and `slurm_heal.cli` prints one line and exits 3.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import click

from slurm_heal.commands.hostlists import expand_hosts
from slurm_heal.commands.jsonmode import json_option
from slurm_heal.types import NodeInfo


def _line(entry: dict[str, Any]) -> str:
    text = f"{entry['name']:<12} {'+'.join(entry['states']):<28}"
    reason = entry["reason"]
    if reason:
        label = {"ours": "heal", "request": "request", "foreign": "foreign"}[reason["kind"]]
        text += f" [{label}] {reason['text']}"
        if reason.get("user"):
            text += f" ({reason['user']})"
    for alert in entry["alerts"]:
        text += f"\n{'':<12} alert {alert['severity']} {alert['fault']}: {alert['summary']}"
    for alert in entry.get("acknowledged", ()):
        text += f"\n{'':<12} acknowledged by a person's resume {alert['fault']} (SPEC S8)"
    return text


@click.command()
@json_option(help="Machine-readable output (one JSON object; errors too).")
@click.option("--node", "nodes", multiple=True, metavar="NODES",
              help="Details of these nodes (a host list, e.g. gpu[01-04]; repeatable; "
                   "'all' for every node).")
@click.option("--check", "check_only", is_flag=True,
              help="Exit 1 when the controller is not seen, stale or failing (for cron and "
                   "monitoring); the first line says why.")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              help="The cluster's slurm.conf (default: the config's [controller] "
                   "slurm_conf, else $SLURM_CONF, else /etc/slurm/slurm.conf), as for "
                   "every admin command.")
@click.option("--backend", type=click.Choice(["auto", "cli", "pyslurm", "rest"]),
              default="auto", show_default=True,
              help="How to talk to Slurm (SPEC I3); rest reads SLURM_HEAL_REST_URL and "
                   "SLURM_HEAL_REST_TOKEN_FILE.")
@click.option("--timeout", type=float, default=20.0, show_default=True,
              help="Seconds to wait for Slurm.")
@click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
              help="The controller's TOML config (its [controller] state_dir; default: "
                   "$SLURM_HEAL_CONFIG, else /etc/slurm-heal/heal.toml when it exists).")
@click.option("--state-dir", "state_dir", type=click.Path(file_okay=False), default=None,
              help="The store directory (default: $SLURM_HEAL_STATE_DIR, else beside "
                   "slurmctld's StateSaveLocation).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, nodes: tuple[str, ...], check_only: bool,
           slurm_conf: str | None, backend: str, timeout: float, config: str | None,
           state_dir: str | None) -> None:
    """The cluster at a glance (SPEC I4, O1, O2, S5): the controller (running, failing,
    stale or not seen; paused by whom and why), the breaker, node counts by category
    with folded host lists, approvals waiting, remediations in flight, and nodes out of
    service for reasons not ours, oldest first. Exit 3 when Slurm does not answer (the
    store's part is still shown); with --check, 1 when the controller is not healthy."""
    from slurm_heal.config import load_policy
    from slurm_heal.errors import SlurmError
    from slurm_heal.location import config_path, locate
    from slurm_heal.operations import slurm_client
    from slurm_heal.readmodel import overview
    from slurm_heal.store import Store

    wanted = expand_hosts(nodes)
    obj = ctx.find_object(dict)  # embedding/tests: {"slurm": client}, as the admin commands
    loc = locate(state_dir, config, slurm_conf)
    cfg = config_path(config)
    policy = load_policy(cfg) if cfg is not None else None
    state = Store(loc.state_dir).load()
    now = datetime.now(timezone.utc)
    infos: list[NodeInfo] | None
    slurm_error = None
    try:
        # the slurm.conf every admin command uses: --slurm-conf, the config's
        # [controller] slurm_conf, $SLURM_CONF, Slurm's default (issue 36 item 5)
        client = (obj or {}).get("slurm") or slurm_client(
            loc.controller, slurm_conf=slurm_conf, backend=backend, timeout=timeout)
        infos = sorted(client.nodes(), key=lambda n: n.name)
    except SlurmError as exc:
        infos, slurm_error = None, str(exc)
    ov = overview.gather(state, infos, now, heartbeat=loc.heartbeat_record(),
                         store=loc.describe(), policy=policy, slurm_error=slurm_error,
                         details=wanted, all_details="all" in nodes)
    if as_json:  # what GET /api/v1/status answers too (one shape, overview.as_json)
        click.echo(json.dumps(overview.as_json(ov, loc.as_json(), infos, now), indent=2))
    else:
        click.echo(f"slurm-heal: store {loc.describe()}", err=True)
        for line in overview.render(ov):
            click.echo(line)
    if slurm_error is not None:
        ctx.exit(3)
    if check_only and not ov.ok:
        ctx.exit(1)


