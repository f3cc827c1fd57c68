"""`slurm-heal simulate SCENARIO.json [--json]`: what would my policy do? (docs/simulate.md)"""

from __future__ import annotations

import json

import click

from slurm_heal.commands.jsonmode import json_option
from slurm_heal.errors import ScenarioError


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@json_option(help="JSON lines: one decision record per line (docs/cli.md); an error is one "
             "JSON object {\"error\": ...} on stdout.")
def simulate(scenario: str, as_json: bool) -> None:
    """Run SCENARIO (JSON) on virtual time through the real decision engine."""
    from slurm_heal.simulation import load_scenario, record_json
    from slurm_heal.simulation import simulate as run

    sc = load_scenario(scenario)
    result = run(sc)
    if result.violations:
        raise ScenarioError("the simulation broke an invariant: " + "; ".join(result.violations))
    for d in result.records:
        rec = record_json(d)
        if as_json:
            click.echo(json.dumps(rec, sort_keys=False))
            continue
        offset = d.at - sc.start
        hours, rest = divmod(int(offset.total_seconds()), 3600)
        click.echo(f"{rec['at']}  +{hours:>3}h{rest // 60:02d}m  {d.node:<8} "
                   f"{(d.remediation or '-'):<14} {rec['action']:<8} {d.phase:<10} "
                   f"[{d.rule}] {d.why}")
