"""SPEC O7 (issue 40): every notification that needs a person links to its decision, the
link is signed, short-lived and bound to its proposal, a GET of it never acts, and every
decision records its channel (P4).

The console runs in this process (werkzeug's test client against `ApiApp`, the app
`slurm-heal serve` runs); the engine is `decide()` itself.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from slurm_heal import links
from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.config import policy_from_dict
from slurm_heal.configcheck import check_config
from slurm_heal.location import Location
from slurm_heal.models import Command, Phase, Plan, Remediation, State
from slurm_heal.notify import Notifications
from slurm_heal.notify.events import LINK_MARK, Event, cycle_events
from slurm_heal.notify.linking import Linker
from slurm_heal.sections import NotifySettings
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, ClusterView, Evidence, NodeInfo, Severity
from tests.apiserve import make_tokens
from tests.policycore import decide
from tests.unit.test_api_serve import _proposal

NOW = datetime.now(timezone.utc)
PUBLIC = "https://heal.example.org/console"
SECRET = b"k" * 40


def _token(rem: Remediation, at: datetime = NOW, ttl: timedelta = timedelta(hours=1)) -> str:
    return links.sign(SECRET, links.claims_for(rem, at, ttl))


# --------------------------------------------------------------------------- the token


def test_a_link_token_verifies_only_unchanged_and_in_time() -> None:
    rem = _proposal()
    token = _token(rem)
    claims = links.verify(SECRET, token, NOW)
    assert isinstance(claims, links.Claims)
    assert (claims.remediation, claims.node, claims.action, claims.generation) == (
        rem.id, "gpu01", "reboot", rem.generation)
    assert links.stale(claims, rem) is None
    head, _, mac = token.partition(".")
    forged = links._b64(links._unb64(head).replace(b"gpu01", b"gpu02")) + "." + mac
    assert "not signed by this slurm-heal" in str(links.verify(SECRET, forged, NOW))
    assert "not signed" in str(links.verify(b"x" * 40, token, NOW))  # another key
    assert "malformed" in str(links.verify(SECRET, token[:10], NOW))
    later = links.verify(SECRET, token, NOW + timedelta(hours=2))
    assert isinstance(later, str) and "expired" in later


def test_a_link_for_an_older_proposal_another_node_or_a_decided_one_says_so() -> None:
    rem = _proposal()
    claims = links.verify(SECRET, _token(rem), NOW)
    assert isinstance(claims, links.Claims)
    moved = rem.model_copy(update={"node": "gpu02"})
    assert "for node gpu01" in str(links.stale(claims, moved))
    approved = rem.model_copy(update={"phase": Phase.APPROVED, "approved_by": "bob"})
    assert "already decided" in str(links.stale(claims, approved))
    assert "by bob" in str(links.stale(claims, approved))
    # escalated: the same remediation now proposes another action
    rebuilt = rem.model_copy(update={"action": Action.REBUILD,
                                     "escalated_from": Action.REBOOT})
    assert rebuilt.generation != rem.generation
    assert "older proposal" in str(links.stale(claims, rebuilt))
    # proposed again later (a new proposal of the same id): another generation
    again = rem.model_copy(update={"phase_times": {"proposed": NOW}})
    assert "older proposal" in str(links.stale(claims, again))


def test_the_link_secret_is_made_private_and_a_readable_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "link-secret"
    key = links.ensure_secret(path)
    assert len(key) >= links.MIN_SECRET and path.stat().st_mode & 0o077 == 0
    assert links.ensure_secret(path) == key  # made once
    path.chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        links.read_secret(path)


# --------------------------------------------------------------------------- notifications


def _approval_event(rem: Remediation) -> Event:
    plan = Plan(updates=(rem,))
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                  summary="GSP timeout", first_seen=NOW, last_seen=NOW,
                  evidence=(Evidence(source="kmsg", text="NVRM: Xid (PCI:0000:3b:00): 119"),))
    [event] = [e for e in cycle_events(State(), State(remediations=(rem,)), plan, (),
                                       {"gpu01": [alert]}, NOW) if e.kind == "approval"]
    return event


def test_an_approval_notification_carries_a_signed_link_to_its_page(tmp_path: Path) -> None:
    rem = _proposal()
    event = _approval_event(rem)
    assert event.generation == rem.generation and event.rule == "P2:default"
    assert event.evidence and "119" in event.evidence[0]["text"]  # D7: unchanged
    linker = Linker(PUBLIC, tmp_path / "link-secret", timedelta(hours=8), clock=lambda: NOW)
    linked = linker(event, State(remediations=(rem,)))
    assert linked.link is not None
    m = re.fullmatch(re.escape(PUBLIC) + r"/remediations/r-0000proposal\?link=([\w.-]+)",
                     linked.link)
    assert m, linked.link
    claims = links.verify(links.read_secret(tmp_path / "link-secret"), m.group(1), NOW)
    assert isinstance(claims, links.Claims) and claims.generation == rem.generation
    body = linked.body()
    assert f"{LINK_MARK} {linked.link}" in body and "slurm-heal approve r-0000proposal" in body


@pytest.mark.parametrize(("event", "path"), [
    (Event(id="incident:i-1", kind="incident", severity="critical", at=NOW, title="t",
           text="x", node="gpu07"), "/nodes/gpu07"),
    (Event(id="breaker:1", kind="breaker", severity="critical", at=NOW, title="t",
           text="x"), "/controls"),
    (Event(id="person:1", kind="person", severity="warning", at=NOW, title="t", text="x",
           node="gpu03"), "/nodes/gpu03"),
])
def test_incidents_hand_overs_and_the_breaker_link_to_their_page(
        tmp_path: Path, event: Event, path: str) -> None:
    linker = Linker(PUBLIC, tmp_path / "k", timedelta(hours=1))
    assert linker(event, State()).link == PUBLIC + path


def test_an_outcome_needs_no_person_and_gets_no_link(tmp_path: Path) -> None:
    event = Event(id="outcome:r:done", kind="outcome", severity="info", at=NOW, title="t",
                  text="x", node="gpu01", remediation="r-1")
    assert Linker(PUBLIC, tmp_path / "k", timedelta(hours=1))(event, State()).link is None


def test_the_queue_keeps_the_link_made_at_the_cycle(tmp_path: Path) -> None:
    """The daemon's observer links the events before they are queued (never at send
    time, when the proposal may have moved on)."""
    from slurm_heal.controller import CycleFacts

    rem = _proposal()
    sent: list[Event] = []
    n = Notifications(NotifySettings(urls=["json://127.0.0.1:9/"]), tmp_path,
                      send=lambda urls, e: sent.append(e) or True, clock=lambda: NOW,
                      link=Linker(PUBLIC, tmp_path / "k", timedelta(hours=1)))
    facts = CycleFacts(at=NOW, view=_view(), before=State(),
                       after=State(remediations=(rem,)), plan=Plan(updates=(rem,)),
                       executed=(), duration_s=0.0)
    n(facts)
    n.deliver_due()
    [approval] = [e for e in sent if e.kind == "approval"]
    assert approval.link and "?link=" in approval.link


# --------------------------------------------------------------------------- the console


class Console:
    def __init__(self, root: Path) -> None:
        self.state_dir = root / "state"
        self.state_dir.mkdir()
        (self.state_dir / "heartbeat").write_text(NOW.isoformat())
        self.store = Store(self.state_dir)
        self.rem = _proposal()
        with self.store.transaction() as txn:
            txn.state = State(remediations=(self.rem,))
        self.tokens = make_tokens(root / "tokens.toml")
        self.secret_file = self.state_dir / links.SECRET_FILE
        self.secret = links.ensure_secret(self.secret_file)
        self.app = ApiApp(ApiSettings(tokens=root / "tokens.toml", public_url=PUBLIC),
                          Location(state_dir=self.state_dir, source="test"), slurm=None)
        self.client = Client(self.app)

    def token(self, rem: Remediation | None = None, at: datetime = NOW) -> str:
        return links.sign(self.secret, links.claims_for(rem or self.rem, at,
                                                        timedelta(hours=8)))

    def login(self, who: str = "alice", nxt: str = "/") -> Any:
        page = self.client.get("/login", query_string={"next": nxt})
        nonce = re.search(r'name="login_csrf" value="([^"]+)"', page.text)
        assert nonce
        return self.client.post("/login", data={"login_csrf": nonce.group(1),
                                                "token": self.tokens[who], "next": nxt})

    def set_rem(self, rem: Remediation) -> None:
        with self.store.transaction() as txn:
            txn.state = State(remediations=(rem,))


@pytest.fixture
def console(tmp_path: Path) -> Console:
    return Console(tmp_path)


def _form(page: str, field: str) -> str:
    m = re.search(rf'name="{field}" value="([^"]+)"', page)
    assert m, f"no {field} in the page"
    return m.group(1)


def test_following_a_link_asks_for_a_login_then_shows_the_form_and_changes_nothing(
        console: Console) -> None:
    """SPEC O7: a GET of the link never acts; the login applies and leads back to it."""
    path = f"/remediations/{console.rem.id}?link={console.token()}"
    first = console.client.get(path)
    assert first.status_code == 303 and first.headers["Location"].startswith("/login?next=")
    back = console.login(nxt=path)
    assert back.status_code == 303 and back.headers["Location"] == path
    page = console.client.get(path)
    assert page.status_code == 200
    assert "Opening it changed nothing" in page.text and 'id="link-note"' in page.text
    assert links.verify(console.secret, _form(page.text, "link"), NOW) is not None
    assert console.store.load().inbox == ()  # nothing was done by looking


def test_a_decision_from_the_link_carries_its_proposal_and_the_console_channel(
        console: Console) -> None:
    token = console.token()
    path = f"/remediations/{console.rem.id}?link={token}"
    console.login(nxt=path)
    page = console.client.get(path).text
    resp = console.client.post(f"/remediations/{console.rem.id}/approve", data={
        "csrf_token": _form(page, "csrf_token"), "idempotency_key": _form(page, "idempotency_key"),
        "link": _form(page, "link"), "reason": "from the mail"})
    assert resp.status_code == 303, resp.text
    [cmd] = console.store.load().inbox
    assert (cmd.kind, cmd.by, cmd.channel, cmd.generation) == (
        "approve", "alice", "console", console.rem.generation)


@pytest.mark.parametrize(("change", "words"), [
    ({"phase": Phase.APPROVED, "approved_by": "bob"}, "already decided"),
    ({"node": "gpu09"}, "for node gpu01"),
    ({"action": Action.REBUILD, "escalated_from": Action.REBOOT}, "older proposal"),
])
def test_a_stale_link_says_why_offers_nothing_and_its_post_does_nothing(
        console: Console, change: dict[str, Any], words: str) -> None:
    token = console.token()
    console.login()
    fresh = console.client.get(f"/remediations/{console.rem.id}").text  # a form for csrf
    csrf = _form(fresh, "csrf_token")
    console.set_rem(console.rem.model_copy(update=change))
    page = console.client.get(f"/remediations/{console.rem.id}?link={token}")
    assert page.status_code == 200 and words in page.text and "Nothing was done" in page.text
    assert 'name="link"' not in page.text and "/approve" not in page.text
    resp = console.client.post(f"/remediations/{console.rem.id}/approve", data={
        "csrf_token": csrf, "idempotency_key": "k-stale-link-1", "link": token})
    assert resp.status_code == 409 and words in resp.text and "Nothing was done" in resp.text
    assert console.store.load().inbox == ()


def test_a_viewer_follows_the_link_and_is_told_an_operator_decides(console: Console) -> None:
    path = f"/remediations/{console.rem.id}?link={console.token()}"
    console.login("victor", nxt=path)
    page = console.client.get(path).text
    assert "viewer role" in page and "/approve" not in page


def test_the_api_records_its_channel(console: Console) -> None:
    resp = console.client.post(f"/api/v1/remediations/{console.rem.id}/approve",
                               json={"reason": "ok"},
                               headers={"Authorization": f"Bearer {console.tokens['alice']}"})
    assert resp.status_code == 202, resp.text
    [cmd] = console.store.load().inbox
    assert cmd.channel == "api" and cmd.generation is None


# --------------------------------------------------------------------------- the engine


def _view() -> ClusterView:
    return ClusterView(nodes=(NodeInfo(name="gpu01", states=frozenset({"IDLE"}),
                                       partitions=("a",)),
                              NodeInfo(name="gpu02", states=frozenset({"IDLE"}),
                                       partitions=("a",))))


def _decide(cmd: Command) -> Plan:
    rem = _proposal(at=NOW - timedelta(minutes=5))
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL, summary="",
                  first_seen=NOW - timedelta(minutes=6), last_seen=NOW)
    return decide(_view(), State(remediations=(rem,), inbox=(cmd,)), NOW,
                  policy_from_dict({}), {"gpu01": [alert]})


def test_every_decision_says_its_channel_in_the_audit() -> None:
    """SPEC P4, O7: "approved by alice via slack"."""
    rem = _proposal(at=NOW - timedelta(minutes=5))
    for channel in ("cli", "api", "console", "slack"):
        cmd = Command(id=f"c-{channel}", at=NOW, kind="approve", by="alice",
                      remediation=rem.id, node="gpu01", channel=channel,
                      generation=rem.generation if channel == "slack" else None)
        plan = _decide(cmd)
        [r] = [u for u in plan.updates if u.id == rem.id]
        assert r.approved_by == "alice"
        assert any(s.why.startswith(f"approved by alice via {channel}") for s in r.steps)


def test_a_decision_about_another_proposal_is_refused_with_words() -> None:
    cmd = Command(id="c-old", at=NOW, kind="approve", by="alice", remediation="r-0000proposal",
                  node="gpu01", channel="slack", generation="0123456789ab")
    plan = _decide(cmd)
    assert not any(u.phase is Phase.APPROVED for u in plan.updates)
    [rec] = [r for r in plan.records if r.rule == "O7"]
    assert "changed since the message" in rec.why and "alice via slack" in rec.why
    assert "c-old" in plan.consumed


def test_a_command_without_a_channel_reads_and_writes_as_before() -> None:
    """A store written before channels: no key, and none written back."""
    cmd = Command(id="c1", at=NOW, kind="approve", by="bob", node="gpu01")
    doc = cmd.model_dump(mode="json")
    assert "channel" not in doc and "generation" not in doc
    assert Command.model_validate(doc) == cmd


# --------------------------------------------------------------------------- policy check


def _config(tmp_path: Path, api: str) -> Path:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    cfg = tmp_path / "heal.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{state}"\n'
                   '[notify]\nurls = ["json://127.0.0.1:9/"]\n' + api)
    return cfg


def test_policy_check_warns_when_notifications_need_a_link_and_none_is_set(
        tmp_path: Path) -> None:
    report = check_config(_config(tmp_path, ""), build_provider=False)
    [warning] = [w for w in report.warnings if "public_url" in w]
    assert "approval" in warning and "SPEC O7" in warning
    report = check_config(_config(tmp_path, f'[api]\npublic_url = "{PUBLIC}"\n'),
                          build_provider=False)
    assert not [w for w in report.warnings if "public_url" in w]


def test_a_public_url_that_is_no_address_is_refused() -> None:
    from slurm_heal.api.settings import api_settings
    from slurm_heal.errors import ConfigError

    with pytest.raises(ConfigError, match="public_url"):
        api_settings({"public_url": "heal.example.org"})
    assert api_settings({"public_url": "https://h.example/x/"}).public_url == "https://h.example/x"
    assert policy_from_dict({"api": {"public_url": PUBLIC}}).api is not None


def test_the_daemon_links_its_notifications_only_with_a_public_url(tmp_path: Path) -> None:
    from slurm_heal.commands.daemon import _linker

    assert _linker(None, tmp_path) is None
    assert _linker(ApiSettings(), tmp_path) is None
    linker = _linker(ApiSettings(public_url=PUBLIC, link_ttl="1h"), tmp_path)
    assert isinstance(linker, Linker) and linker.public_url == PUBLIC
    assert linker.secret_file == tmp_path / links.SECRET_FILE
    assert linker.ttl == timedelta(hours=1)
