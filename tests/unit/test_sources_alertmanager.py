"""SPEC D13 (issue 39): Alertmanager's webhook into the life cycle. The mapping over real
messages (tests/data/real/alertmanager, captured from Debian's Alertmanager 0.25.0), the
store's one entry per fingerprint (Q3), decide() reading them as evidence (P1, D7, L4),
the receiver's auth and answers, and `policy check`'s warnings."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from werkzeug.test import Client

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.cli import cli
from slurm_heal.config import policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.location import Location
from slurm_heal.models import Phase
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.sources import alertmanager
from slurm_heal.sources.settings import AlertmanagerSource
from slurm_heal.sources.stored import SOURCES_KEY, load, merge
from slurm_heal.store import Store
from slurm_heal.types import Action, ClusterView, NodeInfo, Severity
from tests.apiserve import make_tokens
from tests.policycore import decide

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "alertmanager"
FIRING = json.loads((REAL / "am-0.25.0-webhook-xid48-firing.json").read_text())
RESOLVED = json.loads((REAL / "am-0.25.0-webhook-xid48-resolved.json").read_text())
HOST = "vks-cluster-0-0-np1-worker-xtxww-xw4wp-wn7j2"
NOW = datetime(2026, 12, 2, 10, 19, tzinfo=timezone.utc)
XID_RULE = {"match": {"alertname": "GpuXidError"}, "match_re": {"err_code": "[0-9]+"},
            "node_label": ["Hostname", "instance"], "fault": "gpu.xid.{{ labels.err_code }}"}


def conf(*rules: dict[str, Any]) -> AlertmanagerSource:
    return policy_from_dict({"sources": {"alertmanager": {"map": list(rules)}}}
                            ).sources.alertmanager


def with_labels(msg: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    out = copy.deepcopy(msg)
    for k, v in labels.items():
        if v is None:
            out["alerts"][0]["labels"].pop(k, None)
        else:
            out["alerts"][0]["labels"][k] = v
    return out


# --------------------------------------------------------------------------- mapping


def test_a_real_xid_alert_maps_to_its_node_and_fault_with_the_payload_unchanged() -> None:
    """D13, D7: Hostname names the node, err_code the Xid; the alert kept as sent."""
    [a] = alertmanager.from_webhook(FIRING, conf(XID_RULE), NOW)
    assert (a.source, a.id, a.node, a.fault, a.status) == (
        "alertmanager", "427f8313dff7e2fb", HOST, "gpu.xid.48", "firing")
    assert a.severity is Severity.CRITICAL  # the catalog's for Xid 48
    assert a.rule == "sources.alertmanager.map[0]" and a.problem == "" and a.usable
    assert a.payload == FIRING["alerts"][0]  # every field, as Alertmanager sent it
    assert a.ends_at is None  # Go's zero endsAt while firing is "no end"
    alert = a.alert()
    assert alert.active and alert.detector == "alertmanager"
    assert alert.first_seen == datetime(2026, 12, 2, 10, 18, 15, 515000, tzinfo=timezone.utc)
    [ev] = alert.evidence
    assert ev.source == "alertmanager" and ev.at == "2026-12-02T10:18:15.515Z"
    assert ev.data["payload"]["generatorURL"].startswith("http://")
    assert "reported Xid 48" in alert.summary


def test_the_resolved_message_clears_the_alert() -> None:
    """L4: the same fingerprint, resolved, with its end."""
    [a] = alertmanager.from_webhook(RESOLVED, conf(XID_RULE), NOW)
    assert a.status == "resolved" and a.id == "427f8313dff7e2fb"
    assert a.ends_at == datetime(2026, 12, 2, 10, 18, 17, 515000, tzinfo=timezone.utc)
    assert not a.usable and not a.alert().active


def test_an_alert_no_rule_maps_is_recorded_only() -> None:
    [a] = alertmanager.from_webhook(FIRING, conf({**XID_RULE, "match": {"alertname": "X"}}),
                                    NOW)
    assert (a.node, a.fault) == ("", "") and "no [[sources.alertmanager.map]]" in a.problem
    assert not a.usable


@pytest.mark.parametrize(("labels", "problem"), [
    ({"Hostname": None, "instance": None}, "none of its labels Hostname, instance names"),
    ({"err_code": None}, "the alert has no label 'err_code'"),
])
def test_a_missing_label_is_said_and_no_node_or_fault_is_guessed(
        labels: dict[str, str | None], problem: str) -> None:
    rule = {**XID_RULE, "match_re": {}}
    [a] = alertmanager.from_webhook(with_labels(FIRING, **labels), conf(rule), NOW)
    assert problem in a.problem and "no node is guessed" in a.problem, a.problem
    assert not a.usable and a.rule == "sources.alertmanager.map[0]"


@pytest.mark.parametrize(("value", "nodes"), [
    ("gpu07:9400", ["gpu07"]),
    ("gpu07.cluster.example:9400", ["gpu07"]),
    ("gpu07.cluster.example", ["gpu07"]),
    ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
    ("10.1.2.3:9400", ["10.1.2.3"]),
])
def test_the_node_label_loses_its_port_and_a_host_list_is_one_alert_per_node(
        value: str, nodes: list[str]) -> None:
    msg = with_labels(FIRING, Hostname=None, instance=value)
    got = alertmanager.from_webhook(msg, conf(XID_RULE), NOW)
    assert [a.node for a in got] == nodes
    assert {a.id for a in got} == {"427f8313dff7e2fb"}


def test_a_fixed_fault_and_severity_win_over_the_catalog() -> None:
    rule = {"match": {"alertname": "GpuXidError"}, "fault": "gpu.ecc.dbe",
            "severity": "warning"}
    [a] = alertmanager.from_webhook(FIRING, conf(rule), NOW)
    assert (a.fault, a.severity) == ("gpu.ecc.dbe", Severity.WARNING)


@pytest.mark.parametrize("change", [
    {"version": "3"}, {"alerts": [{"status": "firing"}]}, {"status": "pending"},
])
def test_a_message_that_is_not_version_4_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        alertmanager.from_webhook({**FIRING, **change}, conf(XID_RULE), NOW)


@pytest.mark.parametrize(("rule", "words"), [
    ({"fault": "gpu.xid.{{ labels.err-code }}"}, "a template may only say"),
    ({"fault": "GPU XID"}, "is not a fault id"),
    ({"fault": "gpu.xid.1", "match_re": {"x": "("}}, "is not a regular expression"),
    ({"fault": "gpu.xid.1", "node_label": []}, "names no label"),
    ({"fault": "gpu.xid.1", "colour": "red"}, "colour"),
])
def test_a_bad_mapping_rule_is_refused_naming_its_key(rule: dict[str, Any],
                                                      words: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"sources": {"alertmanager": {"map": [rule]}}})
    assert "sources.alertmanager.map" in str(err.value) and words in str(err.value), err.value


# --------------------------------------------------------------------------- store, Q3


def test_a_second_delivery_updates_the_one_entry_and_keeps_its_first_receipt() -> None:
    first = alertmanager.from_webhook(FIRING, conf(XID_RULE), NOW)
    raw = merge(None, first, NOW, timedelta(hours=24))
    later = NOW + timedelta(minutes=5)
    again = alertmanager.from_webhook(RESOLVED, conf(XID_RULE), later)
    both = merge(raw, again, later, timedelta(hours=24))
    [kept] = load(both)
    assert kept.status == "resolved" and kept.received == NOW and kept.updated == later
    # a resolved alert is forgotten after keep_resolved; a firing one never is
    assert load(merge(both, [], later + timedelta(hours=25), timedelta(hours=24))) == []
    assert len(load(merge(raw, [], later + timedelta(days=30), timedelta(hours=24)))) == 1


# --------------------------------------------------------------------------- decide


def _state_with(msg: dict[str, Any], store: Store, at: datetime = NOW) -> None:
    store.put_source_alerts(alertmanager.from_webhook(msg, conf(XID_RULE), at), at,
                            timedelta(hours=24))


def _view(*names: str) -> ClusterView:
    return ClusterView(nodes=tuple(NodeInfo(name=n, states=frozenset({"IDLE"}),
                                            partitions=("gpu",)) for n in names))


def test_decide_proposes_the_catalogs_remediation_with_the_alert_as_evidence(
        tmp_path: Path) -> None:
    """P1, D13: an Xid 79 alert proposes the catalog's migrate, its source named."""
    store = Store(tmp_path)
    msg = with_labels(FIRING, err_code="79")
    _state_with(msg, store)
    policy = policy_from_dict({"capacity": {"min_available_percent": 0}})
    plan = decide(_view(HOST, "gpu02"), store.load(), NOW + timedelta(seconds=5), policy)
    [rem] = plan.updates
    assert (rem.node, rem.fault, rem.detector, rem.origin) == (
        HOST, "gpu.xid.79", "alertmanager", "alert")
    assert rem.action is Action.MIGRATE and rem.phase is Phase.PROPOSED


def test_an_alert_for_a_node_slurm_does_not_have_opens_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    _state_with(FIRING, store)
    plan = decide(_view("gpu01"), store.load(), NOW + timedelta(seconds=5),
                  policy_from_dict({}))
    assert plan.updates == ()


def test_a_resolved_alert_withdraws_the_recommendation(tmp_path: Path) -> None:
    """L4: proposed (manual approval), then Alertmanager resolves it."""
    store = Store(tmp_path)
    _state_with(FIRING, store)
    policy = policy_from_dict({"capacity": {"min_available_percent": 0}})
    at = NOW + timedelta(seconds=5)
    store.apply(decide(_view(HOST), store.load(), at, policy), at)
    [rem] = store.load().remediations
    assert rem.phase is Phase.PROPOSED
    _state_with(RESOLVED, store, at)
    at2 = at + timedelta(seconds=5)
    store.apply(decide(_view(HOST), store.load(), at2, policy), at2)
    [rem] = store.load().remediations
    assert rem.phase is Phase.WITHDRAWN


def test_a_plan_never_overwrites_the_receivers_alerts(tmp_path: Path) -> None:
    """The store owns data["sources"]: a plan made before a delivery keeps it."""
    store = Store(tmp_path)
    stale = store.load()
    _state_with(FIRING, store)
    plan = decide(_view("gpu01"), stale, NOW, policy_from_dict({}))
    store.apply(plan.model_copy(update={"data": {**stale.data, "noted": {"x": "y"}}}), NOW)
    assert len(load(store.load().data[SOURCES_KEY])) == 1


# --------------------------------------------------------------------------- receiver


@pytest.fixture
def api(tmp_path: Path) -> tuple[Client, dict[str, str], Store]:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
    tokens = make_tokens(tmp_path / "tokens.toml")
    policy = tmp_path / "policy.toml"
    policy.write_text("[[sources.alertmanager.map]]\nmatch = { alertname = \"GpuXidError\" }\n"
                      "fault = \"gpu.xid.{{ labels.err_code }}\"\n")
    slurm = MemorySlurm([(HOST, "gpu")], clock=lambda: datetime.now(timezone.utc))
    app = ApiApp(ApiSettings(tokens=tmp_path / "tokens.toml", bind="127.0.0.1:0"),
                 Location(state_dir=state_dir, source="test"), slurm=lambda: slurm,
                 policy_file=str(policy))
    return Client(app), tokens, Store(state_dir)


URL = "/api/v1/sources/alertmanager"


def test_the_receiver_takes_alertmanagers_message_with_an_operators_token(
        api: tuple[Client, dict[str, str], Store]) -> None:
    client, tokens, store = api
    resp = client.post(URL, json=FIRING, headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    body = resp.get_json()
    assert (body["received"], body["mapped"]) == (1, 1)
    assert body["alerts"][0]["node"] == HOST and body["alerts"][0]["fault"] == "gpu.xid.48"
    [kept] = load(store.load().data[SOURCES_KEY])
    assert kept.payload == FIRING["alerts"][0]
    listed = client.get("/api/v1/sources",
                        headers={"Authorization": f"Bearer {tokens['victor']}"}).get_json()
    assert listed["alerts"][0]["payload"] == FIRING["alerts"][0]
    shown = client.get("/api/v1/alerts", headers={
        "Authorization": f"Bearer {tokens['victor']}"}).get_json()["alerts"]
    assert [(a["node"], a["fault"], a["detector"]) for a in shown] == [
        (HOST, "gpu.xid.48", "alertmanager")]


@pytest.mark.parametrize(("who", "status"), [(None, 401), ("victor", 403), ("bad", 401)])
def test_the_receiver_refuses_a_write_without_an_operators_token(
        api: tuple[Client, dict[str, str], Store], who: str | None, status: int) -> None:
    client, tokens, store = api
    headers = {} if who is None else {"Authorization": f"Bearer {tokens.get(who, 'nope')}"}
    assert client.post(URL, json=FIRING, headers=headers).status_code == status
    assert SOURCES_KEY not in store.load().data


def test_an_alert_for_a_node_slurm_does_not_know_is_recorded_and_shown(
        api: tuple[Client, dict[str, str], Store]) -> None:
    client, tokens, store = api
    msg = with_labels(FIRING, Hostname="gpu99")
    resp = client.post(URL, json=msg, headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert resp.status_code == 200
    [a] = resp.get_json()["alerts"]
    assert a["node"] == "gpu99" and "Slurm does not know a node 'gpu99'" in a["problem"]
    [kept] = load(store.load().data[SOURCES_KEY])
    assert not kept.usable
    shown = client.get("/api/v1/alerts", headers={
        "Authorization": f"Bearer {tokens['victor']}"}).get_json()["alerts"]
    assert "Slurm does not know" in shown[0]["summary"]


@pytest.mark.parametrize(("body", "ctype", "status"), [
    (json.dumps({**FIRING, "version": "3"}), "application/json", 422),
    ("{", "application/json", 400),
    ("x", "text/plain", 415),
])
def test_a_bad_message_is_a_4xx_naming_the_problem(
        api: tuple[Client, dict[str, str], Store], body: str, ctype: str,
        status: int) -> None:
    client, tokens, _store = api
    resp = client.post(URL, data=body, content_type=ctype,
                       headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert resp.status_code == status, resp.get_data(as_text=True)
    if status == 422:
        assert "version" in resp.get_json()["detail"]


# --------------------------------------------------------------------------- policy check


def test_policy_check_warns_about_a_mapping_that_matches_no_fault(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[provider]\ntype = "simulator"\n'
                 '[[sources.alertmanager.map]]\nfault = "gpu.xdi.{{ labels.err_code }}"\n'
                 '[[sources.alertmanager.map]]\nfault = "gpu.xid.{{ labels.err_code }}"\n'
                 '[sources.nhc]\nenabled = true\nmap = { check_hw_ib = "ib.link_dwn" }\n')
    result = CliRunner().invoke(cli, ["policy", "check", str(f), "--no-slurm", "--json"])
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert any("sources.alertmanager.map[0].fault" in w for w in warnings), warnings
    assert not any("map[1]" in w for w in warnings), warnings
    assert any("sources.nhc.map.check_hw_ib" in w for w in warnings), warnings


def test_explain_and_the_proposal_name_the_source(
        api: tuple[Client, dict[str, str], Store]) -> None:
    """D13: `explain` (the API's node, the console's node page) lists the alert with its
    source and payload; the proposal's record says where the alert came from."""
    client, tokens, store = api
    auth = {"Authorization": f"Bearer {tokens['alice']}"}
    assert client.post(URL, json=FIRING, headers=auth).status_code == 200
    at = datetime.now(timezone.utc)
    store.apply(decide(_view(HOST), store.load(), at,
                       policy_from_dict({"capacity": {"min_available_percent": 0}})), at)
    got = client.get(f"/api/v1/nodes/{HOST}", headers=auth).get_json()
    [alert] = got["alerts"]
    assert alert["detector"] == "alertmanager" and alert["fault"] == "gpu.xid.48"
    assert alert["evidence"][0]["data"]["payload"] == FIRING["alerts"][0]
    [rem] = got["open_remediations"]
    proposed = next(s for s in rem["steps"] if s["phase"] == "proposed")
    assert "gpu.xid.48 (critical, from alertmanager)" in proposed["why"], proposed


def test_the_notification_of_a_site_alert_names_its_source() -> None:
    from slurm_heal.notify.events import alert_events

    [a] = alertmanager.from_webhook(FIRING, conf(XID_RULE), NOW)
    [event], _ = alert_events({HOST: [a.alert()]}, set(), NOW)
    assert event.title == f"gpu.xid.48 on {HOST} (critical, from alertmanager)"
    assert event.evidence[0]["data"]["payload"]["fingerprint"] == "427f8313dff7e2fb"


def test_status_says_a_proposal_came_from_alertmanager(tmp_path: Path) -> None:
    from slurm_heal.readmodel.overview import gather, render

    store = Store(tmp_path)
    _state_with(FIRING, store)
    at = NOW + timedelta(seconds=5)
    store.apply(decide(_view(HOST), store.load(), at,
                       policy_from_dict({"capacity": {"min_available_percent": 0}})), at)
    ov = gather(store.load(), None, at, heartbeat=None, slurm_error="no Slurm here")
    [w] = ov.approvals
    assert w.source == "alertmanager"
    assert f"{HOST} gpu.xid.48, from alertmanager -> reboot" in "\n".join(render(ov))


def test_a_firing_alert_alertmanager_stopped_sending_goes_stale(tmp_path: Path) -> None:
    """A resolved notification that never came: past stale_after the alert is no
    longer active (L4 then withdraws); Alertmanager's repeats keep it fresh."""
    store = Store(tmp_path)
    _state_with(FIRING, store)
    later = NOW + timedelta(hours=25)
    base = {"capacity": {"min_available_percent": 0}}
    assert decide(_view(HOST), store.load(), later, policy_from_dict(base)).updates == ()
    longer = policy_from_dict({**base, "sources": {"alertmanager": {"stale_after": "48h"}}})
    assert len(decide(_view(HOST), store.load(), later, longer).updates) == 1
    _state_with(FIRING, store, later)  # sent again (repeat_interval): fresh
    assert len(decide(_view(HOST), store.load(), later, policy_from_dict(base)).updates) == 1


def test_the_controller_repairs_alertmanagers_nodes_under_the_same_limits(
        tmp_path: Path) -> None:
    """D13 with the real controller (the rig): two nodes of one pool alert through
    Alertmanager; S4 lets one remediation run at a time in the pool; each is cordoned,
    rebooted, checked and resumed, and the audit names the source."""
    from tests.fakes import controller_rig

    policy = {"approvals": {"default": "auto"}, "capacity": {"min_available_percent": 0},
              "safety": {"concurrency": 4, "one_per_pool": True}}
    with controller_rig(tmp_path, [("gpu01", "a"), ("gpu02", "a"), ("gpu03", "a")],
                        policy) as rig:
        at = rig.clock()
        msgs = [with_labels(FIRING, Hostname=n) for n in ("gpu01", "gpu02")]
        for i, m in enumerate(msgs):
            m["alerts"][0]["fingerprint"] = f"f{i}"
            m["alerts"][0]["startsAt"] = at.isoformat()
            rig.store.put_source_alerts(
                alertmanager.from_webhook(m, conf(XID_RULE), at), at, timedelta(hours=24))
        rig.cycle()
        phases = sorted(r.phase for r in rig.rems())
        assert phases == sorted([Phase.CORDONED, Phase.APPROVED]), phases  # S4 holds one
        held = next(r for r in rig.rems() if r.phase is Phase.APPROVED)
        assert held.steps[-1].phase == "blocked" and held.steps[-1].rule == "S4", \
            held.steps[-1]
        for _ in range(40):
            rig.cycle()
            if all(r.phase.terminal for r in rig.rems()) and len(rig.rems()) == 2:
                break
        assert sorted((r.node, r.phase, r.detector) for r in rig.rems()) == [
            ("gpu01", Phase.DONE, "alertmanager"), ("gpu02", Phase.DONE, "alertmanager")]
        for n in ("gpu01", "gpu02"):
            node = rig.cluster.node(n)
            assert not node.drained and not node.down
        assert rig.rems("gpu03") == []
