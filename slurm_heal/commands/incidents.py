"""`slurm-heal incidents` and `slurm-heal incident close` (SPEC S7, I4): the incidents on
shared components (a switch, a block, a rack) and a person's close of one. Like every
write, the close is a command in the store's inbox that the controller consumes at its
next cycle; the remediations the incident held then go on by their own rules."""

from __future__ import annotations

from datetime import timezone

import click

from slurm_heal import operations
from slurm_heal.commands.admin import (
    _default_by,
    _emit_json,
    _queue,
    _reason_length,
    _store,
    _ts,
    by_option,
    force_option,
    state_options,
)
from slurm_heal.commands.jsonmode import json_option
from slurm_heal.errors import NotFound
from slurm_heal.readmodel import incidents as views


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Include every ended incident kept.")
@state_options
@json_option
def incidents(show_all: bool, state_dir: str | None, config: str | None,
              as_json: bool) -> None:
    """The incidents (SPEC S7): related alerts on several nodes under one switch, block or
    rack, held as one cause for a person. Open ones and those ended in the last day."""
    from datetime import datetime

    state = _store(state_dir, config).load()
    now = datetime.now(timezone.utc)
    shown = (tuple(views.view(state, i) for i in views.incidents_of(state)) if show_all
             else views.shown(state, now))
    bad = views.unreadable(state)
    if as_json:
        _emit_json({"incidents": [v.model_dump(mode="json") for v in shown],
                    "unreadable": bad})
        return
    for why in bad:  # SPEC O6: never dropped without a word
        click.echo(f"UNREADABLE incident in the store, skipped: {why}", err=True)
    if not shown:
        click.echo("No incidents" + ("" if show_all else " open or ended in the last day")
                   + ".")
        return
    for v in shown:
        click.echo(("INCIDENT " if v.state == "open" else "ended ") + v.words)
        click.echo(f"  why: {v.why}")
        for a in v.alerts:
            click.echo(f"  {a.node}: {a.fault} since {_ts(a.first_seen)}"
                       + (f": {a.summary}" if a.summary else ""))
        if v.held:
            click.echo(f"  held: {', '.join(v.held)}")
        if v.state == "open":
            click.echo(f"  close it: {v.close}")
        elif v.resolution:
            click.echo(f"  ended: {v.resolution}")


@click.group()
def incident() -> None:
    """Act on one incident (SPEC S7)."""


@incident.command("close")
@click.argument("target", metavar="ID|COMPONENT")
@click.option("--reason", callback=_reason_length, default="",
              help="Why (kept with the incident and in the audit record).")
@by_option
@force_option
@state_options
@json_option
def close(target: str, reason: str, by: str | None, force: bool, state_dir: str | None,
          config: str | None, as_json: bool) -> None:
    """Close an open incident (by its id, or its component such as switch:leaf1): the
    remediations it held go on by their own rules at the controller's next cycle."""
    state = _store(state_dir, config).load()
    inc = views.find(state, target)
    if inc is None or not inc.open:
        known = ", ".join(f"{i.id} ({i.component})" for i in views.incidents_of(state)
                          if i.open) or "none"
        raise NotFound(f"no open incident {target!r} (open: {known})")
    cmd = operations.new_command("close_incident", by or _default_by(), reason=reason.strip(),
                                 incident=inc.id, channel="cli")
    _queue(state_dir, config, cmd, as_json, force)
