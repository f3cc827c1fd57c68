"""`slurm-heal agent`: the node checks as a long-running service (SPEC D1, I1).

See `slurm_heal.checks.agent`. Prints one line per check whose findings changed or
that changed something in Slurm (JSON lines with ``--json``); SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from datetime import datetime, timezone
from types import FrameType

import click

from slurm_heal.checks import agent as agent_mod
from slurm_heal.checks import config, fastcli, runner
from slurm_heal.commands.jsonmode import json_option


@click.command("agent")
@click.option("--interval", type=click.FloatRange(min=1.0), default=300.0, show_default=True,
              help="Seconds between full checks (the kernel log is followed in between).")
@json_option(help="JSON lines, one per changed check (docs/cli.md); an error is one JSON "
             "object {\"error\": ...} on stdout.")
@click.option("--dry-run", is_flag=True, help="Write nothing to Slurm.")
@click.option("--check-config", "--config", "config_file", metavar="FILE", default=None,
              help="The node check's configuration, check.toml (default "
                   "/etc/slurm-heal/check.toml if present); --config is the old spelling, "
                   "kept for one release.")
@click.option("--node", metavar="NAME", default=None,
              help="Node name (default $SLURMD_NODENAME, else the short host name).")
def agent(interval: float, as_json: bool, dry_run: bool, config_file: str | None,
          node: str | None) -> None:
    """Follow the kernel log and run the node checks continuously."""
    cfg = config.load_config(config_file)
    name = runner.node_name(node)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    last: list[tuple[str, ...]] = []

    def emit(result: runner.CheckResult) -> None:
        faults = tuple(sorted(f"{f.fault}|{f.summary}" for f in result.findings))
        if last and faults == last[0] and not result.actions:
            return
        last[:] = [faults]
        if as_json:
            line = {"at": datetime.now(timezone.utc).isoformat(), "node": result.node,
                    "findings": [f.to_json() for f in result.findings],
                    "actions": result.actions, "notes": result.notes}
            sys.stdout.write(json.dumps(line) + "\n")
        else:
            fastcli.render_text(result, sys.stdout)
        sys.stdout.flush()

    agent_mod.run_agent(cfg, node_name=name, interval=interval, dry_run=dry_run, emit=emit,
                        stop=stop)
