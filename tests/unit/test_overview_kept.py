"""What serve keeps of each node between overviews (issue 42, SPEC O5, O1, I4): the
overview served after a store change, a new read of Slurm or time passing is the one
`status` gathers afresh, never a stale one.

`readmodel.overview.NodeChecks` keeps each node's Extra as read (once per change of its
text) and its classified line (again only when what it is classified from changed);
serve keeps the fleet map and its drawing while their inputs are equal. A change in the
store, in a node's Extra or state, or in the time shows on the next request. Speed is
measured in benchmarks/console_map.py, never asserted here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from werkzeug.test import Client

from slurm_heal import extra
from slurm_heal.api import views
from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.location import Location
from slurm_heal.models import Phase, Remediation, State, Work
from slurm_heal.readmodel import overview as ov
from slurm_heal.readmodel.nodepage import parse_query
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Alert, NodeInfo, Severity
from tests.apiserve import make_tokens
from tests.unit.test_console_overview import _rem

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def _alert(node: str, fault: str = "gpu.xid.79", at: datetime = NOW) -> Alert:
    return Alert(node=node, fault=fault, severity=Severity.CRITICAL, summary="Xid 79",
                 first_seen=at, last_seen=at, detector="kmsg")


def _cluster() -> MemorySlurm:
    slurm = MemorySlurm([(f"gpu{i:02d}", "gpu") for i in range(1, 7)], clock=lambda: NOW)
    for i in range(1, 7):
        slurm.set_extra(f"gpu{i:02d}", extra.KEY, extra.our_section([], NOW, heartbeat=600))
    return slurm


def _gathered(state: State, nodes: tuple[NodeInfo, ...], now: datetime,
              checks: ov.NodeChecks | None) -> dict[str, Any]:
    return ov.gather(state, nodes, now, heartbeat=None, all_details=True,
                     checks=checks).model_dump(mode="json")


def test_kept_reads_and_lines_give_what_status_gathers_afresh_through_changes() -> None:
    """One NodeChecks through a sequence of changes, each on a new read of Slurm (new
    records, mostly the same Extra text) and on the very same read again: every
    overview is the one gathered with nothing kept."""
    slurm = _cluster()
    kept = ov.NodeChecks()
    state = State()

    def both(now: datetime = NOW) -> dict[str, Any]:
        nodes = tuple(slurm.nodes())
        fresh = _gathered(state, nodes, now, None)
        assert _gathered(state, nodes, now, kept) == fresh
        assert _gathered(state, nodes, now, kept) == fresh  # the same read again
        return fresh

    first = both()
    assert first["counts"]["healthy"] == 6 and first["check_stale"] == ""
    # a node check publishes an alert: its Extra text changes
    slurm.set_extra("gpu02", extra.KEY, extra.our_section([_alert("gpu02")], NOW,
                                                          heartbeat=600))
    assert both()["groups"]["alerting"] == "gpu02"
    # someone drains a node (Slurm's state and reason, not its Extra)
    slurm.drain("gpu03", "bad fan - ticket 123")
    assert both()["groups"]["drained_by_others"] == "gpu03"
    # the store: an open remediation on gpu04 (the same Extra, new remediations) ...
    state = State(remediations=(_rem("r-4", "gpu04", Phase.ACTING),))
    got = both()
    assert got["groups"]["remediating"] == "gpu04"
    assert [n["phase"] for n in got["nodes"] if n["name"] == "gpu04"] == ["acting"]
    # ... which ends: a new State, records equal but not the same objects
    state = State(remediations=(_rem("r-4", "gpu04", Phase.DONE),))
    assert "remediating" not in both()["groups"]
    # time passes: checks published now with a 10 min heartbeat go stale after 30 min
    # (heartbeat + the slack, overview.CHECK_STALE)
    assert both(NOW + timedelta(minutes=29))["check_stale"] == ""
    assert both(NOW + timedelta(minutes=31))["check_stale"] == "gpu[01-06]"
    # the node check rewrites gpu05 later: fresh again, the others still stale
    slurm.set_extra("gpu05", extra.KEY, extra.our_section([], NOW + timedelta(minutes=30),
                                                          heartbeat=600))
    assert both(NOW + timedelta(minutes=31))["check_stale"] == "gpu[01-04,06]"
    # Extra that is not ours (someone's text), then ours with a wrong type
    slurm.set_extra_text("gpu06", "rack 12, slot 4")
    both()
    slurm.set_extra_text("gpu06", '{"slurm_heal": {"v": 1, "alerts": 7}}')
    both()


def test_check_data_that_depends_on_the_time_is_read_at_each_time() -> None:
    """An alert published a day and more ahead of now is unreadable data (extra.MAX_AHEAD)
    until that time comes: a kept read at an earlier time is not handed out later."""
    slurm = _cluster()
    ahead = NOW + extra.MAX_AHEAD + timedelta(hours=1)
    slurm.set_extra("gpu01", extra.KEY, extra.our_section([_alert("gpu01", at=ahead)], ahead))
    kept = ov.NodeChecks()
    nodes = tuple(slurm.nodes())
    now_ = _gathered(State(), nodes, NOW, kept)
    later = _gathered(State(), nodes, ahead, kept)
    assert now_ == _gathered(State(), nodes, NOW, None)
    assert later == _gathered(State(), nodes, ahead, None)
    assert "gpu01" not in now_["groups"].get("alerting", "")
    assert later["groups"]["alerting"] == "gpu01"


def test_a_name_twice_in_slurms_list_is_read_node_by_node() -> None:
    slurm = _cluster()
    slurm.set_extra("gpu02", extra.KEY, extra.our_section([_alert("gpu02")], NOW))
    nodes = tuple(slurm.nodes())
    twin = replace(next(n for n in nodes if n.name == "gpu02"), name="gpu01")
    doubled = (*nodes, twin)
    kept = ov.NodeChecks()
    assert _gathered(State(), doubled, NOW, kept) == _gathered(State(), doubled, NOW, None)
    lines = kept.lines(doubled, kept.read(doubled, NOW), {}, State(), NOW)
    assert [ln.category for ln in lines if ln.name == "gpu01"] == ["healthy", "alerting"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _serve(tmp_path: Path, slurm: MemorySlurm, clock: Clock) -> tuple[Client, ApiApp]:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "heartbeat").write_text(NOW.isoformat())
    tokens = make_tokens(tmp_path / "tokens.toml")
    app = ApiApp(ApiSettings(tokens=tmp_path / "tokens.toml"),
                 Location(state_dir=state_dir, source="test"), slurm=lambda: slurm,
                 clock=clock)
    client = Client(app)
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', client.get("/login").text)
    assert nonce is not None
    answer = client.post("/login", data={"login_csrf": nonce.group(1),
                                         "token": tokens["alice"], "next": "/"})
    assert answer.status_code == 303
    return client, app


def _cells(html: str) -> dict[str, str]:
    return dict(re.findall(r'<a href="/nodes/([^"]+)" transform="[^"]+" class="c ([^"]+)">',
                           html))


def _write(state_dir: Path, *rems: Remediation) -> None:
    with Store(state_dir).transaction() as txn:
        txn.state = State(remediations=rems)


def test_a_store_change_shows_on_the_very_next_request_map_included(tmp_path: Path) -> None:
    """The clock does not move (Slurm's read and what is kept are within their bound):
    the store's new bytes alone make the overview, its map and its drawing new."""
    slurm = _cluster()
    clock = Clock()
    client, _app = _serve(tmp_path, slurm, clock)
    state_dir = tmp_path / "state"
    assert _cells(client.get("/").text)["gpu04"] == "s-healthy"
    _write(state_dir, _rem("r-4", "gpu04", Phase.ACTING))
    html = client.get("/").text
    assert _cells(html)["gpu04"] == "s-rem_act" and "r-4" in html
    _write(state_dir, _rem("r-4", "gpu04", Phase.DONE))
    html = client.get("/").text
    assert _cells(html)["gpu04"] == "s-healthy"
    _write(state_dir, _rem("r-5", "gpu05", Phase.PROPOSED, approval_rule="P2:default",
                           data=Work(approval_pending="P2:default")))
    assert _cells(client.get("/").text)["gpu05"] == "s-held"  # waits for a person (P2)
    # a node check's new alert shows once Slurm is read again (after the bound)
    slurm.set_extra("gpu02", extra.KEY, extra.our_section([_alert("gpu02")], NOW))
    clock.now += views.FRESH_S + 0.1
    assert _cells(client.get("/").text)["gpu02"] == "s-alerting"


def test_a_store_change_that_changes_no_node_keeps_the_map_it_had(tmp_path: Path) -> None:
    """What is kept is kept for its inputs: a store change that touches no node (the
    daemon's cycle bookkeeping) gives a new overview with the very same map."""
    slurm = _cluster()
    client, app = _serve(tmp_path, slurm, Clock())
    q = parse_query({})
    before = views.overview(app.src, q)
    with Store(tmp_path / "state").transaction() as txn:
        txn.state = txn.state.model_copy(update={"data": {"cycle": 1}})
    after = views.overview(app.src, q)
    assert after is not before and after["map"] is before["map"]
    _write(tmp_path / "state", _rem("r-1", "gpu01", Phase.ACTING))
    changed = views.overview(app.src, q)
    assert changed["map"] is not before["map"] and changed["map"] != before["map"]
    assert client.get("/").status_code == 200


def test_nothing_stays_out_of_the_collectors_passes_after_an_overview(tmp_path: Path) -> None:
    """views.heap_frozen: what is alive while an overview is computed is left out of the
    garbage collector's passes (as the controller's cycle does), and given back by the
    last thread out, however the computations overlap."""
    import gc

    slurm = _cluster()
    _client, app = _serve(tmp_path, slurm, Clock())
    gc.unfreeze()
    views.overview(app.src, parse_query({}))
    views.status(app.src, lambda: None)
    assert gc.get_freeze_count() == 0
    with views.heap_frozen():
        assert gc.get_freeze_count() > 0
        with views.heap_frozen():  # another request's, inside
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
