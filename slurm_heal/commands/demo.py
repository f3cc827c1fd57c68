"""`slurm-heal demo`: the main job on its embedded default."""

from __future__ import annotations

import sys

import click

from slurm_heal.commands.jsonmode import json_option


@click.command()
@click.option("--job-seconds", default=6.0, show_default=True,
              help="How long the job on the faulty node still runs.")
@click.option("--lab", is_flag=True,
              help="Run on the loopback Slurm lab (real slurmctld/slurmd; root, Slurm installed).")
@json_option(help="JSON lines: one object per step {\"t\", \"node\", \"text\"}, then "
                  "{\"result\": {\"ok\", \"exit\", \"remediation\", ...}} (docs/cli.md).")
def demo(job_seconds: float, lab: bool, as_json: bool) -> None:
    """A simulated cluster goes through fault -> remediation -> resume, narrated.

    Starts the provider simulator (HTTP on 127.0.0.1) and an in-process simulated Slurm
    cluster, injects an Xid 119 on a node running a job, and runs the real node check,
    engine, store and controller against them. Needs no Slurm; exits 0 when the node
    is repaired and back in service.
    """
    from slurm_heal.demo import run_demo

    code = run_demo(sys.stdout, job_seconds=job_seconds, deadline=120.0 if lab else 55.0,
                    lab=lab, as_json=as_json)
    if code:
        raise SystemExit(code)
