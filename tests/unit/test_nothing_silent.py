"""SPEC O6 Nothing silent (issue 25 items 1-3): a state that holds a node or a
remediation is shown in `status`, `explain`, the API and the console with its reason and
what resolves it, and notified once.

Through the real commands (click's CliRunner on `slurm_heal.cli.cli` with an in-memory
Slurm passed as ``obj``), the API's own overview function, the console's own template,
and a real controller cycle feeding the real notification queue.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from prometheus_client import generate_latest

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.api.views import Sources, overview
from slurm_heal.cli import cli
from slurm_heal.config import load_policy
from slurm_heal.controller import Controller
from slurm_heal.location import Location
from slurm_heal.metrics import Metrics
from slurm_heal.notify import Notifications, notify_settings
from slurm_heal.notify.events import Event
from slurm_heal.providers import make_provider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
BAD = "heal-request: reboot detector=ibmön id=ü1 x"  # the operator's very line
WRONG = "detector='ibmön' is not a token"


def _cluster() -> MemorySlurm:
    slurm = MemorySlurm([(f"ceo{i}", "a") for i in range(1, 6)], clock=lambda: T0)
    slurm.drain("ceo4", BAD)
    return slurm


def _cli(args: list[str], slurm: MemorySlurm) -> Result:
    return CliRunner().invoke(cli, args, obj={"slurm": slurm})


def _controller(tmp_path: Path, slurm: MemorySlurm, observers: list[Any]) -> Controller:
    cfg = tmp_path / "heal.toml"
    cfg.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n')
    policy = load_policy(cfg)
    return Controller(slurm=slurm, provider=make_provider(dict(policy.provider)),
                      store=Store(tmp_path / "state"), policy=policy, clock=lambda: T0,
                      observers=observers)


# ------------------------------------------------------------------ item 1: a malformed request
def test_a_malformed_request_drain_is_drained_by_others_in_status_never_healthy(
        tmp_path: Path) -> None:
    """SPEC O6, Q1, D5: `status` counts the node as drained by others and says what is
    wrong in the request and what resolves it."""
    slurm = _cluster()
    state = str(tmp_path / "state")
    text = _cli(["status", "--state-dir", state], slurm)
    assert text.exit_code == 0, text.output
    assert "4 healthy" in text.stdout and "1 drained by others" in text.stdout, text.stdout
    assert "MALFORMED REQUEST" in text.stdout and WRONG in text.stdout, text.stdout
    assert "scontrol update nodename=ceo4 state=resume" in text.stdout
    doc = json.loads(_cli(["status", "--json", "--state-dir", state], slurm).stdout)
    assert doc["counts"]["healthy"] == 4 and doc["counts"]["drained_by_others"] == 1
    [foreign] = doc["foreign"]
    assert foreign["node"] == "ceo4" and WRONG in foreign["problem"]


def test_a_malformed_request_is_an_alert_in_explain_and_alerts(tmp_path: Path) -> None:
    """SPEC O6: the alert names what is wrong in the request (explain, alerts)."""
    slurm = _cluster()
    state = str(tmp_path / "state")
    explained = _cli(["explain", "ceo4", "--json", "--state-dir", state], slurm)
    assert explained.exit_code == 0, explained.output
    found = json.loads(explained.stdout)["alerts"]
    assert [a["fault"] for a in found] == ["request.malformed"], found
    assert WRONG in found[0]["summary"]
    text = _cli(["explain", "ceo4", "--state-dir", state], slurm)
    assert "request.malformed" in text.stdout and WRONG in text.stdout, text.stdout
    listed = _cli(["alerts", "--json", "--state-dir", state], slurm)
    assert [a["node"] for a in json.loads(listed.stdout)["alerts"]
            if a["fault"] == "request.malformed"] == ["ceo4"], listed.stdout


def test_a_malformed_request_is_counted_and_shown_by_the_api_and_the_console(
        tmp_path: Path) -> None:
    """SPEC O6: the API's overview and the console's page say it; the metrics do not
    count the node healthy."""
    slurm = _cluster()
    loc = Location(state_dir=tmp_path / "state", source="--state-dir")
    src = Sources(loc, lambda: slurm)
    o = overview(src)
    assert o["counts"]["foreign_drains"] == 1
    assert o["status"]["counts"]["drained_by_others"] == 1
    assert WRONG in o["status"]["foreign"][0]["problem"]
    app = ApiApp(ApiSettings(), loc, slurm=lambda: slurm)
    html = app.jinja.get_template("overview.html").render(
        me=None, csrf="", flash=None, path="/", new_key=lambda: "k", o=o)
    assert "1 drained by someone else" in html
    assert "malformed request, nothing is done" in html and "ibmön" in html
    metrics = Metrics()
    ctl = _controller(tmp_path, slurm, [metrics.observe])
    ctl.cycle()
    scraped = generate_latest(metrics.registry).decode()
    assert 'slurm_heal_nodes{state="healthy"} 4.0' in scraped, scraped
    assert 'slurm_heal_nodes{state="drained_by_others"} 1.0' in scraped


def test_a_malformed_request_is_notified_once(tmp_path: Path) -> None:
    """SPEC O6: one notification naming what is wrong, however many cycles see it."""
    sent: list[Event] = []

    def send(urls: list[str], event: Event) -> bool:
        sent.append(event)
        return True

    slurm = _cluster()
    queue = Notifications(notify_settings({"urls": ["json://127.0.0.1:9/hook"]}),
                          tmp_path / "state", send=send, clock=lambda: T0)
    ctl = _controller(tmp_path, slurm, [queue])
    for _ in range(3):
        ctl.cycle()
        queue.deliver_due()
    about = [e for e in sent if e.node == "ceo4"]
    assert len(about) == 1, [e.title for e in sent]
    assert "request.malformed" in about[0].text and WRONG in about[0].text
    assert "scontrol update nodename=ceo4 state=resume" in about[0].text
