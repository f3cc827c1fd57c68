"""`slurm-heal daemon --config FILE`: the controller next to slurmctld."""

from __future__ import annotations

import logging
from pathlib import Path

import click


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The operator's TOML config: policy, [controller], [provider].")
@click.option("--once", is_flag=True, help="Run one cycle and exit (cron-style).")
@click.option("--cycles", type=int, default=None, help="Stop after this many cycles.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def daemon(config_path: str, once: bool, cycles: int | None, log_level: str) -> None:
    """Run the remediation controller (SPEC L1-L5, Q1-Q4, D5, S6, I3, I5).

    Each cycle reads the clock once, reads the cluster, decides under the policy,
    records what it is about to do, does it, and records the outcome. SIGTERM stops
    cleanly between steps; a heartbeat file is written after every cycle.
    """
    from slurm_heal.config import load_policy
    from slurm_heal.controller import (
        Controller,
        LeaderLock,
        Notifier,
        controller_settings,
        run_forever,
    )
    from slurm_heal.providers import make_provider
    from slurm_heal.slurm import make_client
    from slurm_heal.store import Store, default_state_dir

    logging.basicConfig(level=getattr(logging, log_level),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    policy = load_policy(config_path)
    settings = controller_settings(dict(policy.controller), source=config_path)
    slurm = make_client(backend=settings.slurm_backend, slurm_conf=settings.slurm_conf,
                        rest_url=settings.slurm_rest_url,
                        rest_token_file=settings.slurm_rest_token_file)
    state_dir = Path(settings.state_dir) if settings.state_dir else Path(
        default_state_dir(settings.slurm_conf))
    state_dir.mkdir(parents=True, exist_ok=True)
    provider = make_provider(dict(policy.provider), slurm=slurm, state_dir=state_dir / "provider")
    store = Store(state_dir / "state.json")
    notify = Path(settings.notify_file) if settings.notify_file else state_dir / "notifications.jsonl"
    controller = Controller(slurm=slurm, provider=provider, store=store, policy=policy,
                            notifier=Notifier(notify))
    heartbeat = Path(settings.heartbeat) if settings.heartbeat else state_dir / "heartbeat"
    logging.getLogger("slurm_heal").info(
        "daemon starting: state_dir=%s provider=%s interval=%ss", state_dir,
        getattr(provider, "name", "?"), settings.interval)
    leader = LeaderLock(state_dir)
    try:
        run_forever(controller, settings.interval, heartbeat,
                    max_cycles=1 if once else cycles, leader=leader)
    finally:
        leader.release()
