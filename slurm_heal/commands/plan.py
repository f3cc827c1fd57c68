"""`slurm-heal plan [--config FILE]`: what the controller would do now (a dry run)."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from slurm_heal.commands.admin import _emit_json, _slurm, _store
from slurm_heal.commands.jsonmode import json_option


@click.command()
@click.option("--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="The daemon's TOML config (policy, [controller], [provider]; default: "
                   "$SLURM_HEAL_CONFIG, else /etc/slurm-heal/heal.toml), as for `daemon`.")
@click.option("--state-dir", default=None, help="The store directory (default: as the daemon).")
@json_option
def plan(config_path: str | None, state_dir: str | None, as_json: bool) -> None:
    """Read the cluster and the store, decide under the policy, and print the plan.

    Nothing is written and nothing is executed: the same `decide()` the daemon runs,
    on the same inputs, so an operator sees each step's rule and why before it happens.
    """
    from slurm_heal import catalog
    from slurm_heal.config import load_policy
    from slurm_heal.errors import ConfigError
    from slurm_heal.location import DEFAULT_CONFIG, ENV_CONFIG
    from slurm_heal.location import config_path as find_config
    from slurm_heal.policy import decide

    found = find_config(config_path)  # the daemon's config, found as the daemon finds it
    if found is None:
        raise ConfigError(f"no config file: pass --config FILE, set ${ENV_CONFIG}, or write "
                          f"{DEFAULT_CONFIG}")
    config_path = str(found)
    policy = load_policy(config_path)
    store = _store(state_dir, config_path)
    client = _slurm(config_path)
    view = client.snapshot()
    now = datetime.now(timezone.utc)
    # SPEC S7: the topology the daemon would read (Slurm's, the file, the features)
    from slurm_heal.topology import TopologyReader

    view = TopologyReader(client).attach(view, policy.topology, now)
    result = decide(view, store.load(), now, policy, catalog=catalog.load())
    if as_json:
        _emit_json({
            "at": now.isoformat(),
            "records": [r.model_dump(mode="json") for r in result.records],
            "effects": [e.model_dump(mode="json") for e in result.effects],
            "next_wake": result.next_wake.isoformat() if result.next_wake else None,
        })
        return
    if not result.records and not result.effects:
        click.echo("nothing to do")
    for r in result.records:
        click.echo(f"{r.node:<10} {r.phase:<10} {r.action.value:<8} [{r.rule}] {r.why}")
    for e in result.effects:
        click.echo(f"{e.node:<10} would {e.kind}"
                   + (f" {e.action.value}" if e.action.value != "none" else "")
                   + (f" (key {e.key})" if e.key else ""))
