"""`slurm-heal machines [MACHINE|NODE] [--limit N] [--json]`: the machines and their
ledgers, worst first (SPEC E7): faults seen, remediations by action and outcome, days in
service, first and last seen, the names each has had, and whether E7 holds its automatic
work (a lemon). With MACHINE (an id, or a node name) one machine's whole ledger."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click

from slurm_heal import isotime
from slurm_heal.commands.admin import _emit_json, _location, _store, _table, _ts, state_options
from slurm_heal.commands.jsonmode import json_option


def _lemon(config: str | None) -> Any:
    """The policy's ``escalation.lemon`` (the defaults without a config file)."""
    from slurm_heal.config import Lemon, load_policy
    from slurm_heal.location import config_path

    path = config_path(config)
    return load_policy(path).escalation.lemon if path is not None else Lemon()


def _time(text: str) -> str:
    return _ts(isotime.parse(text))


@click.command()
@click.argument("target", required=False, metavar="[MACHINE|NODE]")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Show only the worst N machines.")
@state_options
@json_option
def machines(target: str | None, limit: int | None, state_dir: str | None,
             config: str | None, as_json: bool) -> None:
    """The machines under the nodes, worst first, with their ledgers (SPEC E7)."""
    from slurm_heal.readmodel import machines as view

    loc = _location(state_dir, config)
    lemon = _lemon(config)
    now = datetime.now(timezone.utc)
    state = _store(state_dir, config).load()
    if target is not None:
        got = view.machine(loc.state_dir, state, now, lemon, target)
        if as_json:
            _emit_json(got)
            return
        _print_one(got["machine"], got["lemon"])
        return
    got = view.machines(loc.state_dir, state, now, lemon, limit)
    if as_json:
        _emit_json(got)
        return
    lem = got["lemon"]
    rule = (f"E7: {lem['remediations']} remediations within {lem['window']} make a lemon"
            if lem["enabled"] else "E7 is off (escalation.lemon.enabled = false)")
    if not got["machines"]:
        click.echo(f"No machine in the ledger yet ({rule}).")
        return
    click.echo(f"{got['total']} machine(s), {got['lemons']} lemon(s); {rule}.")
    _table([[m["id"], m["name"], "LEMON" if m["lemon"] else "",
             str(m["acted_in_window"]), str(m["acted_total"]), str(m["faults_total"]),
             f"{m['days_in_service']}", _time(m["last_seen"]),
             ",".join(n["name"] for n in m["names"])] for m in got["machines"]],
           ["MACHINE", "NODE", "", f"IN {lem['window']}", "REMEDIATIONS", "FAULTS", "DAYS",
            "LAST SEEN", "NAMES"])


def _print_one(m: dict[str, Any], lem: dict[str, Any]) -> None:
    click.echo(f"Machine {m['id']} ({m['kind']})" + ("  LEMON (SPEC E7)" if m["lemon"] else ""))
    if m["gpu_serials"]:
        click.echo(f"  GPU serials: {', '.join(m['gpu_serials'])}")
    if m["instance_id"]:
        click.echo(f"  instance id: {m['instance_id']}")
    click.echo(f"  first seen {_time(m['first_seen'])}, last seen {_time(m['last_seen'])}, "
               f"{m['days_in_service']} days in service")
    click.echo("  names: " + ", ".join(
        f"{n['name']} ({_time(n['first'])} .. {_time(n['last'])})" for n in m["names"]))
    if m["moved_off"]:
        click.echo(f"  a migrate moved {m['moved_off']} to other hardware")
    click.echo(f"  remediations acted within {lem['window']}: {m['acted_in_window']} "
               f"(E7 limit {lem['remediations']}); all: {m['acted_total']}")
    for action, outs in m["remediations"].items():
        click.echo(f"    {action}: " + ", ".join(f"{o} {n}" for o, n in outs.items()))
    click.echo(f"  faults seen: {m['faults_total']}")
    for fault, f in m["faults"].items():
        click.echo(f"    {fault} x{f['count']} ({_time(f['first'])} .. {_time(f['last'])})")
    for e in m["recent"]:
        click.echo(f"  {_time(e['ended'])}  {e['action']:<8} {e['outcome']:<9} {e['fault']} "
                   f"on {e['node']} ({e['remediation']})")
