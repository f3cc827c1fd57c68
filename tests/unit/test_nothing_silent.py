"""SPEC O6 Nothing silent (issue 25 items 1-3): a state that holds a node or a
remediation is shown in `status`, `explain`, the API and the console with its reason and
what resolves it, and notified once.

Through the real commands (click's CliRunner on `slurm_heal.cli.cli` with an in-memory
Slurm passed as ``obj``), the API's own overview function, the console's own template,
and a real controller cycle feeding the real notification queue.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
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
from slurm_heal.models import mark
from slurm_heal.notify import Notifications, notify_settings
from slurm_heal.notify.events import Event
from slurm_heal.providers import make_provider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from tests.fakes import Clock

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
    return Controller(slurm=slurm, provider=make_provider(policy.provider.table),
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
    from slurm_heal.readmodel.nodepage import parse_query

    page = overview(src, parse_query({}))  # the console's overview: the API's and a page
    html = app.jinja.get_template("overview.html").render(
        me=None, csrf="", flash=None, path="/", new_key=lambda: "k", o=page)
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


# ------------------------------------------------------------------ item 2: waiting for evidence
REQUEST = "heal-request: reboot detector=ibmon id=4711 link flaps"  # the README's example


def _waiting_rig(tmp_path: Path, policy: str = "") -> tuple[MemorySlurm, Controller,
                                                             Notifications, list[Event],
                                                             Clock[datetime]]:
    clock = Clock(T0)
    slurm = MemorySlurm([(f"gpu0{i}", "a") for i in range(1, 5)], clock=clock)
    sent: list[Event] = []

    def send(urls: list[str], event: Event) -> bool:
        sent.append(event)
        return True

    queue = Notifications(notify_settings({"urls": ["json://127.0.0.1:9/hook"]}),
                          tmp_path / "state", send=send, clock=clock)
    cfg = tmp_path / "heal.toml"
    cfg.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n' + policy)
    pol = load_policy(cfg)
    ctl = Controller(slurm=slurm, provider=make_provider(pol.provider.table),
                     store=Store(tmp_path / "state"), policy=pol, clock=clock,
                     observers=[queue])
    return slurm, ctl, queue, sent, clock


def _cycles(ctl: Controller, queue: Notifications, n: int = 3) -> None:
    for _ in range(n):
        ctl.cycle()
        queue.deliver_due()


def test_a_detector_request_without_evidence_says_it_waits_and_is_not_put_to_a_person(
        tmp_path: Path) -> None:
    """SPEC P1/Q4, O6: said when taken, with the key that changes it; one notification,
    and no approval request to a person for what cannot run."""
    slurm, ctl, queue, sent, _ = _waiting_rig(tmp_path)
    slurm.drain("gpu01", REQUEST)
    _cycles(ctl, queue)
    [rem] = Store(tmp_path / "state").load().remediations
    assert rem.phase.value == "proposed" and not rem.data.approval_pending
    taken = rem.steps[0].why
    assert "waits for a confirmed alert on gpu01: SPEC P1" in taken, taken
    assert "set requests.detector_is_evidence = true to take requests as evidence" in taken
    assert [e.kind for e in sent] == ["person"], [(e.kind, e.title) for e in sent]
    assert "waits for a confirmed alert on gpu01" in sent[0].text


def test_a_request_waiting_for_evidence_is_shown_so_in_status_explain_api_and_console(
        tmp_path: Path) -> None:
    """SPEC O6: waiting for evidence everywhere, never a green "approved"."""
    slurm, ctl, queue, _, _ = _waiting_rig(tmp_path)
    slurm.drain("gpu01", REQUEST)
    _cycles(ctl, queue, 2)
    state = str(tmp_path / "state")
    text = _cli(["status", "--state-dir", state], slurm).stdout
    assert "gpu01 reboot (request) WAITING FOR EVIDENCE" in text, text
    assert "requests.detector_is_evidence" in text
    doc = json.loads(_cli(["status", "--json", "--state-dir", state], slurm).stdout)
    assert "SPEC P1" in doc["in_flight"][0]["waiting_for"]
    explained = _cli(["explain", "gpu01", "--state-dir", state], slurm).stdout
    assert "WAITING FOR EVIDENCE: waits for a confirmed alert on gpu01" in explained, explained
    assert "waiting for evidence (SPEC P1)" in explained
    got = json.loads(_cli(["explain", "gpu01", "--json", "--state-dir", state], slurm).stdout)
    assert "SPEC P1" in got["open_remediations"][0]["waiting_for_evidence"]
    loc = Location(state_dir=tmp_path / "state", source="--state-dir")
    o = overview(Sources(loc, lambda: slurm))
    assert o["open_remediations"][0]["waiting_for_evidence"] is True
    app = ApiApp(ApiSettings(), loc, slurm=lambda: slurm)
    html = app.jinja.get_template("overview.html").render(
        me=None, csrf="", flash=None, path="/", new_key=lambda: "k", o=o)
    assert "waiting for evidence</span>" in html and "phase-approved" not in html


def test_a_persons_request_without_evidence_says_which_key_and_waits(tmp_path: Path) -> None:
    """SPEC P1/Q4, O6: `slurm-heal request NODE reboot` through the real command."""
    slurm, ctl, queue, sent, _ = _waiting_rig(tmp_path)
    state = str(tmp_path / "state")
    queued = _cli(["request", "gpu02", "reboot", "--force", "--state-dir", state,
                   "--reason", "looks slow"], slurm)
    assert queued.exit_code == 0, queued.output
    assert "this waits for one: SPEC P1; set requests.operator_is_evidence = true" \
        in queued.stdout, queued.stdout
    _cycles(ctl, queue)
    [rem] = Store(tmp_path / "state").load().remediations
    assert "set requests.operator_is_evidence = true" in rem.steps[0].why, rem.steps
    assert rem.phase.value == "proposed" and rem.data.blocked == mark("P1")
    assert [e.kind for e in sent] == ["person"], [(e.kind, e.title) for e in sent]


def test_the_wait_for_evidence_is_bounded_then_the_request_is_withdrawn(tmp_path: Path) -> None:
    """SPEC O6: requests.evidence_wait (here 30m), then withdrawn; the detector's own
    drain is the detector's (never resumed by us), and the outcome is notified."""
    slurm, ctl, queue, sent, clock = _waiting_rig(tmp_path, '[requests]\nevidence_wait = "30m"\n')
    slurm.drain("gpu01", REQUEST)
    _cycles(ctl, queue, 1)
    clock.now = T0 + timedelta(minutes=29)
    _cycles(ctl, queue, 1)
    assert not Store(tmp_path / "state").load().remediations[0].phase.terminal
    clock.now = T0 + timedelta(minutes=30)
    _cycles(ctl, queue, 2)
    [rem] = Store(tmp_path / "state").load().remediations
    assert rem.phase.value == "withdrawn", rem.steps
    assert "within 30m (requests.evidence_wait)" in rem.steps[-2].why + rem.steps[-1].why
    assert slurm.node("gpu01").reason == REQUEST  # not ours to undo (house style 2)
    assert [e.kind for e in sent] == ["person", "outcome"], [e.title for e in sent]


def test_a_request_taken_under_our_cordon_is_released_when_the_wait_ends() -> None:
    """SPEC O6: after the wait the node is released where our marker holds it."""
    from slurm_heal.config import policy_from_dict
    from slurm_heal.models import Command, State
    from slurm_heal.types import ClusterView, NodeInfo
    from tests.policycore import decide

    pol = policy_from_dict({})
    cmd = Command(id="c1", kind="request", by="alice", node="gpu01", action="reboot",
                  at=T0)
    nodes = tuple(NodeInfo(name=f"gpu0{i}", states=frozenset({"IDLE"}), partitions=("a",))
                  for i in range(1, 4))
    plan = decide(ClusterView(nodes=nodes), State(inbox=(cmd,)), T0, pol, {})
    [rem] = plan.updates
    assert rem.data.blocked == mark("P1") and plan.next_wake == T0 + timedelta(hours=1)
    # our marker on the node (e.g. the node check's cordon for this request)
    from slurm_heal import reasons
    ours = reasons.format_marker(fault="request", remediation=rem.id, by="controller")
    held = (NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), partitions=("a",),
                     reason=ours),) + nodes[1:]
    later = decide(ClusterView(nodes=held), State(remediations=(rem,)),
                   T0 + timedelta(hours=1), pol, {})
    assert [r.phase.value for r in later.updates] == ["withdrawn"]
    assert [e.kind for e in later.effects] == ["release"]


@pytest.mark.parametrize(("value", "words"), [(3600, "requests.evidence_wait"),
                                             ("1 hour", "requests.evidence_wait")])
def test_evidence_wait_is_a_policy_duration_validated_as_every_other(value: object,
                                                                     words: str) -> None:
    from slurm_heal.config import policy_from_dict
    from slurm_heal.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        policy_from_dict({"requests": {"evidence_wait": value}})
    assert words in str(err.value)
    assert policy_from_dict({"requests": {"evidence_wait": "90m"}}).requests.evidence_wait \
        == timedelta(minutes=90)


# ------------------------------------------------------------------ item 3: provider unreachable
def _outage_rig(tmp_path: Path) -> tuple[MemorySlurm, Controller, Notifications, list[Event],
                                         Clock[datetime]]:
    """An Xid 119 on gpu01 (approved automatically by the default policy) and a provider
    that refuses every connection (nothing listens on 127.0.0.1:9)."""
    from slurm_heal import extra
    from slurm_heal.types import Alert, Severity

    slurm, _, queue, sent, clock = _waiting_rig(tmp_path)
    cfg = tmp_path / "heal.toml"
    cfg.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\nattempts = 1\n'
                   '[approvals]\ndefault = "auto"\n')
    pol = load_policy(cfg)
    ctl = Controller(slurm=slurm, provider=make_provider(pol.provider.table),
                     store=Store(tmp_path / "state"), policy=pol, clock=clock,
                     observers=[queue])
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                  summary="GSP timeout", first_seen=T0, last_seen=T0)
    slurm.set_extra("gpu01", extra.KEY, extra.our_section([alert], T0))
    return slurm, ctl, queue, sent, clock


def _until_acting(ctl: Controller, queue: Notifications, clock: Clock[datetime],
                  store: Store) -> None:
    for _ in range(10):
        ctl.cycle()
        queue.deliver_due()
        clock.now += timedelta(minutes=1)
        rems = store.load().remediations
        if rems and rems[0].phase.value == "acting":
            return
    raise AssertionError(f"never acting: {[s.why for s in store.load().remediations[0].steps]}")


def test_an_unreachable_provider_is_shown_beside_the_remediation_with_its_age(
        tmp_path: Path) -> None:
    """SPEC O6: status, explain, the API and the console show the last provider error
    and how long ago it was, not only "acting"."""
    slurm, ctl, queue, _, clock = _outage_rig(tmp_path)
    store = Store(tmp_path / "state")
    _until_acting(ctl, queue, clock, store)
    ctl.cycle()  # the act, or its poll, meets a refused connection
    act = next(a for a in store.load().remediations[0].attempts if a.effect == "act")
    assert act.outcome is None and act.errors >= 1 and act.last_error, act
    state = str(tmp_path / "state")
    text = _cli(["status", "--state-dir", state], slurm).stdout
    assert "PROVIDER NOT ANSWERING: " in text and act.last_error[:40] in text, text
    assert "the last " in text and " ago: " in text
    explained = _cli(["explain", "gpu01", "--state-dir", state], slurm).stdout
    assert "PROVIDER NOT ANSWERING: " in explained and act.last_error[:40] in explained
    got = json.loads(_cli(["explain", "gpu01", "--json", "--state-dir", state], slurm).stdout)
    trouble = got["open_remediations"][0]["provider_error"]
    assert trouble["tries"] == act.errors and trouble["error"] == act.last_error
    doc = json.loads(_cli(["status", "--json", "--state-dir", state], slurm).stdout)
    assert doc["in_flight"][0]["provider_errors"] == act.errors
    loc = Location(state_dir=tmp_path / "state", source="--state-dir")
    o = overview(Sources(loc, lambda: slurm))
    assert o["open_remediations"][0]["provider_error"] is True
    app = ApiApp(ApiSettings(), loc, slurm=lambda: slurm)
    html = app.jinja.get_template("overview.html").render(
        me=None, csrf="", flash=None, path="/", new_key=lambda: "k", o=o)
    assert "provider not answering: " in html


def test_an_unreachable_provider_is_notified_once_after_the_bounded_tries(
        tmp_path: Path) -> None:
    """SPEC O6: safety.provider_errors_notify (3) failed tries, then one notification."""
    slurm, ctl, queue, sent, clock = _outage_rig(tmp_path)
    store = Store(tmp_path / "state")
    _until_acting(ctl, queue, clock, store)
    told: list[Event] = []
    for _ in range(8):
        ctl.cycle()
        queue.deliver_due()
        clock.now += timedelta(minutes=1)
        act = next(a for a in store.load().remediations[0].attempts if a.effect == "act")
        told = [e for e in sent if "did not answer" in e.text]
        if act.errors < 3:
            assert not told, "notified before safety.provider_errors_notify tries"
    assert act.errors >= 5 and len(told) == 1, [e.title for e in sent]
    assert act.last_error[:40] in told[0].text and "safety.act_timeout" in told[0].text


def test_a_waiting_request_goes_on_to_approval_once_its_evidence_comes(tmp_path: Path) -> None:
    """SPEC P1/Q4, P2: the wait ends with a confirmed alert; only then is a person asked."""
    from slurm_heal import extra
    from slurm_heal.types import Alert, Severity

    slurm, ctl, queue, sent, clock = _waiting_rig(tmp_path)
    slurm.drain("gpu01", REQUEST)
    _cycles(ctl, queue, 2)
    alert = Alert(node="gpu01", fault="ib.link_down", severity=Severity.CRITICAL,
                  summary="port 1 down", first_seen=T0, last_seen=T0)
    clock.now = T0 + timedelta(minutes=20)
    slurm.set_extra("gpu01", extra.KEY, extra.our_section([alert], clock.now))
    _cycles(ctl, queue, 2)
    [rem] = Store(tmp_path / "state").load().remediations
    assert rem.data.approval_pending and rem.phase.value == "proposed", rem.steps
    assert [e.kind for e in sent if e.node == "gpu01"][:1] == ["person"]
    assert "approval" in [e.kind for e in sent], [(e.kind, e.title) for e in sent]
    text = _cli(["status", "--state-dir", str(tmp_path / "state")], slurm).stdout
    assert "WAITING FOR EVIDENCE" not in text and "Waiting for approval: 1" in text, text
