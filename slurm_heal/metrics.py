"""Prometheus metrics of the controller (SPEC O4), with prometheus-client.

Off by default. The ``[metrics]`` section of the config file::

    [metrics]
    enabled = true
    address = "127.0.0.1"     # the default: only this host; "0.0.0.0" to let Prometheus in
    port = 9810

The daemon serves ``/metrics`` over HTTP from a thread. Gauges are set after every cycle
from what the cycle saw (an observer of the cycle, like the notifications), counters and
histograms are updated as things happen; the store size and the notification queue are
read at scrape time. Every name is in `METRIC_NAMES` (the Grafana dashboard in
``contrib/grafana/`` is built on exactly these; a test checks it).
"""

from __future__ import annotations

import platform
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from slurm_heal import __version__
from slurm_heal.config import read_section
from slurm_heal.errors import HealError
from slurm_heal.models import Phase, Remediation, State
from slurm_heal.sections import MetricsSettings as MetricsSettings  # its home (issue 21)
from slurm_heal.webconfig import BasicAuth, WebConfig

if TYPE_CHECKING:
    from slurm_heal.controller import CycleFacts
    from slurm_heal.heartbeat import Heartbeat
    from slurm_heal.notify import Notifications

P = "slurm_heal_"
# Every metric the daemon serves (the names Prometheus shows; counters end in _total).
METRIC_NAMES: tuple[str, ...] = (
    P + "alerts", P + "nodes", P + "node_checks", P + "remediations",
    P + "approvals_pending", P + "approval_oldest_age_seconds", P + "breaker_open",
    P + "breaker_window_remediations", P + "breaker_count",
    P + "build_info", P + "leader", P + "cycle_duration_seconds", P + "cycles_total",
    P + "cycle_failures_since_success", P + "last_success_timestamp_seconds",
    P + "slurm_call_duration_seconds", P + "slurm_call_errors_total",
    P + "provider_call_duration_seconds", P + "provider_call_errors_total",
    P + "notify_queue_depth", P + "notify_sent_total", P + "notify_errors_total",
    P + "notify_failures_total", P + "store_bytes", P + "time_to_repair_seconds",
    P + "repeat_failures", P + "paused",
    P + "lemons", P + "incidents_open",
)
# Old names still served for one release, each beside the name that replaces it (issue 38:
# ``_count`` is the suffix Prometheus reserves for a histogram's or summary's count, and
# `promtool check metrics` refuses a gauge named so). Removed in the next release.
DEPRECATED_NAMES: dict[str, str] = {P + "breaker_count": P + "breaker_window_remediations"}
# Besides ours: prometheus-client's process_* (CPU, memory, open files, start time, from
# /proc) and python_* (the interpreter, its garbage collector), as every exporter serves.
# Histogram buckets for time to repair: minutes to a day.
REPAIR_BUCKETS = (300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400, float("inf"))


def metrics_settings(raw: MetricsSettings | dict[str, Any],
                     source: str = "config") -> MetricsSettings:
    return read_section(MetricsSettings, raw, file=source, key="metrics")


def web_config(settings: MetricsSettings, source: str = "config") -> WebConfig | None:
    """The ``[metrics] web_config`` file read and checked (None when not set);
    ConfigError names the key it refuses. A relative path is the config file's neighbour."""
    from pathlib import Path

    from slurm_heal.webconfig import load

    if not settings.web_config:
        return None
    path = Path(settings.web_config)
    if not path.is_absolute():
        path = Path(source).resolve().parent / path
    return load(path)


class _Live:
    """What is read at scrape time: the store file's size, the notification queue."""

    def __init__(self, store: Any, notifications: Notifications | None,
                 liveness: Callable[[], Heartbeat | None]) -> None:
        self.store = store
        self.notifications = notifications
        self.liveness = liveness

    def collect(self) -> Iterable[Metric]:
        beat = self.liveness()
        last = GaugeMetricFamily(P + "last_success_timestamp_seconds",
                                 "Unix time of the last successful cycle (SPEC O1).")
        last.add_metric([], beat.last_success.timestamp()
                        if beat is not None and beat.last_success else 0.0)
        yield last
        failing = GaugeMetricFamily(P + "cycle_failures_since_success",
                                    "Cycles in a row that could not read Slurm or the store.")
        failing.add_metric([], float(beat.failures_since_success if beat is not None else 0))
        yield failing
        size = GaugeMetricFamily(P + "store_bytes", "Size of the state store file in bytes.")
        try:
            size.add_metric([], float(self.store.file.stat().st_size))
        except (OSError, AttributeError):
            size.add_metric([], 0.0)
        yield size
        n = self.notifications
        depth = GaugeMetricFamily(P + "notify_queue_depth",
                                  "Notifications waiting in the persisted queue.")
        depth.add_metric([], float(n.depth() if n is not None else 0))
        yield depth
        for name, doc, value in (
                ("notify_sent", "Notifications delivered.", n.sent if n else 0),
                ("notify_errors", "Notification delivery attempts that failed.",
                 n.errors if n else 0),
                ("notify_failures", "Notifications given up on after max_attempts.",
                 n.failed if n else 0)):
            c = CounterMetricFamily(P + name, doc)
            c.add_metric([], float(value))
            yield c


class Metrics:
    """The registry, its HTTP server, and the cycle observer that sets it."""

    def __init__(self, store: Any = None, notifications: Notifications | None = None,
                 policy: Any = None,
                 liveness: Callable[[], Heartbeat | None] = lambda: None,
                 deprecated_names: bool = True) -> None:
        self.policy = policy
        self.registry = CollectorRegistry()
        r = self.registry
        self.alerts = Gauge(P + "alerts", "Active alerts by fault and severity.",
                            ["fault", "severity"], registry=r)
        self.nodes = Gauge(P + "nodes", "Nodes by slurm-heal state (status categories).",
                           ["state"], registry=r)
        self.node_checks = Gauge(P + "node_checks", "Nodes whose node check is stale or "
                                 "erroring.", ["state"], registry=r)
        self.remediations = Gauge(P + "remediations", "Remediations in the store by phase "
                                  "and action.", ["phase", "action"], registry=r)
        self.approvals = Gauge(P + "approvals_pending", "Remediations waiting for a "
                               "person's approval.", registry=r)
        self.approval_age = Gauge(P + "approval_oldest_age_seconds", "Age of the oldest "
                                  "approval waiting (0 when none).", registry=r)
        self.breaker_open = Gauge(P + "breaker_open", "1 when the circuit breaker is open.",
                                  registry=r)
        self.breaker_window = Gauge(P + "breaker_window_remediations", "Automatic "
                                    "remediations started in the breaker window.", registry=r)
        # [metrics] deprecated_names = false drops the old names now (then `promtool check
        # metrics` finds nothing to say; with them it names breaker_count's suffix)
        self.breaker_count = Gauge(P + "breaker_count", "Deprecated: "
                                   "slurm_heal_breaker_window_remediations (this name goes in "
                                   "the next release).",
                                   registry=r if deprecated_names else None)
        build = Gauge(P + "build_info", "Always 1: the running slurm-heal's version and "
                      "Python.", ["version", "python"], registry=r)
        build.labels(__version__, platform.python_version()).set(1)
        self.leader = Gauge(P + "leader", "1 while this daemon holds the leader lock and "
                            "runs cycles, 0 while it stands by.", registry=r)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.paused = Gauge(P + "paused", "1 when a person paused automation.", registry=r)
        self.cycle = Histogram(P + "cycle_duration_seconds", "Duration of controller cycles.",
                               registry=r)
        self.cycles = Counter(P + "cycles", "Controller cycles that read Slurm and decided.",
                              registry=r)
        self.slurm_calls = Histogram(P + "slurm_call_duration_seconds", "Slurm calls by "
                                     "operation.", ["call"], registry=r)
        self.slurm_errors = Counter(P + "slurm_call_errors", "Slurm calls that failed.",
                                    ["call"], registry=r)
        self.provider_calls = Histogram(P + "provider_call_duration_seconds", "Provider "
                                        "calls by operation.", ["call"], registry=r)
        self.provider_errors = Counter(P + "provider_call_errors", "Provider calls that "
                                       "failed.", ["call"], registry=r)
        self.repair = Histogram(P + "time_to_repair_seconds", "Fault first seen to node "
                                "resumed, by fault and action.", ["fault", "action"],
                                buckets=REPAIR_BUCKETS, registry=r)
        self.repeat = Gauge(P + "repeat_failures", "Remediations of the same machine within "
                            "the escalation window (machines with two or more).",
                            ["machine"], registry=r)
        self.lemons = Gauge(P + "lemons", "Machines past escalation.lemon (SPEC E7): their "
                            "remediations acted within the lemon window; E7 holds their "
                            "automatic work.", ["machine"], registry=r)
        self.incidents = Gauge(P + "incidents_open", "Open incidents (SPEC S7) by "
                               "component: the nodes under it with related alerts, their "
                               "remediations held for a person.", ["component", "kind"],
                               registry=r)
        r.register(_Live(store, notifications, liveness))
        self._server: Any = None
        self.tls = False

    # -- serving -----------------------------------------------------------------------
    def serve(self, address: str = "127.0.0.1", port: int = 9810,
              web: WebConfig | None = None) -> int:
        """Serve /metrics from a thread; returns the port (0 picks a free one). ``web``:
        TLS and basic auth as Prometheus' web config file asks (slurm_heal.webconfig)."""
        import socket

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
        server_class = type("MetricsServer", (_QuietServer, ThreadingWSGIServer),
                            {"address_family": family})
        app: Any = make_wsgi_app(self.registry)
        if web is not None and web.users:
            app = BasicAuth(app, web.users)
        server: WSGIServer = make_server(address, port, app, server_class,
                                         handler_class=_Handler)
        if web is not None and web.tls is not None:
            # the handshake is the connection's own thread's (_Handler.setup), bounded by
            # its timeout: a client that connects and says nothing holds no one else up
            server.socket = web.tls.wrap_socket(server.socket, server_side=True,
                                                do_handshake_on_connect=False)
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        self._server = server
        self.tls = web is not None and web.tls is not None
        return int(server.server_address[1])

    @property
    def serving(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- the cycle's observer ----------------------------------------------------------
    def observe(self, facts: CycleFacts) -> None:
        from slurm_heal.extra import alerts_from_extra
        from slurm_heal.readmodel import overview

        now = facts.at
        self.cycle.observe(facts.duration_s)
        self.cycles.inc()
        self.alerts.clear()
        counts: dict[tuple[str, str], int] = {}
        for node in facts.view.nodes:
            for a in alerts_from_extra(node.name, node.extra, now):
                counts[(a.fault, a.severity.value)] = counts.get((a.fault, a.severity.value),
                                                                 0) + 1
        for (fault, sev), n in counts.items():
            self.alerts.labels(fault, sev).set(n)
        ov = overview.gather(facts.after, facts.view.nodes, now, heartbeat=None,
                             policy=self.policy)
        for cat in overview.CATEGORIES:
            self.nodes.labels(cat).set(ov.counts.get(cat, 0))
        self.node_checks.labels("stale").set(_count(ov.check_stale))
        self.node_checks.labels("erroring").set(_count(ov.check_erroring))
        self.approvals.set(len(ov.approvals))
        self.approval_age.set(max((w.age_s for w in ov.approvals), default=0.0))
        self.breaker_open.set(1 if ov.breaker.open else 0)
        self.breaker_window.set(ov.breaker.count_in_window or 0)
        self.breaker_count.set(ov.breaker.count_in_window or 0)
        self.paused.set(1 if facts.after.paused else 0)
        self._remediations(facts.after)
        self._repairs(facts.before, facts.plan.updates)
        self._repeats(facts.after, now)
        self._lemons(facts.after, now)
        self._incidents(facts.after)

    def _remediations(self, state: State) -> None:
        self.remediations.clear()
        counts: dict[tuple[str, str], int] = {}
        for r in state.remediations:
            key = (r.phase.value, r.action.value)
            counts[key] = counts.get(key, 0) + 1
        for (phase, action), n in counts.items():
            self.remediations.labels(phase, action).set(n)

    def _repairs(self, before: State, updates: Iterable[Remediation]) -> None:
        old = {r.id: r for r in before.remediations}
        for r in updates:
            prev = old.get(r.id)
            if r.phase is not Phase.DONE or (prev is not None and prev.phase is Phase.DONE):
                continue
            start = r.alert_first_seen or r.created
            end = r.phase_times.get(Phase.DONE.value) or r.updated
            self.repair.labels(r.fault, r.action.value).observe(
                max(0.0, (end - start).total_seconds()))

    def _repeats(self, state: State, now: datetime) -> None:
        window = getattr(getattr(self.policy, "escalation", None), "window",
                         timedelta(days=7))
        per: dict[str, int] = {}
        for r in state.remediations:
            if r.phase in (Phase.CANCELLED, Phase.WITHDRAWN, Phase.DENIED):
                continue  # E2: not counted
            if now - r.created <= window:
                machine = r.host or r.node
                per[machine] = per.get(machine, 0) + 1
        self.repeat.clear()
        for machine, n in per.items():
            if n >= 2:
                self.repeat.labels(machine).set(n)

    def _lemons(self, state: State, now: datetime) -> None:
        """SPEC E7: the machines past the lemon limit, counted as the engine counts them
        (remediations whose action ran within the window)."""
        from slurm_heal.config import Lemon
        from slurm_heal.policy.facts import acted_at

        lemon = getattr(getattr(self.policy, "escalation", None), "lemon", Lemon())
        since = now - lemon.window
        per: dict[str, int] = {}
        for r in state.remediations:
            t = acted_at(r)
            if t is not None and t >= since:
                per[r.host or r.node] = per.get(r.host or r.node, 0) + 1
        self.lemons.clear()
        if lemon.enabled:
            for machine, n in per.items():
                if n >= lemon.remediations:
                    self.lemons.labels(machine).set(n)

    def _incidents(self, state: State) -> None:
        """SPEC S7: each open incident, its component and the nodes it holds."""
        from slurm_heal.incidentstore import INCIDENTS_KEY, load

        self.incidents.clear()
        for inc in load(state.data.get(INCIDENTS_KEY)).values():
            if inc.open:
                self.incidents.labels(inc.component, inc.kind).set(len(inc.nodes))

    # -- timing the ports --------------------------------------------------------------
    def timed(self, target: Any, kind: str) -> Any:
        """``target`` (the Slurm client or the provider) with every public method call
        timed and its errors counted under ``call`` = the method's name."""
        hist, errors = ((self.slurm_calls, self.slurm_errors) if kind == "slurm"
                        else (self.provider_calls, self.provider_errors))
        return _Timed(target, hist, errors)


class _Handler(WSGIRequestHandler):
    """One scrape: no access log line, a TLS handshake done here, in the connection's
    thread, and 10 s for a client to send its request."""

    timeout = 10

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


class _QuietServer(WSGIServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that failed its handshake or went away: nothing of the daemon's."""


def _count(folded: str) -> int:
    if not folded:
        return 0
    from ClusterShell.NodeSet import NodeSet

    return len(NodeSet(folded))


class _Timed:
    """A transparent proxy that times method calls (the controller sees the same port)."""

    def __init__(self, target: Any, hist: Histogram, errors: Counter) -> None:
        self._target = target
        self._hist = hist
        self._errors = errors

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name.startswith("_") or not callable(attr):
            return attr
        hist, errors = self._hist, self._errors

        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return attr(*args, **kwargs)
            except HealError:
                errors.labels(name).inc()
                raise
            finally:
                hist.labels(name).observe(time.monotonic() - started)

        return call

