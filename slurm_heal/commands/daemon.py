"""`slurm-heal daemon --config FILE`: the controller next to slurmctld."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from slurm_heal.commands.jsonmode import journal_option, json_option, setup_logging


@click.command()
@click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
              help="The operator's TOML config: policy, [controller], [provider] (default: "
                   "$SLURM_HEAL_CONFIG, else /etc/slurm-heal/heal.toml).")
@click.option("--once", is_flag=True, help="Run one cycle and exit (cron-style).")
@click.option("--cycles", type=int, default=None, help="Stop after this many cycles.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@journal_option
@json_option(help="Log JSON lines on stderr (the start line: {\"event\": \"start\", ...}); "
                  "an error that stops the daemon is one JSON object on stdout (docs/cli.md).")
def daemon(config_file: str | None, once: bool, cycles: int | None, log_level: str,
           journal: bool | None, as_json: bool) -> None:
    """Run the remediation controller (SPEC L1-L5, Q1-Q4, D5, S6, I3, I5).

    Each cycle reads the clock once (wall time carried on by the monotonic clock: a
    step of the wall clock never shortens or lengthens a wait), reads the cluster,
    decides under the policy,
    records what it is about to do, does it, and records the outcome. SIGTERM stops
    cleanly between steps; a heartbeat file is written after every cycle (when a
    cycle last succeeded, and what failed since: SPEC O1). With --once, a cycle that
    could not read Slurm exits 3 (the store: 5). The config is
    checked as `slurm-heal policy check` does; SIGHUP reads it again (a good one takes
    effect at the next cycle, a bad one is refused and the old one kept, logged).
    """
    from slurm_heal.configcheck import Reloader, check_config
    from slurm_heal.controller import Controller, LeaderLock, Notifier, run_forever
    from slurm_heal.durations import format_duration
    from slurm_heal.errors import ConfigError
    from slurm_heal.location import DEFAULT_CONFIG, ENV_CONFIG, config_path, locate, slurm_conf_path
    from slurm_heal.providers import make_provider
    from slurm_heal.slurm import make_client
    from slurm_heal.store import Store

    setup_logging(log_level, as_json, journal)
    found = config_path(config_file)
    if found is None:
        raise ConfigError(f"no config file: pass --config FILE, set ${ENV_CONFIG}, or write "
                          f"{DEFAULT_CONFIG}")
    config_path_ = str(found)
    # The same check `slurm-heal policy check` runs (and SIGHUP runs again).
    report = check_config(config_path_)
    policy, settings = report.policy, report.settings
    # The same slurm.conf and store every admin command finds (slurm_heal.location).
    slurm_conf = str(slurm_conf_path(settings.slurm_conf))
    slurm = make_client(backend=settings.slurm_backend, slurm_conf=slurm_conf,
                        rest_url=settings.slurm_rest_url,
                        rest_token_file=settings.slurm_rest_token_file)
    for warning in check_config(config_path_, slurm, build_provider=False).warnings:
        logging.getLogger("slurm_heal").warning("config: %s", warning)
    from slurm_heal.location import usable_state_dir

    state_dir = locate(None, config_path_).state_dir
    usable_state_dir(state_dir)  # issue 22: a file or a read-only dir is exit 5, one line
    provider = make_provider(policy.provider.table, slurm=slurm, state_dir=state_dir / "provider")
    store = Store(state_dir / "state.json")
    notify = Path(settings.notify_file) if settings.notify_file else state_dir / "notifications.jsonl"
    # SPEC O3: notifications through Apprise, queued beside the cycle (slurm_heal.notify)
    from slurm_heal.notify import Notifications, notify_settings

    nsettings = notify_settings(policy.notify, config_path_)
    api = None
    if policy.api is not None:  # relative paths as serve takes them: beside the config
        from slurm_heal.api.settings import api_settings

        api = api_settings(policy.api, config_path_, base=Path(config_path_).parent)
    notifications = Notifications(nsettings, state_dir, link=_linker(api, state_dir),
                                  slack=_slack(nsettings))
    observers: list[Any] = [notifications]
    # SPEC E7: each machine's ledger, beside the cycle (slurm_heal.ledger)
    from slurm_heal.ledger import LedgerObserver

    observers.append(LedgerObserver(state_dir))
    # SPEC O4: Prometheus metrics, off unless [metrics] enabled (slurm_heal.metrics)
    from slurm_heal.metrics import Metrics, metrics_settings

    msettings = metrics_settings(policy.metrics, config_path_)
    metrics: Metrics | None = None
    holder: list[Controller] = []
    if msettings.enabled:
        metrics = Metrics(store=store, notifications=notifications, policy=policy,
                          liveness=lambda: holder[0].liveness if holder else None,
                          deprecated_names=msettings.deprecated_names)
        observers.append(metrics.observe)
        slurm, provider = metrics.timed(slurm, "slurm"), metrics.timed(provider, "provider")
    from slurm_heal.validation.service import Validator

    # SPEC V1, V2: vacated machines and `slurm-heal validate` requests, each cycle
    validator = Validator(store=store, slurm=slurm, state_dir=state_dir, slurm_conf=slurm_conf)
    from slurm_heal.clock import SteadyClock

    # Issue 34 item 5 (SPEC P3, L5): waits count real time; a step of the wall clock is
    # logged and moves the stored times with it (docs/operating.md, "The clock").
    controller = Controller(slurm=slurm, provider=provider, store=store, policy=policy,
                            clock=SteadyClock(),
                            notifier=Notifier(notify), observers=observers,
                            hot_retention=settings.hot_retention,
                            validator=validator)
    holder.append(controller)
    from slurm_heal.gpureset import GpuReset

    # SPEC E6: reset_gpu as a Slurm job on the drained node (the policy as reloaded)
    controller.gpu_reset = GpuReset(slurm=slurm, policy=lambda: controller.policy,
                                    state_dir=state_dir, slurm_conf=slurm_conf)
    if "audit_retention" in settings.model_fields_set:
        logging.getLogger("slurm_heal").warning(
            "controller.audit_retention no longer moves anything: every ended remediation "
            "is kept in %s for good (history, explain and the API read it there); it stays "
            "in the hot store for controller.hot_retention (%s)", store.archive_file,
            format_duration(settings.hot_retention))
    heartbeat = Path(settings.heartbeat) if settings.heartbeat else state_dir / "heartbeat"
    # the type as configured (`simulator` is served by the http client: say simulator)
    provider_type = str(policy.provider.kind or getattr(provider, "name", "?"))
    logging.getLogger("slurm_heal").info(
        "daemon starting: state_dir=%s provider=%s interval=%ss", state_dir, provider_type,
        settings.interval, extra={"fields": {
            "event": "start", "state_dir": str(state_dir), "provider": provider_type,
            "interval_s": settings.interval, "config": config_path_}})
    leader = LeaderLock(state_dir)
    if notifications.routes:
        notifications.start()

    said: list[str] = []  # the metrics problem last logged (logged once per change)
    log = logging.getLogger("slurm_heal")
    # Issue 38: TLS and basic auth on /metrics (a Prometheus web config file), checked now:
    # a bad one stops the start with the key it refuses (exit 2), as `policy check` does
    from slurm_heal.metrics import web_config

    web = web_config(msettings, config_path_) if metrics is not None else None
    where = f"{'https' if web is not None and web.tls else 'http'}://{msettings.address}:" \
            f"{msettings.port}/metrics"

    def serve_metrics() -> str:
        """The leader's metrics (issue 22: a `--once` beside the active daemon never
        serves; issue 38: a standby serves them with leader 0, `serve_standby`). Issue 34
        item 4 (SPEC O1, S6): a port taken by another program leaves the controller
        running: the problem is logged once, notified once, shown by `status` (the
        heartbeat) and tried again before each cycle; "" once metrics are served."""
        if metrics is None:
            return ""
        # on_lead runs once this process holds the leader lock: it leads from now on
        metrics.leader.set(1)
        if metrics.serving:  # served while it stood by (issue 38): the same server goes on
            log.info("metrics on %s: slurm_heal_leader 1 from now on", where)
            return ""
        try:
            metrics.serve(msettings.address, msettings.port, web)
        except OSError as exc:
            problem = (f"metrics: {msettings.address}:{msettings.port} cannot be served "
                       f"({exc.strerror or exc}): another process holds the port; the "
                       "controller goes on and tries again before each cycle; choose another "
                       f"[metrics] port in {config_path_} (metrics.port) or stop that process")
            if problem not in said:
                said[:] = [problem]
                log.error("%s", problem, extra={"fields": {
                    "event": "metrics_unavailable", "port": msettings.port}})
                from slurm_heal.notify.events import controller_problem

                notifications.enqueue(controller_problem("metrics", problem,
                                                         controller.clock()))
            return problem
        if said:
            log.info("metrics served again: the port is free now")
            said.clear()
        log.info("metrics on %s:%d%s", msettings.address, msettings.port,
                 " (TLS)" if metrics.tls else "")
        return ""

    standby_said: list[str] = []

    def serve_standby() -> None:
        """Issue 38: a standby serves /metrics too, slurm_heal_leader 0, so its target is
        up and an alert can tell "no leader" from "a standby down". Tried after its first
        wait (the leader beside it binds first); a port held (by the active controller on
        the same host, as the lab's standby) is said once, at info: it is served when
        this one leads."""
        if metrics is None or metrics.serving:
            return
        try:
            metrics.serve(msettings.address, msettings.port, web)
        except OSError as exc:
            words = (f"standby: metrics {msettings.address}:{msettings.port} not served "
                     f"({exc.strerror or exc}; the active controller on this host?): served "
                     "once this daemon leads")
            if words not in standby_said:
                standby_said[:] = [words]
                log.info("%s", words)
            return
        log.info("metrics on %s:%d (standby: slurm_heal_leader 0)", msettings.address,
                 msettings.port)

    try:
        run_forever(controller, settings.interval, heartbeat,
                    max_cycles=1 if once else cycles, leader=leader,
                    reload=Reloader(config_path_, controller, settings, state_dir / "provider"),
                    on_lead=serve_metrics, on_standby=None if once else serve_standby)
    finally:
        if metrics is not None:
            metrics.close()  # before the lock goes: the standby that takes over binds it
        leader.release()
        if notifications.routes:
            if once:  # one delivery try before exit; the rest waits in the queue
                notifications.deliver_due()
            notifications.close()
    if once and controller.last_failure is not None:
        # SPEC O1: `--once` from cron says so when its cycle could not read Slurm (exit 3)
        # or the store (exit 5); a blind cycle is not a success.
        raise controller.last_failure


def _linker(api: Any, state_dir: Path) -> Any:
    """SPEC O7: the console link of every notification that needs a person, when
    ``[api] public_url`` says where the console is (None otherwise)."""
    if api is None or api.public_url is None:
        return None
    from slurm_heal.links import secret_path
    from slurm_heal.notify.linking import Linker

    return Linker(api.public_url, secret_path(api.link_secret_file, state_dir), api.link_ttl)


def _slack(settings: Any) -> Any:
    """SPEC O7: approvals in Slack with buttons, when ``[notify.slack]`` is set."""
    if settings.slack is None:
        return None
    from slurm_heal.notify.slack import Slack

    return Slack(settings.slack)
