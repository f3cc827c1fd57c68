"""What holds a remediation, until when, and what lifts it: one answer in `status`,
`explain`, the API and the console (SPEC O6, S7, E7, P2; issue 32 item 6).

The store is written by decide()'s plans through the real JSON store; the read model
(`readmodel.overview`) and the CLI read it back as a person sees it; serve runs as a
process on 127.0.0.1 for the API and the console.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.config import policy_from_dict
from slurm_heal.models import Phase, State
from slurm_heal.readmodel import overview
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.topology import parse_topology
from slurm_heal.types import Alert, ClusterView, Evidence, NodeInfo, Severity
from tests.apiserve import Serve, make_tokens
from tests.policycore import decide
from tests.unit.test_lemon import lemon_history

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
NAMES = ("gpu01", "gpu02", "gpu03", "gpu04")
LEAF = parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\n")


def _view() -> ClusterView:
    return ClusterView(nodes=tuple(NodeInfo(name=n, states=frozenset({"IDLE"}),
                                            partitions=("a",)) for n in NAMES),
                       topology=LEAF)


def _ib(nodes: tuple[str, ...]) -> dict[str, list[Alert]]:
    return {n: [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                      summary="mlx5_0 port 1 Down", first_seen=T0, last_seen=T0,
                      evidence=(Evidence(source="sysfs", text=f"{n}: 1: DOWN"),))]
            for n in nodes}


def _cycles(store: Store, policy: dict[str, Any], alerts: dict[str, list[Alert]],
            times: tuple[datetime, ...] = (T0, T0 + timedelta(seconds=30)),
            state: State | None = None) -> None:
    for now in times:
        given = state if state is not None else store.load()  # ``state``: the history
        store.apply(decide(_view(), given, now, policy_from_dict(policy), alerts), now)


MANUAL = {"approvals": {"default": "manual"},
          "safety": {"concurrency": 10, "one_per_pool": False},
          "capacity": {"min_available_percent": 0}}
AUTO = {**MANUAL, "approvals": {"default": "auto"}}


def _status(store: Store, now: datetime) -> tuple[overview.Overview, str]:
    nodes = list(_view().nodes)
    ov = overview.gather(store.load(), nodes, now, heartbeat=None)
    return ov, "\n".join(overview.render(ov))


# ------------------------------------------------------------------ the read model
def test_during_an_incident_held_proposals_are_not_waiting_for_approval_and_are_counted(
        tmp_path: Path) -> None:
    """SPEC S7, O6: with approvals by a person (the default), an incident on leaf1 holds
    all three nodes' own remediations: `status` lists none under "Waiting for approval",
    names the incident and its close beside each, and the incident counts 3 held."""
    store = Store(tmp_path)
    _cycles(store, MANUAL, _ib(("gpu01", "gpu02", "gpu03")))
    ov, text = _status(store, T0 + timedelta(minutes=1))
    assert ov.approvals == () and "Waiting for approval" not in text, text
    [inc] = ov.incidents
    assert len(inc.held) == 3 and "3 remediation(s) held" in inc.words, inc.words
    held = {f.node: f.held for f in ov.in_flight}
    assert set(held) == {"gpu01", "gpu02", "gpu03"}, text
    for n in ("gpu01", "gpu02", "gpu03"):
        h = held[n]
        assert h is not None and h.incident == inc.id
        assert f"{n} reboot (ib.link_down) proposed, HELD by S7 (incident {inc.id})" in text
    # the incident's own line, and beside each of the three
    assert text.count(f"`slurm-heal incident close {inc.id}`") == 4, text


def test_once_the_incident_is_closed_its_proposals_wait_for_approval_again(
        tmp_path: Path) -> None:
    """SPEC S7, P2, O6: a person closes the incident: the held proposals go on by their
    own rules (here: a person's approval), and no hold is shown any longer."""
    from slurm_heal.models import Command

    store = Store(tmp_path)
    _cycles(store, MANUAL, _ib(("gpu01", "gpu02", "gpu03")))
    iid = _status(store, T0)[0].incidents[0].id
    now = T0 + timedelta(minutes=2)
    state = store.load().model_copy(update={"inbox": (Command(
        id="c9", at=now, kind="close_incident", by="alice", incident=iid),)})
    store.apply(decide(_view(), state, now, policy_from_dict(MANUAL),
                       _ib(("gpu01", "gpu02", "gpu03"))), now)
    ov, text = _status(store, now + timedelta(seconds=5))
    assert {w.node for w in ov.approvals} == {"gpu01", "gpu02", "gpu03"}, text
    assert "HELD by" not in text, text


def test_the_settle_wait_is_shown_with_its_end_not_as_approved(tmp_path: Path) -> None:
    """SPEC S7, O6: a lone related fault waits incidents.settle: `status` says so, until
    when and that it lifts by itself; never a bare "approved for 10s"."""
    store = Store(tmp_path)
    _cycles(store, AUTO, _ib(("gpu01",)), times=(T0,))
    _ov, text = _status(store, T0 + timedelta(seconds=10))
    assert "gpu01 reboot (ib.link_down) approved, HELD by S7 (settle wait under switch " \
        "leaf1)" in text, text
    assert "leaf1) until 2026-01-05 00:" in text and "lifts: by itself at" in text
    assert "approved for 10s" not in text


def test_a_lemon_hold_is_shown_with_what_lifts_it(tmp_path: Path) -> None:
    """SPEC E7, O6: the lemon hold names itself, its end and the person's way round it."""
    store = Store(tmp_path)
    alerts = {"gpu01": [Alert(node="gpu01", fault="gpu.xid.48", severity=Severity.CRITICAL,
                              summary="", first_seen=T0, last_seen=T0)]}
    _cycles(store, AUTO, alerts, times=(T0,),
            state=State(remediations=lemon_history("gpu01", 5)))
    ov, text = _status(store, T0 + timedelta(seconds=10))
    [f] = [f for f in ov.in_flight if f.node == "gpu01"]
    assert f.held is not None and f.held.rule == "E7" and f.held.until is not None
    assert "approved, HELD by E7" in text and "slurm-heal request gpu01 reboot" in text, text


def test_a_pause_on_a_started_remediation_is_cleared_once_unpaused() -> None:
    """SPEC O2, O6: a hold that has lifted is never shown: paused while its job runs, the
    remediation is held by the pause; unpaused, the stored hold is gone."""
    from tests.unit.test_policy_engine import T0 as E0
    from tests.unit.test_policy_engine import alert, apply, node, pol, rem, run

    r = rem("gpu01", Phase.WAITING, acted=False, at=E0)
    nodes = [node("gpu01", "ALLOCATED", "DRAIN", reason="heal: x"), node("gpu02")]
    from slurm_heal.types import JobInfo

    jobs = (JobInfo(job_id=7, user="u", nodes=("gpu01",), state="RUNNING"),)
    policy = pol(waiting={"max_wait": "1m"})
    paused = run(nodes, {"gpu01": [alert("gpu01")]}, State(remediations=(r,), paused=True),
                 E0 + timedelta(minutes=5), policy, jobs)
    held = next(u for u in paused.updates if u.id == r.id).data.hold
    assert held is not None and held.rule == "pause" and held.command == "slurm-heal unpause"
    state = apply(State(remediations=(r,)), paused)
    resumed = run(nodes, {"gpu01": [alert("gpu01")]}, state, E0 + timedelta(minutes=6),
                  policy, jobs)
    after = next(u for u in resumed.updates if u.id == r.id)
    assert after.data.hold is None or after.data.hold.rule != "pause", after.data


def test_explain_says_what_holds_the_remediation(tmp_path: Path) -> None:
    """SPEC O6, house style 9: `explain NODE` prints the hold, until when, what lifts it."""
    store = Store(tmp_path / "state")
    _cycles(store, MANUAL, _ib(("gpu01", "gpu02", "gpu03")))
    slurm = MemorySlurm([(n, "a") for n in NAMES], clock=lambda: T0)
    got = CliRunner().invoke(cli, ["explain", "gpu02", "--state-dir", str(tmp_path / "state")],
                             obj={"slurm": slurm})
    assert got.exit_code == 0, got.output
    assert "HELD by S7 (incident i-" in got.stdout, got.stdout
    assert "lifts: a person closes incident i-" in got.stdout
    assert "not put to approval: held by incident i-" in got.stdout
    assert "waiting for a person's approval" not in got.stdout


# ------------------------------------------------------------------ the API and the console
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Store,
                                                                    dict[str, str]]]:
    root = tmp_path_factory.mktemp("holds-api")
    state_dir = root / "state"
    state_dir.mkdir()
    (state_dir / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
    tokens = make_tokens(root / "tokens.toml")
    config = root / "heal.toml"
    config.write_text(f'[controller]\nstate_dir = "{state_dir}"\n'
                      f'slurm_conf = "{root / "no-such-slurm.conf"}"\n'
                      '[api]\ntokens = "tokens.toml"\n')
    store = Store(state_dir)
    _cycles(store, MANUAL, _ib(("gpu01", "gpu02", "gpu03")))
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_HEAL_STATE_DIR", "SLURM_HEAL_CONFIG")}
    env["SLURM_CONF"] = str(root / "no-such-slurm.conf")
    with Serve(["--config", str(config)], root / "serve.log", env=env) as srv:
        yield srv, store, tokens


def _login(srv: Serve, token: str) -> requests.Session:
    s = requests.Session()
    page = s.get(srv.url + "/login", timeout=10)
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', page.text)
    assert nonce, page.text
    resp = s.post(srv.url + "/login", data={"login_csrf": nonce.group(1), "token": token,
                                            "next": "/"}, allow_redirects=False, timeout=10)
    assert resp.status_code == 303, resp.text
    return s


def test_the_api_says_what_holds_each_remediation_and_none_waits_for_approval(
        site: tuple[Serve, Store, dict[str, str]]) -> None:
    """SPEC O5, O6: the overview's remediations carry the hold (rule, incident, what
    lifts it, the command); none is counted as waiting for approval."""
    srv, _store, tokens = site
    o = srv.get("/api/v1/overview", tokens["victor"]).json()
    assert o["approvals_waiting"] == [] and o["counts"]["waiting_for_approval"] == 0, o
    holds = [r["hold"] for r in o["open_remediations"]]
    assert len(holds) == 3 and all(h["rule"] == "S7" and h["incident"] for h in holds), holds
    assert all(h["command"] == f"slurm-heal incident close {h['incident']}" for h in holds)
    assert o["status"]["approvals"] == []
    assert {f["held"]["incident"] for f in o["status"]["in_flight"]} == {holds[0]["incident"]}


def test_the_console_offers_no_approval_for_a_node_the_incident_holds(
        site: tuple[Serve, Store, dict[str, str]]) -> None:
    """SPEC S7, O5, O6: the approvals page has nothing to approve; the remediation page
    says what holds it and what lifts it, with no "Approve reboot" button."""
    srv, store, tokens = site
    s = _login(srv, tokens["alice"])
    approvals = s.get(srv.url + "/approvals", timeout=10).text
    assert 'id="no-approvals"' in approvals and "Approve reboot" not in approvals
    rid = next(r.id for r in store.load().remediations if r.node == "gpu02")
    page = s.get(srv.url + f"/remediations/{rid}", timeout=10).text
    assert "Approve reboot" not in page, page
    assert 'id="held"' in page and "incident i-" in page
    assert 'id="lifts"' in page and "slurm-heal incident close i-" in page
    assert "held by S7 (incident i-" in page  # the badge
    node = s.get(srv.url + "/nodes/gpu02", timeout=10).text
    assert "Held by" in node and "slurm-heal incident close i-" in node, node
    overview_page = s.get(srv.url + "/", timeout=10).text
    assert "lifts: a person closes incident i-" in overview_page  # the open remediations
