"""Notifications through Apprise (SPEC O3, D7, D8): Slack, Microsoft Teams, email,
PagerDuty, Mattermost, ntfy, generic JSON webhooks and the rest, each by URL.

The ``[notify]`` section of the config file::

    [notify]
    urls = ["slack://T000/B000/XXXX"]          # a route for every kind and severity
    [[notify.routes]]
    urls = ["pagerduty://KEY@ROUTING"]
    kinds = ["alert", "breaker"]               # see slurm_heal.notify.events
    min_severity = "critical"

After every cycle the controller hands its facts to `Notifications` (an observer of the
cycle): the events (`events.py`) are routed and appended to a queue persisted in the
state directory (``notify-queue.json``). A thread beside the cycle delivers what is due,
retrying with exponential backoff; a delivery that keeps failing is dropped after
``max_attempts``, logged. Nothing here blocks or fails a cycle: queueing is a small
local file write, and any error is logged and counted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ConfigDict, Field, ValidationError

from slurm_heal import fsio
from slurm_heal.config import read_section
from slurm_heal.models import Record, State
from slurm_heal.notify.events import (
    Event,
    alert_events,
    cycle_events,
    view_alerts,
)
from slurm_heal.sections import NotifySettings as NotifySettings  # their home (issue 21)
from slurm_heal.sections import Route as Route
from slurm_heal.sources.stored import alerts_of as site_alerts

if TYPE_CHECKING:
    from slurm_heal.controller import CycleFacts

log = logging.getLogger("slurm_heal.notify")

QUEUE_FILE = "notify-queue.json"
SLACK_ROUTE = -1  # a delivery's route: [notify.slack], not one of the Apprise routes


class SlackPort(Protocol):
    """What the queue needs of Slack (`slurm_heal.notify.slack.Slack`)."""

    def wants(self, event: Event) -> bool: ...

    def send(self, event: Event) -> bool: ...


def notify_settings(raw: NotifySettings | dict[str, Any],
                    source: str = "config") -> NotifySettings:
    """Validate ``[notify]``; an unknown kind, a bad severity or a URL Apprise does not
    understand is a ConfigError naming the key (the section checks itself: the policy
    loader refuses the same, issue 33)."""
    return read_section(NotifySettings, raw, file=source, key="notify", index=".")


class Delivery(Record):
    """One event to one route, waiting in the queue."""

    model_config = ConfigDict(frozen=True)

    id: str
    event: Event
    route: int
    attempts: int = 0
    next_try: datetime
    last_error: str = ""


class QueueDoc(Record):
    pending: list[Delivery] = Field(default_factory=list)
    seen_alerts: list[str] = Field(default_factory=list)  # alert keys already told


Sender = Callable[[list[str], Event], bool]


def apprise_send(urls: list[str], event: Event) -> bool:
    """Send one event through Apprise to ``urls``; True when every URL took it."""
    import apprise

    ap = apprise.Apprise()
    for url in urls:
        ap.add(url)
    kind = {"info": apprise.NotifyType.INFO, "warning": apprise.NotifyType.WARNING,
            "critical": apprise.NotifyType.FAILURE}[event.severity]
    return bool(ap.notify(title=f"slurm-heal: {event.title}", body=event.body(),
                          notify_type=kind, body_format=apprise.NotifyFormat.TEXT))


class Notifications:
    """The queue (persisted), the observer that fills it, the sender that drains it."""

    def __init__(self, settings: NotifySettings, state_dir: Path,
                 send: Sender = apprise_send,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 link: Callable[[Event, State], Event] | None = None,
                 slack: SlackPort | None = None) -> None:
        self.settings = settings
        self.routes = settings.all_routes()
        # SPEC O7: the console link of each event that needs a person (`linking.Linker`)
        self.link = link
        # SPEC O7: approvals as Slack messages with buttons ([notify.slack]); its
        # deliveries wait in the same queue, as route SLACK_ROUTE.
        self.slack = slack
        self.path = state_dir / QUEUE_FILE
        self.send = send
        self.clock = clock
        self.stop = threading.Event()
        self.wake = threading.Event()
        self._thread: threading.Thread | None = None
        # counters for the metrics (this process)
        self.sent = 0
        self.failed = 0
        self.errors = 0

    # -- the queue file ----------------------------------------------------------------
    @contextmanager
    def _doc(self) -> Iterator[QueueDoc]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with fsio.locked(self.path.with_name(QUEUE_FILE + ".lock")):
            doc, raw = QueueDoc(), ""
            if self.path.exists():
                try:
                    raw = self.path.read_text()
                    doc = QueueDoc.model_validate_json(raw)
                except (ValidationError, ValueError) as exc:
                    log.error("notification queue %s unreadable, set aside: %s",
                              self.path, exc)
                    fsio.set_aside(self.path, self.path.with_name(QUEUE_FILE + ".bad"))
                    raw = ""
            yield doc
            text = doc.model_dump_json()
            if text != raw:  # written only when it changed
                fsio.atomic_write(self.path, text, 0o644)

    def depth(self) -> int:
        """Deliveries waiting (for the metrics)."""
        try:
            return len(QueueDoc.model_validate_json(self.path.read_bytes()).pending)
        except (OSError, ValidationError, ValueError):
            return 0

    # -- filling it (the cycle's observer) ---------------------------------------------
    def __call__(self, facts: CycleFacts) -> None:
        """Queue what this cycle is worth telling (never raises into the cycle: the
        controller logs an observer's error and goes on)."""
        if not self.routes and self.slack is None:
            return
        now = facts.at
        alerts = view_alerts(facts.view, now)
        # SPEC D13: the site's own monitors' alerts too (Alertmanager's, from the store)
        for name, more in site_alerts(facts.after.data, alerts).items():
            alerts.setdefault(name, []).extend(more)
        with self._doc() as doc:
            new_alerts, active = alert_events(alerts, set(doc.seen_alerts), now)
            doc.seen_alerts = sorted(active)
            events = new_alerts + cycle_events(
                facts.before, facts.after, facts.plan,
                [e.effect for e in facts.executed if e.outcome == "ok"], alerts, now)
            if self.link is not None:
                events = [self.link(e, facts.after) for e in events]
            known = {d.id for d in doc.pending}
            for event in events:
                for i, wants in self._targets(event):
                    did = f"{event.id}->{'slack' if i == SLACK_ROUTE else i}"
                    if wants and did not in known:
                        doc.pending.append(Delivery(id=did, event=event, route=i,
                                                    next_try=self.clock()))
                        known.add(did)
        if events:
            self.wake.set()

    def enqueue(self, event: Event) -> None:
        """Queue one event by hand (tests, tools, the daemon's own problems)."""
        with self._doc() as doc:
            for i, wants in self._targets(event):
                if wants:
                    doc.pending.append(Delivery(
                        id=f"{event.id}->{'slack' if i == SLACK_ROUTE else i}",
                        event=event, route=i, next_try=self.clock()))
        self.wake.set()

    def _targets(self, event: Event) -> list[tuple[int, bool]]:
        """(route, wants it) for each Apprise route, then Slack's when configured."""
        out = [(i, route.wants(event)) for i, route in enumerate(self.routes)]
        if self.slack is not None:
            try:
                out.append((SLACK_ROUTE, self.slack.wants(event)))
            except Exception:  # never into the cycle
                log.exception("Slack route failed to judge %s", event.id)
        return out

    # -- draining it -------------------------------------------------------------------
    def deliver_due(self) -> int:
        """Send every delivery that is due; returns how many were sent. Sending happens
        outside the queue lock (a slow receiver never holds the cycle's observer)."""
        now = self.clock()
        with self._doc() as doc:
            due = [d for d in doc.pending if d.next_try <= now]
        done: dict[str, Delivery | None] = {}
        for d in due:
            if d.route >= len(self.routes) or (d.route == SLACK_ROUTE and self.slack is None) \
                    or d.route < SLACK_ROUTE:
                done[d.id] = None  # the route is gone from the config
                continue
            try:
                if d.route == SLACK_ROUTE and self.slack is not None:
                    ok, error = self.slack.send(d.event), "not accepted by Slack"
                else:
                    ok, error = self.send(self.routes[d.route].urls, d.event), "not accepted"
            except Exception as exc:  # a sender bug must not stop the thread
                ok, error = False, f"{type(exc).__name__}: {exc}"
            if ok:
                done[d.id] = None
                self.sent += 1
                continue
            self.errors += 1
            attempts = d.attempts + 1
            if attempts >= self.settings.max_attempts:
                log.error("notification %s given up after %d attempts: %s", d.id, attempts,
                          error)
                self.failed += 1
                done[d.id] = None
                continue
            wait = min(self.settings.max_backoff, self.settings.backoff * 2 ** (attempts - 1))
            log.warning("notification %s not delivered (attempt %d, next in %gs): %s", d.id,
                        attempts, wait, error)
            done[d.id] = d.model_copy(update={"attempts": attempts, "last_error": error,
                                              "next_try": now + timedelta(seconds=wait)})
        if done:
            with self._doc() as doc:
                kept: list[Delivery] = []
                for d in doc.pending:
                    if d.id not in done:
                        kept.append(d)
                    elif (upd := done[d.id]) is not None:
                        kept.append(upd)
                doc.pending = kept
        return sum(1 for d in due if d.id in done and done[d.id] is None)

    def start(self) -> None:
        """The sender thread beside the cycle."""
        def loop() -> None:
            while not self.stop.is_set():
                try:
                    self.deliver_due()
                except Exception:
                    log.exception("notification sender failed; it goes on")
                self.wake.wait(self.settings.poll)
                self.wake.clear()

        self._thread = threading.Thread(target=loop, name="notify", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)


def describe(event: Event) -> str:
    """One line for a log."""
    return json.dumps({"kind": event.kind, "severity": event.severity, "title": event.title})
