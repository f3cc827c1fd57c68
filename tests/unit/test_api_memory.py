"""serve's overview and status from memory (issue 34 item 3, SPEC O5, O6), in-process
over WSGI on a clock the test moves: many requests at once cost one gathering and one
read of Slurm; a write through the API shows on the very next read; a node Slurm
changed shows once the freshness bound has passed; ``GET /api/v1/status`` is what
``slurm-heal status --json`` prints. The load figures: benchmarks/api_load.py.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from werkzeug.test import Client

from slurm_heal.api import views
from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.location import Location
from slurm_heal.models import Remediation, State
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import NodeInfo
from tests.apiserve import make_tokens
from tests.unit.test_api_serve import _proposal as serve_proposal

NOW = datetime.now(timezone.utc)
T0 = NOW - timedelta(minutes=5)


class CountingSlurm(MemorySlurm):
    """The memory Slurm, counting its node-list reads; a read waits for ``gate`` so the
    other requests arrive while it is in flight."""

    def __init__(self) -> None:
        super().__init__([(f"gpu{i:02d}", "gpu") for i in range(1, 5)], clock=lambda: NOW)
        self.reads = 0
        self.gate = threading.Event()
        self.gate.set()

    def nodes(self) -> tuple[NodeInfo, ...]:
        self.reads += 1
        self.gate.wait(30)
        return super().nodes()


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _proposal() -> Remediation:
    return serve_proposal(at=T0)


class Site:
    def __init__(self, root: Path) -> None:
        self.state_dir = root / "state"
        self.state_dir.mkdir()
        (self.state_dir / "heartbeat").write_text(NOW.isoformat())
        with Store(self.state_dir).transaction() as txn:
            txn.state = State(remediations=(_proposal(),))
        self.tokens = make_tokens(root / "tokens.toml")
        self.slurm = CountingSlurm()
        self.clock = Clock()
        self.app = ApiApp(ApiSettings(tokens=root / "tokens.toml"),
                          Location(state_dir=self.state_dir, source="test"),
                          slurm=lambda: self.slurm, clock=self.clock)

    def get(self, path: str) -> dict[str, Any]:
        resp = Client(self.app).get(
            path, headers={"Authorization": f"Bearer {self.tokens['victor']}"})
        assert resp.status_code == 200, resp.text
        got: dict[str, Any] = resp.json
        return got


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(tmp_path)


def test_a_hundred_requests_at_once_cost_one_gathering_and_one_slurm_read(site: Site) -> None:
    """Issue 34 item 3: the requests that come while the overview is computed (Slurm's
    read held open) wait for it and get its answer; none reads Slurm or gathers again."""
    src = site.app.src
    site.slurm.gate.clear()
    got: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: got.append(views.overview(src)))
               for _ in range(100)]
    for t in threads:
        t.start()
    site.slurm.gate.set()
    for t in threads:
        t.join(30)
    assert len(got) == 100 and site.slurm.reads == 1
    assert all(o is got[0] for o in got)  # one gathering, shared
    assert got[0]["counts"]["nodes"] == 4


def test_concurrent_api_clients_get_one_answer_and_slurm_is_read_once(site: Site) -> None:
    site.slurm.gate.clear()
    bodies: list[bytes] = []

    def ask(path: str) -> None:
        resp = Client(site.app).get(
            path, headers={"Authorization": f"Bearer {site.tokens['victor']}"})
        assert resp.status_code == 200
        bodies.append(resp.data)

    threads = [threading.Thread(target=ask, args=(p,)) for p in
               ["/api/v1/overview", "/api/v1/status"] * 10]
    for t in threads:
        t.start()
    site.slurm.gate.set()
    for t in threads:
        t.join(30)
    assert site.slurm.reads == 1 and len(bodies) == 20
    assert len(set(bodies)) == 2  # one overview, one status, each encoded once


def test_a_write_through_the_api_is_seen_by_the_very_next_read(site: Site) -> None:
    """Invalidated by the write itself (the store's bytes change), not by time: the
    clock does not move."""
    before = site.get("/api/v1/overview")
    assert before["counts"]["pending_commands"] == 0
    assert before["approvals_waiting"] == ["r-0000proposal"]
    resp = Client(site.app).post(
        "/api/v1/remediations/gpu01/approve", json={"reason": "GSP hang"},
        headers={"Authorization": f"Bearer {site.tokens['alice']}"})
    assert resp.status_code == 202, resp.text
    after = site.get("/api/v1/overview")
    assert after["counts"]["pending_commands"] == 1
    assert site.get("/api/v1/status")["store"]["dir"] == str(site.state_dir)
    pause = Client(site.app).post(
        "/api/v1/pause", json={"reason": "maintenance"},
        headers={"Authorization": f"Bearer {site.tokens['alice']}"})
    assert pause.status_code == 202, pause.text
    assert [c["kind"] for c in site.get("/api/v1/overview")["pause"]["pending"]] == ["pause"]
    assert site.slurm.reads == 1  # Slurm was not read again for it


def test_a_new_heartbeat_shows_at_once(site: Site) -> None:
    assert site.get("/api/v1/overview")["controller"]["last_heartbeat"] == NOW.isoformat()
    later = NOW + timedelta(seconds=30)
    (site.state_dir / "heartbeat").write_text(later.isoformat())
    assert site.get("/api/v1/overview")["controller"]["last_heartbeat"] == later.isoformat()


def test_a_node_slurm_changed_shows_after_the_freshness_bound(site: Site) -> None:
    """Slurm is read at most once a bound (views.FRESH_S): within it the answer is the
    one read, after it the drained node shows, with one read more."""
    first = site.get("/api/v1/overview")
    assert first["status"]["counts"]["drained_by_others"] == 0
    site.slurm.drain("gpu02", "bad DIMM, ticket 42")
    site.clock.now += views.FRESH_S / 2
    assert site.get("/api/v1/overview")["status"]["counts"]["drained_by_others"] == 0
    assert site.slurm.reads == 1
    site.clock.now += views.FRESH_S
    after = site.get("/api/v1/overview")
    assert after["status"]["counts"]["drained_by_others"] == 1
    assert [f["node"] for f in after["status"]["foreign"]] == ["gpu02"]
    assert site.slurm.reads == 2


def test_the_console_overview_shares_slurms_read_and_shows_the_write(site: Site) -> None:
    from slurm_heal.readmodel.nodepage import parse_query

    src = site.app.src
    page = views.overview(src, parse_query({}))
    api = views.overview(src)
    assert site.slurm.reads == 1 and page is not api  # one read, two shapes
    assert views.overview(src, parse_query({})) is page
    from slurm_heal.models import Command

    Store(site.state_dir).add_command(Command(id="c-pause", kind="pause", by="alice",
                                              reason="maintenance", at=NOW))
    again = views.overview(src, parse_query({}))
    assert again is not page and again["counts"]["pending_commands"] == 1


def test_api_status_is_what_the_cli_status_json_prints(site: Site) -> None:
    """SPEC O5, I4: the CLI's twin, one gathering and one shape (readmodel.overview)."""
    from slurm_heal.cli import cli

    site.slurm.drain("gpu03", "bad DIMM")
    api = site.get("/api/v1/status")
    run = CliRunner().invoke(cli, ["status", "--json", "--state-dir", str(site.state_dir)],
                             obj={"slurm": site.slurm})
    assert run.exit_code == 0, run.output
    cli = json.loads(run.output)
    assert set(api) == set(cli)

    def timeless(doc: dict[str, Any]) -> str:  # ages and "at" are of each one's moment
        text = json.dumps({k: v for k, v in doc.items() if k not in ("at", "controller")},
                          sort_keys=True)
        return text

    assert api["store"]["dir"] == cli["store"]["dir"] == str(site.state_dir)
    assert (api["counts"], api["groups"], api["foreign"], api["node_status"]) == (
        cli["counts"], cli["groups"], cli["foreign"], cli["node_status"])
    assert {k: v for k, v in api["controller"].items() if not k.endswith("_s")} == \
        {k: v for k, v in cli["controller"].items() if not k.endswith("_s")}
    assert timeless(api).count("gpu03") == timeless(cli).count("gpu03") > 0


def test_callers_that_waited_for_a_slow_computation_take_its_value() -> None:
    """Single flight holds when one computation takes longer than the freshness bound
    (the 10,000-node overview on a loaded machine): the requests that arrived while it
    ran take its value; they do not each compute it again in turn. A request that
    arrives after that bound has passed since it ended computes anew."""
    from slurm_heal.api.memo import Memo

    now = [100.0]
    memo: Memo[int] = Memo(2.0, clock=lambda: now[0])
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        started.set()
        assert release.wait(10)
        now[0] += 5.0  # longer than the bound
        return len(calls)

    first: list[int] = []
    a = threading.Thread(target=lambda: first.append(memo.get("overview", (1,), slow)))
    a.start()
    assert started.wait(10)
    waiting: list[int] = []
    b = threading.Thread(target=lambda: waiting.append(memo.get("overview", (1,), slow)))
    b.start()  # arrives while the first computation runs
    release.set()
    a.join(10)
    b.join(10)
    assert first == [1] and waiting == [1] and len(calls) == 1
    now[0] += 2.5  # past the bound since it ended: a new request computes again
    assert memo.get("overview", (1,), slow) == 2
