"""SPEC O7 (issue 40): approval requests in Slack with Approve / Deny buttons, and the
presses that come back.

Slack's Web API is a real HTTP server on 127.0.0.1 standing in for slack.com/api
(`chat.postMessage`, `chat.update`; slack-sdk's `WebClient` talks to it at its
``base_url``). The presses are real HTTP requests to `slurm-heal serve`'s application
(werkzeug's client), signed as Slack signs them; the signature check is held to Slack's
own documented example (tests/data/real/slack/). The ``block_actions`` payloads are
written for the test in the shape Slack's "Block actions payloads" reference gives.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
from werkzeug.test import Client

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.api.slack import Interactions
from slurm_heal.location import Location
from slurm_heal.models import Phase, Plan, State
from slurm_heal.notify.events import Event, cycle_events
from slurm_heal.notify.slack import ACTIONS_BLOCK, Slack, approval_blocks
from slurm_heal.sections import SlackSettings
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Evidence, Severity
from tests.apiserve import make_tokens
from tests.unit.test_api_serve import _proposal

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "slack"
NOW = datetime.now(timezone.utc)
SIGNING = "test-signing-secret-0123456789abcdef"


class FakeSlackApi:
    """Slack's Web API as far as slurm-heal calls it, on 127.0.0.1: every call kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        calls = self.calls

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                body = (json.loads(raw) if self.headers.get("Content-Type", "").startswith(
                    "application/json") else {k: v[0] for k, v in parse_qs(raw).items()})
                method = self.path.rsplit("/", 1)[-1]
                calls.append((method, body, self.headers.get("Authorization", "")))
                if self.headers.get("Authorization") != "Bearer xoxb-test-token":
                    answer: dict[str, Any] = {"ok": False, "error": "invalid_auth"}
                else:
                    answer = {"ok": True, "channel": "C0HEAL", "ts": "1767225600.000100",
                              "message": {"text": body.get("text", "")}}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def of(self, method: str) -> list[dict[str, Any]]:
        return [body for m, body, _auth in self.calls if m == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slack_api() -> Iterator[FakeSlackApi]:
    api = FakeSlackApi()
    yield api
    api.close()


def _settings(root: Path, base_url: str) -> SlackSettings:
    token = root / "slack-token"
    token.write_text("xoxb-test-token\n")
    secret = root / "slack-signing"
    secret.write_text(SIGNING + "\n")
    return SlackSettings(token_file=token, channel="C0HEAL", signing_secret_file=secret,
                         users={"U0ALICE": "alice", "U0VICTOR": "victor",
                                "U0GHOST": "nobody"},
                         base_url=base_url)


def _approval() -> Event:
    rem = _proposal()
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                  summary="GSP timeout", first_seen=NOW, last_seen=NOW,
                  evidence=(Evidence(source="kmsg", text="NVRM: Xid (PCI:0000:3b:00): 119, "
                             "pid=1234, name=python, Timeout after 6s of waiting for RPC"),))
    [event] = [e for e in cycle_events(State(), State(remediations=(rem,)),
                                       Plan(updates=(rem,)), (), {"gpu01": [alert]}, NOW)
               if e.kind == "approval"]
    return event.model_copy(update={"link": "https://heal.example.org/remediations/"
                                            "r-0000proposal?link=abc.def"})


# --------------------------------------------------------------------------- the message


def test_an_approval_is_posted_with_buttons_evidence_nvidias_advice_and_the_rule(
        tmp_path: Path, slack_api: FakeSlackApi) -> None:
    slack = Slack(_settings(tmp_path, slack_api.url))
    event = _approval()
    assert slack.wants(event)
    assert slack.send(event)
    [(method, body, auth)] = slack_api.calls
    assert method == "chat.postMessage" and auth == "Bearer xoxb-test-token"
    assert body["channel"] == "C0HEAL" and "approval needed" in body["text"]
    text = json.dumps(body["blocks"])
    assert "P2:default" in text  # the rule that asks a person
    assert "GSP_RPC_TIMEOUT" in text and "RESET_GPU" in text  # NVIDIA's advice
    assert "Timeout after 6s of waiting for RPC" in text  # the evidence, unchanged
    [actions] = [b for b in body["blocks"] if b.get("block_id") == ACTIONS_BLOCK]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert set(buttons) == {"approve", "deny", "open"}
    assert json.loads(buttons["approve"]["value"]) == {
        "r": "r-0000proposal", "n": "gpu01", "g": _proposal().generation}
    assert buttons["open"]["url"].startswith("https://heal.example.org/remediations/")


def test_slack_refusing_the_token_is_a_failed_delivery_the_queue_retries(
        tmp_path: Path, slack_api: FakeSlackApi) -> None:
    slack = Slack(_settings(tmp_path, slack_api.url), token="xoxb-revoked")
    assert slack.send(_approval()) is False


def test_an_unreachable_slack_is_a_failed_delivery_never_an_error(tmp_path: Path) -> None:
    slack = Slack(_settings(tmp_path, "http://127.0.0.1:9/api/"))
    assert slack.send(_approval()) is False


def test_every_section_fits_what_slack_takes() -> None:
    event = _approval().model_copy(update={"evidence": tuple(
        {"source": "kmsg", "text": "x" * 500} for _ in range(20))})
    for block in approval_blocks(event):
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= 3000


# --------------------------------------------------------------------------- signatures


class _At:
    def __init__(self, now: int) -> None:
        self.t = now

    def now(self) -> float:
        return float(self.t)


def test_slacks_documented_signing_example_verifies_and_nothing_else_does(
        tmp_path: Path) -> None:
    """Slack's own example (its docs' signing secret, timestamp, body and signature)."""
    doc = json.loads((REAL / "verifying-requests-example.json").read_text())
    secret = tmp_path / "signing"
    secret.write_text(doc["signing_secret"])
    settings = SlackSettings(token_file=secret, channel="C1", signing_secret_file=secret)
    ts = int(doc["timestamp"])
    body = doc["body"].encode()
    inside = Interactions(None, settings, clock=_At(ts + 30))  # type: ignore[arg-type]
    assert inside.verified(body, doc["timestamp"], doc["signature"])
    assert not inside.verified(body.replace(b"foobar", b"foobaz"), doc["timestamp"],
                               doc["signature"])
    assert not inside.verified(body, str(ts + 1), doc["signature"])
    assert not inside.verified(body, doc["timestamp"], None)
    assert not inside.verified(body, "not-a-time", doc["signature"])
    late = Interactions(None, settings, clock=_At(ts + 5 * 60 + 1))  # type: ignore[arg-type]
    assert not late.verified(body, doc["timestamp"], doc["signature"])
    secret.write_text("another-secret-of-some-length")
    other = Interactions(None, settings, clock=_At(ts))  # type: ignore[arg-type]
    assert not other.verified(body, doc["timestamp"], doc["signature"])


# --------------------------------------------------------------------------- presses


class Site:
    def __init__(self, root: Path, api: FakeSlackApi) -> None:
        self.state_dir = root / "state"
        self.state_dir.mkdir()
        (self.state_dir / "heartbeat").write_text(NOW.isoformat())
        self.store = Store(self.state_dir)
        self.rem = _proposal()
        with self.store.transaction() as txn:
            txn.state = State(remediations=(self.rem,))
        self.tokens = make_tokens(root / "tokens.toml")
        self.api = api
        self.app = ApiApp(ApiSettings(tokens=root / "tokens.toml"),
                          Location(state_dir=self.state_dir, source="test"), slurm=None)
        self.app.slack_settings = _settings(root, api.url)
        self.client = Client(self.app)
        self.message = approval_blocks(_approval())

    def payload(self, user: str, action: str = "approve",
                generation: str | None = None) -> dict[str, Any]:
        value = json.dumps({"r": self.rem.id, "n": "gpu01",
                            "g": generation or self.rem.generation})
        return {
            "type": "block_actions",
            "team": {"id": "T0HEAL", "domain": "heal"},
            "user": {"id": user, "username": user.lower(), "team_id": "T0HEAL"},
            "api_app_id": "A0HEAL", "token": "verification-token-unused",
            "container": {"type": "message", "message_ts": "1767225600.000100",
                          "channel_id": "C0HEAL", "is_ephemeral": False},
            "trigger_id": "123.456.abc",
            "channel": {"id": "C0HEAL", "name": "gpu-ops"},
            "message": {"type": "message", "ts": "1767225600.000100", "bot_id": "B0HEAL",
                        "text": "slurm-heal: approval needed", "blocks": self.message},
            "response_url": "https://hooks.slack.com/actions/T0HEAL/1/abc",
            "actions": [{"action_id": action, "block_id": ACTIONS_BLOCK,
                         "type": "button", "value": value,
                         "text": {"type": "plain_text", "text": action.title()},
                         "action_ts": "1767225601.000200"}],
        }

    def press(self, payload: dict[str, Any], *, secret: str = SIGNING,
              at: int | None = None) -> Any:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        ts = str(at if at is not None else int(time.time()))
        sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body,
                               hashlib.sha256).hexdigest()
        return self.client.post("/api/v1/slack/interactions", data=body,
                                content_type="application/x-www-form-urlencoded",
                                headers={"X-Slack-Request-Timestamp": ts,
                                         "X-Slack-Signature": sig})

    def last_update(self) -> dict[str, Any]:
        updates = self.api.of("chat.update")
        assert updates, "the message was not updated"
        return updates[-1]


@pytest.fixture
def site(tmp_path: Path, slack_api: FakeSlackApi) -> Site:
    return Site(tmp_path, slack_api)


def _note(update: dict[str, Any]) -> str:
    return str(update["blocks"][-1]["text"]["text"])


def _has_buttons(update: dict[str, Any]) -> bool:
    return any(b.get("block_id") == ACTIONS_BLOCK for b in update["blocks"])


def test_approve_in_slack_queues_one_decision_as_the_mapped_user_and_updates_the_message(
        site: Site) -> None:
    resp = site.press(site.payload("U0ALICE"))
    assert resp.status_code == 200, resp.text
    [cmd] = site.store.load().inbox
    assert (cmd.kind, cmd.by, cmd.channel, cmd.remediation, cmd.generation) == (
        "approve", "alice", "slack", site.rem.id, site.rem.generation)
    update = site.last_update()
    assert update["channel"] == "C0HEAL" and update["ts"] == "1767225600.000100"
    assert re.search(r"\*Approved\* by alice \(<@U0ALICE>\) via Slack", _note(update))
    assert not _has_buttons(update)  # decided: the buttons go


def test_two_clicks_are_one_decision(site: Site) -> None:
    site.press(site.payload("U0ALICE"))
    site.press(site.payload("U0ALICE"))  # the same person again
    site.press(site.payload("U0ALICE", action="deny"))  # then the other button
    [cmd] = site.store.load().inbox
    assert cmd.kind == "approve"
    assert "one decision is enough" in _note(site.last_update())


def test_an_unmapped_slack_user_is_refused_and_the_message_says_so(site: Site) -> None:
    resp = site.press(site.payload("U0STRANGER"))
    assert resp.status_code == 200
    assert site.store.load().inbox == ()
    update = site.last_update()
    assert "<@U0STRANGER> is not mapped to a console user" in _note(update)
    assert _has_buttons(update)  # still waits for someone who may decide


@pytest.mark.parametrize(("user", "words"), [
    ("U0VICTOR", "viewer role"),
    ("U0GHOST", "the console does not know"),
])
def test_a_viewer_or_a_user_the_console_does_not_know_cannot_decide(
        site: Site, user: str, words: str) -> None:
    site.press(site.payload(user))
    assert site.store.load().inbox == ()
    assert words in _note(site.last_update())


@pytest.mark.parametrize(("change", "words"), [
    ({"phase": Phase.APPROVED, "approved_by": "bob"}, "already decided"),
    ({"phase": Phase.WITHDRAWN}, "already decided"),
    ({"action": Action.REBUILD}, "older proposal"),
])
def test_a_press_on_a_proposal_that_changed_is_refused_with_words(
        site: Site, change: dict[str, Any], words: str) -> None:
    with site.store.transaction() as txn:
        txn.state = State(remediations=(site.rem.model_copy(update=change),))
    site.press(site.payload("U0ALICE"))
    assert site.store.load().inbox == ()
    update = site.last_update()
    assert words in _note(update) and _note(update).startswith("Refused")
    assert not _has_buttons(update)


def test_a_press_slack_did_not_sign_or_an_old_one_is_refused_and_nothing_changes(
        site: Site) -> None:
    forged = site.press(site.payload("U0ALICE"), secret="not-the-signing-secret")
    assert forged.status_code == 401 and forged.json["kind"] == "BadSignature"
    replayed = site.press(site.payload("U0ALICE"), at=int(time.time()) - 6 * 60)
    assert replayed.status_code == 401
    assert site.store.load().inbox == () and site.api.calls == []


def test_without_slack_configured_the_endpoint_says_so(tmp_path: Path) -> None:
    app = ApiApp(ApiSettings(tokens=None, trusted_proxies=()),
                 Location(state_dir=tmp_path, source="test"), slurm=None)
    resp = Client(app).post("/api/v1/slack/interactions", data=b"payload=%7B%7D",
                            content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 404 and "[notify.slack]" in resp.json["detail"]


def test_the_press_is_a_decision_the_engine_records_via_slack(site: Site) -> None:
    """The whole way: the press's command, consumed by decide(), is in the audit."""
    from slurm_heal.config import policy_from_dict
    from tests.policycore import decide
    from tests.unit.test_approval_links import _view

    site.press(site.payload("U0ALICE"))
    state = site.store.load()
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL, summary="",
                  first_seen=NOW - timedelta(minutes=6), last_seen=NOW)
    plan = decide(_view(), state, NOW, policy_from_dict({}), {"gpu01": [alert]})
    [r] = [u for u in plan.updates if u.id == site.rem.id]
    assert r.approved_by == "alice"
    assert any(s.why.startswith("approved by alice via slack") for s in r.steps)


def test_the_daemons_queue_sends_approvals_to_slack_beside_the_other_routes(
        tmp_path: Path, slack_api: FakeSlackApi) -> None:
    """SPEC O3, O7: Slack is one more route of the persisted queue (retried like the
    others); only the kinds [notify.slack] names go there."""
    from slurm_heal.controller import CycleFacts
    from slurm_heal.notify import Notifications
    from slurm_heal.sections import NotifySettings
    from tests.unit.test_approval_links import _view

    rem = _proposal()
    settings = _settings(tmp_path, slack_api.url)
    n = Notifications(NotifySettings(), tmp_path, clock=lambda: NOW, slack=Slack(settings))
    outcome = rem.model_copy(update={"id": "r-done", "phase": Phase.DONE})
    n(CycleFacts(at=NOW, view=_view(), before=State(), after=State(remediations=(rem,)),
                 plan=Plan(updates=(rem, outcome)), executed=(), duration_s=0.0))
    assert n.deliver_due() == 1
    [posted] = slack_api.of("chat.postMessage")
    assert "approval needed" in posted["text"]  # the outcome is not a kind Slack wants
    assert n.depth() == 0


def test_the_documented_slack_setup_loads_and_policy_check_says_what_is_missing(
        tmp_path: Path) -> None:
    """docs/notifications.md's [notify.slack] example is a config slurm-heal reads; a
    Slack section without a signing secret or users is warned about (every press would
    be refused)."""
    from slurm_heal.config import policy_from_dict
    from slurm_heal.configcheck import check_config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "notifications.md").read_text()
    [block] = [b for b in re.findall(r"```toml\n(.*?)```", doc, re.S) if "[notify.slack]" in b]
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    raw = tomllib.loads("\n".join(line.strip() for line in block.splitlines()))
    policy = policy_from_dict(raw)
    assert policy.notify.slack is not None
    assert policy.notify.slack.users == {"U0123ABCD": "alice", "U0456EFGH": "bob"}
    manifest = re.search(r"request_url: (\S+)", doc)
    assert manifest and manifest.group(1).endswith("/api/v1/slack/interactions")

    cfg = tmp_path / "heal.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{tmp_path}"\n[api]\npublic_url = '
                   '"https://heal.example.org"\n[notify.slack]\ntoken_file = "/x"\n'
                   'channel = "C1"\n')
    warnings = check_config(cfg, build_provider=False).warnings
    assert any("signing_secret_file is unset" in w for w in warnings)
    assert any("users is empty" in w for w in warnings)
    with pytest.raises(Exception, match="not a Slack member id"):
        policy_from_dict({"notify": {"slack": {"token_file": "/x", "channel": "C1",
                                               "users": {"alice": "alice"}}}})


@pytest.mark.parametrize(("routes", "twice"), [
    ('urls = ["slack://T000/B000/XXXX"]\n', "notify.urls"),
    ('[[notify.routes]]\nurls = ["https://hooks.slack.com/services/T0/B0/XX"]\n'
     'kinds = ["approval", "alert"]\n', "notify.routes[0]"),
    ('[[notify.routes]]\nurls = ["slack://T000/B000/XXXX"]\nkinds = ["alert"]\n', None),
    ('urls = ["mailto://ops:pw@example.org"]\n', None),
])
def test_policy_check_warns_when_apprise_and_notify_slack_both_post_an_event(
        tmp_path: Path, routes: str, twice: str | None) -> None:
    """SPEC O3, O7: an Apprise route to Slack that takes a kind [notify.slack] posts
    (approvals by default) would send each such event to Slack twice: `policy check`
    names the route and the kinds; a route of other kinds, or to elsewhere, is quiet."""
    from slurm_heal.configcheck import check_config

    cfg = tmp_path / "heal.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{tmp_path}"\n[notify]\n{routes}'
                   '[notify.slack]\ntoken_file = "/x"\nchannel = "C1"\n'
                   'signing_secret_file = "/y"\n[notify.slack.users]\nU0123ABCD = "alice"\n')
    said = [w for w in check_config(cfg, build_provider=False).warnings if "twice" in w]
    if twice is None:
        assert said == []
    else:
        assert len(said) == 1 and said[0].startswith(f"{cfg}: {twice} posts to Slack")
        assert "each approval event reaches Slack twice" in said[0]


def test_two_operators_pressing_at_once_make_one_decision(site: Site, tmp_path: Path) -> None:
    from slurm_heal.api.auth import add_token

    add_token(tmp_path / "tokens.toml", "bob", "operator")
    site.app.slack_settings = site.app.slack_settings.model_copy(update={
        "users": {"U0ALICE": "alice", "U0BOB": "bob"}})
    got: list[int] = []
    presses = [threading.Thread(target=lambda u=u, a=a: got.append(
        site.press(site.payload(u, action=a)).status_code))
        for u, a in (("U0ALICE", "approve"), ("U0BOB", "deny")) * 3]
    for t in presses:
        t.start()
    for t in presses:
        t.join(30)
    assert got == [200] * 6
    [cmd] = site.store.load().inbox
    assert cmd.channel == "slack" and cmd.by in ("alice", "bob")
