"""SPEC S7, O5: incidents through `slurm-heal serve`: the API lists and shows them (by id
or component) and takes a person's close (operators only, queued once per
Idempotency-Key); the console's overview and node page show them. The store is written
by decide()'s plan (an incident on leaf1); serve runs as a process on 127.0.0.1."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
import requests

from slurm_heal.config import policy_from_dict
from slurm_heal.store import Store
from slurm_heal.topology import parse_topology
from slurm_heal.types import Alert, ClusterView, Evidence, NodeInfo, Severity
from tests.apiserve import Serve, make_tokens
from tests.policycore import decide

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def write_incident(store: Store) -> None:
    names = ("gpu01", "gpu02", "gpu03", "gpu04")
    view = ClusterView(nodes=tuple(NodeInfo(name=n, states=frozenset({"IDLE"}),
                                            partitions=("a",)) for n in names),
                       topology=parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\n"))
    alerts = {n: [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                        summary="mlx5_0 port 1 Down", first_seen=T0, last_seen=T0,
                        evidence=(Evidence(source="sysfs", text=f"{n}: 1: DOWN"),))]
              for n in names[:3]}
    store.apply(decide(view, store.load(), T0, policy_from_dict(
        {"approvals": {"default": "auto"}}), alerts), T0)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Store,
                                                                    dict[str, str]]]:
    root = tmp_path_factory.mktemp("incident-api")
    state_dir = root / "state"
    state_dir.mkdir()
    (state_dir / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
    tokens = make_tokens(root / "tokens.toml")
    config = root / "heal.toml"
    config.write_text(f'[controller]\nstate_dir = "{state_dir}"\n'
                      f'slurm_conf = "{root / "no-such-slurm.conf"}"\n'
                      '[api]\ntokens = "tokens.toml"\n')
    store = Store(state_dir)
    write_incident(store)
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


def test_the_api_lists_and_shows_the_incident_by_id_and_by_component(
        site: tuple[Serve, Store, dict[str, str]]) -> None:
    srv, _store, tokens = site
    got = srv.get("/api/v1/incidents", tokens["victor"], params={"all": "true"})
    assert got.status_code == 200, got.text
    [inc] = got.json()["incidents"]
    assert (inc["component"], inc["nodes"], len(inc["held"])) == (
        "switch:leaf1", ["gpu01", "gpu02", "gpu03"], 3)
    assert [a["evidence"][0]["text"] for a in inc["alerts"]] == [
        "gpu01: 1: DOWN", "gpu02: 1: DOWN", "gpu03: 1: DOWN"]
    by_id = srv.get(f"/api/v1/incidents/{inc['id']}", tokens["victor"]).json()["incident"]
    by_comp = srv.get("/api/v1/incidents/switch:leaf1", tokens["victor"]).json()["incident"]
    assert by_id == by_comp
    missing = srv.get("/api/v1/incidents/switch:nope", tokens["victor"])
    assert missing.status_code == 404 and "no incident 'switch:nope'" in missing.text
    assert srv.get("/api/v1/overview", tokens["victor"]).json()["status"]["incidents"][0][
        "id"] == inc["id"]


def test_the_console_shows_the_incident_on_the_overview_and_the_node_page(
        site: tuple[Serve, Store, dict[str, str]]) -> None:
    srv, _store, tokens = site
    s = _login(srv, tokens["victor"])
    overview = s.get(srv.url + "/", timeout=10).text
    assert 'id="incidents"' in overview and "INCIDENT on switch <strong>leaf1</strong>" in overview
    assert "3 node remediations held" in overview and "slurm-heal incident close i-" in overview
    # Issue 37: the incident says its domain and why that domain.
    assert "<strong>leaf1</strong> (network leaf switch)" in overview
    assert "a network leaf switch can cause ib" in overview
    node = s.get(srv.url + "/nodes/gpu02", timeout=10).text
    assert "INCIDENT on switch <strong>leaf1</strong>" in node
    assert "gpu02's own remediation is held" in node
    assert "held by S7 (incident i-" in node  # the badge: never a green "approved"


def test_a_viewer_cannot_close_an_operator_close_is_queued_once(
        site: tuple[Serve, Store, dict[str, str]]) -> None:
    srv, store, tokens = site
    denied = srv.post("/api/v1/incidents/switch:leaf1/close", tokens["victor"],
                      json={"reason": "x"}, key="k-v")
    assert denied.status_code == 403
    for _ in range(2):  # a retry with the same key is the same command
        resp = srv.post("/api/v1/incidents/switch:leaf1/close", tokens["alice"],
                        json={"reason": "leaf1 replaced"}, key="k-1")
        assert resp.status_code == 202, resp.text
    [cmd] = store.load().inbox
    assert (cmd.kind, cmd.by, cmd.reason) == ("close_incident", "alice", "leaf1 replaced")
    assert cmd.incident is not None and cmd.incident.startswith("i-")

