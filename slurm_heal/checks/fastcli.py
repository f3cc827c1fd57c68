"""`slurm-heal check` without click: the fast entry point (``python -m slurm_heal.checks``).

The click command in `slurm_heal.commands.check` shares everything here; this path
exists because the check runs on every node every few minutes and in every job's
epilog, where click's import time (~40 ms) is a large part of the budget.

Exit statuses: 0 healthy, 1 findings (prolog: only faults that make the node unusable;
epilog: always 0), 2 usage or configuration error, 3 Slurm error (the findings were
still printed and the state saved), 10 a detector failed and nothing was found.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn, TextIO

from slurm_heal.checks import config, paths, runner
from slurm_heal.errors import ConfigError, HealError, SlurmError, exit_code_for

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "WARNING", "info": "info"}


def render_text(result: runner.CheckResult, out: TextIO) -> None:
    """Plain-language report of a check run."""
    if not result.findings:
        out.write(f"{result.node}: healthy\n")
    else:
        n = len(result.findings)
        out.write(f"{result.node}: {n} finding{'s' if n != 1 else ''}\n")
        for f in result.findings:
            out.write(f"  {SEVERITY_LABEL[f.severity.value]:8} {f.fault}: {f.summary}\n")
            for e in f.evidence[:2]:
                when = f" [{e.at}]" if e.at else ""
                out.write(f"           evidence{when}: {e.text[:200]}\n")
    for ack in result.acknowledged:
        out.write(f"  acknowledged {ack.fault}: {ack.summary} (a person resumed the node; "
                  "not drained again for it, SPEC S8)\n")
    for s in result.statuses:
        if s.status not in ("ok", "skipped") or (s.status == "ok" and s.message):
            out.write(f"  detector {s.name}: {s.status}{': ' + s.message if s.message else ''}\n")
    for a in result.actions:
        out.write(f"  -> {a}\n")
    for n_ in result.notes:
        out.write(f"  (note) {n_}\n")


def render_json(result: runner.CheckResult, out: TextIO) -> None:
    """The findings as a JSON list (fault, severity, summary, evidence, detector, node)."""
    json.dump([f.to_json() for f in result.findings], out, indent=2)
    out.write("\n")


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are JSON too when --json was asked for."""

    as_json = False

    def error(self, message: str) -> NoReturn:
        if self.as_json:
            error(message, "UsageError", runner.EXIT_USAGE, True, sys.stdout, sys.stderr)
            sys.exit(runner.EXIT_USAGE)
        super().error(message)


def parser() -> _Parser:
    p = _Parser(
        prog="slurm-heal check",
        description="Run the node health checks, publish alerts in the node's Extra and "
                    "drain the node for faults that need it (SPEC D1-D4, I1, I2).")
    p.add_argument("--mode", choices=config.MODES[:3], default="healthcheck",
                   help="healthcheck (default), prolog or epilog")
    p.add_argument("--json", action="store_true", help="print findings as a JSON list")
    p.add_argument("--dry-run", action="store_true", help="write nothing to Slurm")
    p.add_argument("--check-config", "--config", dest="config", metavar="FILE", default=None,
                   help=f"the node check's configuration (default {paths.CONFIG_FILE} if "
                        "present); --config is the old spelling, kept for one release")
    p.add_argument("--node", metavar="NAME", default=None,
                   help="node name (default $SLURMD_NODENAME, else the short host name)")
    return p


def error(message: str, kind: str, code: int, as_json: bool, out: TextIO,
          err: TextIO) -> int:
    """An error as the CLI prints every error (`slurm_heal.cli._fail`): one line on
    stderr, or with --json one object ``{"error": {"message", "kind", "exit"}}`` on
    stdout. Returns ``code``."""
    if as_json:
        out.write(json.dumps({"error": {"message": message, "kind": kind, "exit": code}}) + "\n")
    else:
        err.write(f"slurm-heal: error: {message}\n")
    return code


def run(mode: str, as_json: bool, dry_run: bool, config_file: str | None,
        node: str | None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a check and print it; return the exit status. Shared with the click command."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        cfg = config.load_config(config_file)
    except ConfigError as exc:
        return error(str(exc), type(exc).__name__, runner.EXIT_USAGE, as_json, out, err)
    name = runner.node_name(node)
    try:
        result = runner.run_check(cfg, node_name=name, mode=mode, dry_run=dry_run)
    except SlurmError as exc:
        return error(f"publishing to Slurm failed: {exc}", type(exc).__name__,
                     runner.EXIT_SLURM, as_json, out, err)
    except HealError as exc:
        return error(str(exc), type(exc).__name__, exit_code_for(exc), as_json, out, err)
    if as_json:
        render_json(result, out)
        for s in result.statuses:
            if s.status in ("error", "timeout"):
                err.write(f"slurm-heal: detector {s.name}: {s.status}: {s.message}\n")
    else:
        render_text(result, out)
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    """``slurm-heal check`` argv (without "check") -> exit status."""
    p = parser()
    p.as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    args = p.parse_args(argv)
    return run(args.mode, args.json, args.dry_run, args.config, args.node)
