"""The fleet map and the history page, in-process over WSGI (issue 42, SPEC O5, S7, S5):
the overview draws the nodes on the topology Slurm's node features give, the filters
apply to the map, a tile opens its group, a bad ``map`` is said; ``/history`` and
``GET /api/v1/history`` give repairs over time from the store and its audit archive, a
bad window is a 422. The real browser on the same pages: tests/browser/test_console_map.py.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from werkzeug.test import Client

from slurm_heal import isotime
from slurm_heal.api.auth import add_token
from slurm_heal.slurm.memory import MemorySlurm
from tests import consolegen as gen
from tests.unit.test_console_overview import _console

NOW = datetime.now(timezone.utc)
API: dict[str, str] = {}  # the API's credentials (a viewer's bearer token)


def _cells(html: str) -> dict[str, str]:
    """The map's node cells: name -> class."""
    return {name: cls for name, cls in re.findall(
        r'<a href="/nodes/([^"]+)" transform="[^"]+" class="c ([^"]+)">', html)}


def _tiles(html: str) -> dict[str, str]:
    """The map's tiles: group id -> class."""
    return {gid: cls for cls, gid in re.findall(
        r'<a href="[^"]+" transform="[^"]+" class="t ([^"]+)" data-group="([^"]+)">', html)}


@pytest.fixture
def racks(tmp_path: Path) -> Client:
    slurm = MemorySlurm([(f"gpu{i:02d}", "gpu") for i in range(1, 7)] + [("login1", "cpu")],
                        clock=lambda: NOW)
    for i in range(1, 7):
        slurm.set_features(f"gpu{i:02d}", (f"rack=r{(i - 1) // 3 + 1}", "a100"))
    slurm.drain("gpu05", "bad fan - ticket 123")
    return _console(tmp_path, slurm)


def test_the_overview_draws_each_node_on_its_rack_a_cell_a_link_to_its_page(
        racks: Client) -> None:
    html = racks.get("/").text
    assert 'id="fleet-map"' in html
    assert "grouped by node features" in html
    cells = _cells(html)
    assert set(cells) == {"gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06", "login1"}
    assert cells["gpu05"] == "s-others" and cells["gpu01"] == "s-healthy"
    groups = re.findall(r'data-group="([^"]+)"', html)
    assert groups == ["rack:r1", "rack:r2", "pool:cpu"]
    # the node's one-line state is the cell's title (hover, focus, screen readers)
    assert re.search(r'<title>gpu05: drained by someone else;[^<]*; Slurm DRAIN\+IDLE<', html)
    assert '<use href="#g-others" x="2" y="2"/>' in html  # a glyph beside the colour
    # the filters apply to the map
    only = _cells(racks.get("/?state=drained_by_others").text)
    assert set(only) == {"gpu05"}


def test_slurm_not_answering_draws_no_map(tmp_path: Path) -> None:
    html = _console(tmp_path, None).get("/").text
    assert "Slurm did not answer" in html and 'id="fleet-map"' not in html


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Client:
    root = tmp_path_factory.mktemp("map-big")
    (root / "state").mkdir()
    gen.store(root / "state", 10_000, NOW)
    client = _console(root, gen.cluster(10_000, NOW))
    token = add_token(root / "tokens.toml", "reader", "viewer")
    API["Authorization"] = f"Bearer {token}"
    return client


def test_ten_thousand_nodes_are_tiles_by_block_rack_and_partition(big: Client) -> None:
    answer = big.get("/")
    html = answer.text
    print(f"overview at 10,000 nodes: {len(answer.data):,} bytes")
    tiles = _tiles(html)
    assert len(tiles) == 278 + 124 + 1 and not _cells(html)
    assert tiles["block:nvl100"].split() == ["s-healthy", "inc"]  # the open incident
    assert tiles["pool:cpu"] == "s-rem_act"  # n09999's open remediation
    assert tiles["block:nvl028"] == "s-alerting"  # n00500's Xid
    assert "i-scale-open on block nvl100" in html
    opened = big.get("/?map=block%3Anvl100").text
    cells = _cells(opened)
    assert list(cells) == gen.block_nodes(100)
    assert all(c.split() == ["s-healthy", "inc"] for c in cells.values())
    assert 'class="frame"' in opened and "back to the whole map" in opened
    # a run of the loose nodes' partition (40 nodes, one run)
    assert len(_cells(big.get("/?map=pool%3Acpu").text)) == gen.LOOSE


def test_a_map_parameter_naming_no_group_is_said_and_a_bad_one_refused(big: Client) -> None:
    html = big.get("/?map=rack%3Anope").text
    assert "map=&#39;rack:nope&#39; names no group on this map" in html
    assert big.get("/?map=a%0Ab").status_code == 422


def test_the_history_api_and_page_give_repairs_over_time(big: Client) -> None:
    got = big.get("/api/v1/history?days=90", headers=API).json
    assert got is not None and got["days"] == 90 and len(got["per_day"]) == 90
    ended = sum(sum(d[o] for o in got["outcomes"]) for d in got["per_day"])
    assert ended == got["totals"]["ended"] > 100  # the archive's records are counted too
    assert (root := Path(got["store"]["dir"])) and (root / "audit.jsonl").exists()
    assert {r["fault"] for r in got["time_to_repair"]} == {f for f, _a in gen.FAULTS}
    assert all(r["median_s"] <= r["p90_s"] for r in got["time_to_repair"])
    assert len(got["breaker"]["openings"]) == 2
    assert [i["id"] for i in got["incidents"]["list"]][-1] == "i-scale-open"
    week = big.get("/api/v1/history?days=7", headers=API).json
    assert week is not None and len(week["per_day"]) == 7
    assert week["totals"]["ended"] < got["totals"]["ended"]
    assert big.get("/api/v1/history", headers=API).json["days"] == 30  # type: ignore[index]
    bad = big.get("/api/v1/history?days=8", headers=API)
    assert bad.status_code == 422 and "days must be one of 7, 30, 90" in bad.json["detail"]  # type: ignore[index]
    page = big.get("/history?days=90").text
    for chart in ("chart-outcomes", "chart-ttr", "chart-repeats", "chart-breaker",
                  "chart-incidents"):
        assert f'id="{chart}"' in page
    assert page.count('class="bar o-done"') > 30
    assert re.search(r"<p class=\"meta\" id=\"breaker-count\">2 openings", page)
    assert big.get("/history?days=365").status_code == 422


def test_the_history_is_the_last_days_before_now(big: Client) -> None:
    got = big.get("/api/v1/history?days=7", headers=API).json
    assert got is not None
    first = isotime.parse(got["since"])
    assert first == datetime.combine((NOW - timedelta(days=6)).date(), datetime.min.time(),
                                     tzinfo=timezone.utc)


def test_a_held_remediation_and_one_waiting_for_a_person_are_held_on_the_map(
        tmp_path: Path) -> None:
    from slurm_heal.models import Phase, State, Step, Work
    from tests.unit.test_console_overview import _rem

    slurm = MemorySlurm([(f"gpu{i:02d}", "gpu") for i in range(1, 5)], clock=lambda: NOW)
    held = _rem("r-held", "gpu01", Phase.APPROVED, approval_rule="P2:default",
                data=Work(blocked="P1"),
                steps=(Step(at=NOW, phase="blocked", rule="P1", why="waits for evidence"),))
    acting = _rem("r-acting", "gpu02", Phase.ACTING)
    asking = _rem("r-ask", "gpu03", Phase.PROPOSED, data=Work(approval_pending="P2:default"))
    client = _console(tmp_path, slurm, State(remediations=(held, acting, asking)))
    cells = _cells(client.get("/").text)
    assert cells == {"gpu01": "s-held", "gpu02": "s-rem_act", "gpu03": "s-held",
                     "gpu04": "s-healthy"}


def test_a_topology_that_cannot_be_read_is_said_and_the_map_goes_by_partition(
        tmp_path: Path) -> None:
    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.settings import ApiSettings
    from slurm_heal.location import Location

    slurm = MemorySlurm([("gpu01", "gpu")], clock=lambda: NOW)
    config = tmp_path / "heal.toml"
    config.write_text(f'[topology]\nsource = "file"\nfile = "{tmp_path / "none.conf"}"\n')
    (tmp_path / "state").mkdir()
    token = add_token(tmp_path / "tokens.toml", "reader", "viewer")
    app = ApiApp(ApiSettings(tokens=tmp_path / "tokens.toml"),
                 Location(state_dir=tmp_path / "state", source="test"),
                 slurm=lambda: slurm, policy_file=str(config))
    client = Client(app)
    page = client.get("/login").text
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', page)
    assert nonce is not None
    client.post("/login", data={"login_csrf": nonce.group(1), "token": token, "next": "/"})
    html = client.get("/").text
    assert re.search(r'id="map-problem">the topology could not be read \([^)]*none\.conf: '
                     r'cannot read', html)
    assert _cells(html) == {"gpu01": "s-healthy"}
    assert "grouped by partitions (no topology)" in html


def test_a_lemons_node_is_marked_on_the_map(tmp_path: Path) -> None:
    """SPEC E7: five remediations that acted on one machine within 7 days (the default
    lemon) and nothing open: its node is a lemon on the map; one fewer, it is not."""
    from slurm_heal.models import Attempt, Phase, State
    from slurm_heal.types import Action

    def done(i: int, node: str) -> object:
        from tests.unit.test_console_overview import _rem

        at = NOW - timedelta(days=1, hours=i)
        return _rem(f"r-{node}-{i}", node, Phase.DONE, host=f"serial-{node}").model_copy(
            update={"phase_times": {"proposed": at, "acting": at, "done": at},
                    "updated": at, "attempts": (Attempt(
                        key=f"k-{node}-{i}", effect="act", action=Action.REBOOT,
                        started=at, outcome="ok", finished=at),)})

    slurm = MemorySlurm([("gpu01", "gpu"), ("gpu02", "gpu")], clock=lambda: NOW)
    rems = tuple(done(i, "gpu01") for i in range(5)) + tuple(done(i, "gpu02")
                                                             for i in range(4))
    client = _console(tmp_path, slurm, State(remediations=rems))  # type: ignore[arg-type]
    assert _cells(client.get("/").text) == {"gpu01": "s-lemon", "gpu02": "s-healthy"}
