"""SPEC O3: the [notify] section is checked (a URL Apprise does not understand, an unknown
event kind: a ConfigError naming the key); routes pick events by kind and severity; the
queue survives a restart and gives up after max_attempts, counted; a breaker that opens
is an event. Delivery is real Apprise over HTTP on 127.0.0.1."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError
from slurm_heal.models import Breaker, Plan, State
from slurm_heal.notify import Notifications, Route, notify_settings
from slurm_heal.notify.events import Event, cycle_events
from tests.integration.test_notify_metrics import Receiver

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def _event(kind: str = "alert", severity: str = "critical") -> Event:
    return Event(id=f"{kind}:1", kind=kind, severity=severity, at=T0,  # type: ignore[arg-type]
                 title=f"{kind} test", text="text")


@pytest.mark.parametrize(("raw", "key"), [
    ({"urls": ["notaurl"]}, "notify.urls"),
    ({"routes": [{"urls": ["json://127.0.0.1:1/x"], "kinds": ["alerts"]}]},
     "notify.routes[0].kinds"),
    ({"routes": [{"urls": ["json://127.0.0.1:1/x"], "min_severity": "high"}]},
     "notify.routes.0.min_severity"),
    ({"url": ["json://127.0.0.1:1/x"]}, "notify.url"),
])
def test_a_bad_notify_section_names_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        notify_settings(raw, "heal.toml")
    assert str(err.value).startswith(f"heal.toml: {key}: "), str(err.value)


def test_routes_pick_events_by_kind_and_severity() -> None:
    pager = Route(urls=["json://127.0.0.1:1/x"], kinds=["alert", "breaker"],
                  min_severity="critical")
    assert pager.wants(_event("alert", "critical"))
    assert not pager.wants(_event("alert", "warning"))
    assert not pager.wants(_event("approval", "critical"))
    assert Route(urls=["json://127.0.0.1:1/x"]).wants(_event("pause", "info"))


def test_the_queue_survives_a_restart_and_is_delivered_by_the_next_sender(
        tmp_path: Path) -> None:
    down = notify_settings({"urls": ["json://127.0.0.1:9/hook"], "backoff": 0.001})
    first = Notifications(down, tmp_path)
    first.enqueue(_event())
    assert first.deliver_due() == 0 and first.errors == 1 and first.depth() == 1
    receiver = Receiver()
    try:
        up = notify_settings({"urls": [receiver.url]})
        second = Notifications(up, tmp_path)  # a restarted daemon, same state dir
        assert second.depth() == 1
        assert second.deliver_due() == 1 and second.depth() == 0
        assert receiver.titles() == ["slurm-heal: alert test"]
    finally:
        receiver.close()


def test_a_delivery_that_keeps_failing_is_given_up_and_counted(tmp_path: Path) -> None:
    settings = notify_settings({"urls": ["json://127.0.0.1:9/hook"], "backoff": 0.001,
                                "max_attempts": 2})
    n = Notifications(settings, tmp_path)
    n.enqueue(_event())
    n.deliver_due()
    import time

    time.sleep(0.01)
    n.deliver_due()
    assert n.failed == 1 and n.errors == 2 and n.depth() == 0


def test_a_breaker_that_opens_is_a_critical_event() -> None:
    plan = Plan(breaker=Breaker(open=True, opened_at=T0, why="3 automatic starts in 1h"))
    (event,) = cycle_events(State(), State(), plan, [], {}, T0)
    assert event.kind == "breaker" and event.severity == "critical"
    assert "3 automatic starts" in event.text and "slurm-heal reset-breaker" in event.text
    assert cycle_events(State(breaker=Breaker(open=True)), State(), plan, [], {}, T0) == []
