"""SPEC O7 (issue 40): the link in an approval notification, followed in a real browser
(Debian's chromium + chromium-driver, headless, JavaScript off).

The notification is the one the daemon queues (`cycle_events` + the `Linker`, with
``[api] public_url`` the console's address here); its link is read out of the message
body a person gets. Following it lands on the login page, the login leads back to the
remediation's page, which says what the link is for and that opening it changed nothing;
Approve queues one decision with the console channel and the proposal's generation. The
same link after the proposal was decided says so and offers nothing.

`serve`'s own production WSGI server in this process, on 127.0.0.1 (no Slurm needed: the
page reads the store). Screenshots go to $SLURM_HEAL_TEST_OUTPUT/console (and to docs/img
with SLURM_HEAL_CONSOLE_DOCS=1).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.location import Location
from slurm_heal.models import Phase, Plan, State, Step
from slurm_heal.notify.events import LINK_MARK, cycle_events
from slurm_heal.notify.linking import Linker
from slurm_heal.store import Store
from slurm_heal.types import Alert, Evidence, Severity
from tests.apiserve import make_tokens
from tests.browser.test_console_lab import Browser, browser_ok
from tests.unit.test_api_serve import _proposal

pytestmark = [pytest.mark.slow, pytest.mark.browser]
__all__ = ["browser_ok"]  # the fixture, imported for its skip

NOW = datetime.now(timezone.utc)


class World:
    def __init__(self, root: Path) -> None:
        self.state_dir = root / "state"
        self.state_dir.mkdir()
        (self.state_dir / "heartbeat").write_text(NOW.isoformat())
        self.store = Store(self.state_dir)
        self.rem = _proposal(at=NOW - timedelta(minutes=3))
        with self.store.transaction() as txn:
            txn.state = State(remediations=(self.rem,))
        self.tokens = make_tokens(root / "tokens.toml")
        self.settings = ApiSettings(bind="127.0.0.1:0", tokens=root / "tokens.toml")
        self.app = ApiApp(self.settings, Location(state_dir=self.state_dir, source="test"),
                          slurm=None)
        self.server = wsgi_server(self.settings, self.app)
        self.server.prepare()
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.bind_addr[1]}"

    def notification_body(self) -> str:
        """The approval's message as the daemon queues it, with the console's link."""
        alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                      summary="GSP RPC timeout", first_seen=NOW, last_seen=NOW,
                      evidence=(Evidence(source="kmsg", text="NVRM: Xid (PCI:0000:3b:00): "
                                         "119, Timeout after 6s of waiting for RPC"),))
        [event] = [e for e in cycle_events(State(), State(remediations=(self.rem,)),
                                           Plan(updates=(self.rem,)), (),
                                           {"gpu01": [alert]}, NOW) if e.kind == "approval"]
        linker = Linker(self.url, self.state_dir / "link-secret", timedelta(hours=8))
        return linker(event, State(remediations=(self.rem,))).body()

    def close(self) -> None:
        self.server.stop()
        self.thread.join(timeout=10)


@pytest.fixture
def world(browser_ok: None, tmp_path: Path) -> Iterator[tuple[World, Browser]]:
    w = World(tmp_path)
    b = Browser(w.url)
    try:
        yield w, b
    finally:
        b.close()
        w.close()


def _link(body: str) -> str:
    m = re.search(re.escape(LINK_MARK) + r" (\S+)", body)
    assert m, body
    return m.group(1)


def test_a_notifications_link_lands_on_the_page_asks_a_login_then_approves(
        world: tuple[World, Any]) -> None:
    w, b = world
    link = _link(w.notification_body())
    path = link.removeprefix(w.url)
    assert path.startswith(f"/remediations/{w.rem.id}?link=")

    b.driver.get(link)  # what a click in the mail or chat program does
    assert b.path.startswith("/login?next="), b.path
    b.shot("link-login")
    b.find("#token").send_keys(w.tokens["alice"])
    b.submit("form[action='/login'] button")
    assert b.path == path, b.path  # back on the page the link names
    note = b.find("#link-note").text
    assert "changed nothing" in note and "reboot gpu01" in note
    assert w.store.load().inbox == ()  # following the link did nothing
    b.find(f"#reason-{w.rem.id}").send_keys("GSP hang; reboot it")
    b.shot("link-remediation")
    b.submit("button.approve")
    assert "Approval queued" in b.text()
    [cmd] = w.store.load().inbox
    assert (cmd.kind, cmd.by, cmd.channel, cmd.generation, cmd.reason) == (
        "approve", "alice", "console", w.rem.generation, "GSP hang; reboot it")
    assert "approve by alice via console" in b.text()
    b.shot("link-approved")

    # the controller took it; the same link, followed again, says so and offers nothing
    at = datetime.now(timezone.utc)
    with w.store.transaction() as txn:
        txn.state = State(remediations=(w.rem.model_copy(update={
            "phase": Phase.APPROVED, "approved_by": "alice", "approval_rule": "P2:person",
            "phase_times": {**w.rem.phase_times, "approved": at},
            "steps": w.rem.steps + (Step(at=at, phase="approved", rule="P2:person", by="alice",
                                         why=f"approved by alice via console: {cmd.reason}"),
                                    )}),))
    b.driver.get(link)
    text = b.find("#link-note").text
    assert "already decided" in text and "by alice" in text and "Nothing was done" in text
    assert b.all("button.approve") == []
    b.shot("link-stale")
