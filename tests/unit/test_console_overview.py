"""The console's words and its overview at scale, in-process over WSGI (issue 25 item 8,
SPEC O5, O6, P2, Q3, D5): rule ids carry their plain words from docs/rules.md; a
remediation a limit holds is not a green "approved"; a Q3 duplicate is not a red
"blocked"; a node drained under a request counts as one with alerts; the overview shows
the nodes that need attention first, filtered and paged by query parameters, with a clear
error for a bad parameter. The real browser on the same pages: tests/browser/.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.errors import SlurmUnreachable
from slurm_heal.location import Location
from slurm_heal.models import Phase, Remediation, State, Step, Work
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import DECISIONS_KEY, Store
from slurm_heal.types import Action, Severity
from tests import consolegen as gen
from tests.apiserve import make_tokens

NOW = datetime.now(timezone.utc)


def _console(tmp_path: Path, slurm: MemorySlurm | None, state: State | None = None) -> Client:
    state_dir = tmp_path / "state"
    state_dir.mkdir(exist_ok=True)
    if state is not None:
        with Store(state_dir).transaction() as txn:
            txn.state = state
    tokens = make_tokens(tmp_path / "tokens.toml")
    def client() -> MemorySlurm:
        if slurm is None:
            raise SlurmUnreachable("slurmctld does not answer (connection refused)")
        return slurm

    app = ApiApp(ApiSettings(tokens=tmp_path / "tokens.toml"),
                 Location(state_dir=state_dir, source="test"), slurm=client)
    client = Client(app)
    page = client.get("/login").text
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', page)
    assert nonce is not None
    answer = client.post("/login", data={"login_csrf": nonce.group(1),
                                         "token": tokens["alice"], "next": "/"})
    assert answer.status_code == 303
    return client


def _rows(html: str) -> list[str]:
    """The node names of the overview's node table, in order."""
    table = re.search(r'<table id="nodes">(.*?)</table>', html, re.S)
    return re.findall(r'<td><a href="/nodes/([^"]+)">', table.group(1)) if table else []


def _rem(rid: str, node: str, phase: Phase, **kw: Any) -> Remediation:
    t0 = NOW - timedelta(minutes=5)
    return Remediation(
        id=rid, node=node, fault=kw.pop("fault", "gpu.xid.119"), severity=Severity.CRITICAL,
        action=Action.REBOOT, phase=phase, created=t0, updated=t0, phase_times={"proposed": t0},
        steps=(Step(at=t0, phase="proposed", rule="Q1", why="reboot requested by ibmon"),
               *kw.pop("steps", ())), **kw)


@pytest.fixture
def small() -> MemorySlurm:
    return MemorySlurm([(f"gpu{i:02d}", "gpu") for i in range(1, 5)], clock=lambda: NOW)


def test_every_rule_id_of_the_console_is_said_in_words_from_the_rules_page() -> None:
    from slurm_heal.readmodel import rulewords

    doc = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    for rule in ("Q1", "Q3", "P1", "P2:default", "P2:approvals[3]", "[L5]"):
        words = rulewords.short(rule)
        assert words and words.rstrip(" …")[:40] in doc.replace("`", ""), rule
    assert rulewords.short("P2:default").startswith("no approval rule matched")
    assert rulewords.short("no-such-rule") == ""


def test_an_approved_remediation_a_rule_holds_is_shown_held_not_approved(
        tmp_path: Path, small: MemorySlurm) -> None:
    """Issue 25 items 2, 8: approved, then held under P1 for evidence: amber, with P1 in words."""
    held = _rem("r-held", "gpu01", Phase.APPROVED, approval_rule="P2:default",
                data=Work(blocked="P1"),
                steps=(Step(at=NOW, phase="blocked", rule="P1",
                            why="waits for a confirmed alert on gpu01"),))
    client = _console(tmp_path, small, State(remediations=(held,)))
    html = client.get("/remediations/r-held").text
    badge = re.search(r'<span id="phase"><span class="phase ([^"]+)"[^>]*>([^<]+)<', html)
    assert badge is not None and badge.groups() == ("phase-held", "approved, held by P1")
    assert "A remediation runs only after a health-check failure is confirmed" in html
    assert "waits for a confirmed alert on gpu01" in html
    assert "no approval rule matched" in html  # P2:default in words
    listed = client.get("/").text
    assert "approved, held by P1" in listed and 'class="phase phase-approved"' not in listed


def test_a_duplicate_request_is_a_neutral_badge_and_a_real_block_stays_red(
        tmp_path: Path, small: MemorySlurm) -> None:
    records = [{"at": NOW.isoformat(), "node": "gpu02", "phase": "blocked", "rule": rule,
                "why": why, "action": "reboot"} for rule, why in (
        ("Q3", "request for reboot from ibmon (id=4711) dropped: r-1 already handles it"),
        ("S4", "at most 2 nodes of pool gpu out at once"))]
    client = _console(tmp_path, small, State(data={DECISIONS_KEY: records}))
    html = client.get("/nodes/gpu02").text
    rows = re.findall(r'<tr><td>[^<]*</td><td><span class="phase ([^"]+)">([^<]+)</span></td>'
                      r'<td><code class="rule">([^<]+)</code>', html)
    assert rows == [("phase-neutral", "duplicate", "Q3"), ("phase-blocked", "blocked", "S4")]
    assert "the same request repeated makes one remediation" in html


def test_a_node_drained_under_a_request_counts_with_alerts_and_needs_attention(
        tmp_path: Path, small: MemorySlurm) -> None:
    small.drain("gpu03", "heal-request: reboot detector=ibmon id=1 link flaps")
    html = _console(tmp_path, small).get("/").text
    assert re.search(r'id="attention-count">1</span> needs attention, 1 with alerts', html)
    assert _rows(html)[0] == "gpu03"
    assert "drained by a request" in html


def test_without_slurm_the_overview_says_so_and_shows_no_empty_node_list(
        tmp_path: Path) -> None:
    html = _console(tmp_path, None).get("/").text
    assert "Slurm did not answer: slurmctld does not answer" in html
    assert 'id="node-filters"' not in html and "No node matches" not in html


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Client:
    root = tmp_path_factory.mktemp("scale")
    (root / "state").mkdir()
    gen.store(root / "state", 2000, NOW)
    return _console(root, gen.cluster(2000, NOW))


def test_the_overview_lists_the_nodes_that_need_attention_first_one_page_at_a_time(
        big: Client) -> None:
    html = big.get("/").text
    want = gen.attention(2000)
    rows = _rows(html)
    assert len(rows) == 50  # the page size, not 2,000 rows
    assert set(rows[:len(want)]) == set(want) and rows[len(want)] == "n00001"
    # the order of attention: out of service (someone else's drain, a request's drain),
    # remediating, alerting; by name within each
    assert rows[:len(want)] == ["n00007", "n00250", "n01250", "n01999", "n00500", "n01000",
                                "n01500", "n02000"]
    assert "Nodes 1–50 of 2000" in html and "page 1 of 40" in html
    nxt = re.search(r'<a href="/([^"]+)" id="page-next"', html)
    assert nxt is not None and nxt.group(1) == "?page=2"
    second = _rows(big.get("/?page=2").text)
    assert second[0] == "n00044" and len(second) == 50 and not set(second) & set(rows)
    last = big.get("/?page=40").text
    assert len(_rows(last)) == 50 and 'id="page-next"' not in last and "page 40 of 40" in last


@pytest.mark.parametrize(("query", "expect"), [
    ("state=alerting", ["n00500", "n01000", "n01500", "n02000"]),
    ("state=drained_by_others", ["n00250", "n01250"]),
    ("state=attention&pool=gpu", ["n00007", "n00250", "n00500", "n01000"]),
    ("fault=gpu.xid", ["n00500", "n01000", "n01500", "n02000"]),
    ("fault=gpu.xid.79&hosts=n0[0001-1200]", ["n00500", "n01000"]),
    ("hosts=n0[0248-0252],n01999", ["n00250", "n01999", "n00248", "n00249", "n00251",
                                    "n00252"]),
    ("state=DRAIN", ["n00007", "n00250", "n01250"]),
    ("state=remediating", ["n01999"]),
])
def test_the_filters_narrow_the_list_and_keep_attention_first(big: Client, query: str,
                                                              expect: list[str]) -> None:
    html = big.get("/?" + query).text
    assert _rows(html) == expect
    assert f"of {len(expect)} matching (of 2000)" in html and 'id="f-clear"' in html


def test_paging_links_keep_the_filters(big: Client) -> None:
    html = big.get("/?pool=cpu&per=20").text
    assert len(_rows(html)) == 20
    nxt = re.search(r'<a href="/([^"]+)" id="page-next"', html)
    assert nxt is not None and nxt.group(1).replace("&amp;", "&") == "?pool=cpu&page=2&per=20"
    assert "page 1 of 50" in html  # 1,000 nodes of pool cpu


@pytest.mark.parametrize(("query", "words"), [
    ("hosts=n0[0001-", "is not a host list"),
    ("page=0", "page must be a whole number from 1 to"),
    ("per=100000", "per must be a whole number from 1 to 500"),
])
def test_a_bad_filter_is_a_clear_error_not_a_500(big: Client, query: str, words: str) -> None:
    answer = big.get("/?" + query)
    assert answer.status_code == 422 and words in answer.text


def test_a_filter_nothing_matches_says_so(big: Client) -> None:
    html = big.get("/?hosts=zz[1-3]").text
    assert _rows(html) == [] and "No node matches these filters" in html


def test_the_with_alerts_count_agrees_with_the_alerts_column(
        tmp_path: Path, small: MemorySlurm) -> None:
    """SPEC D5, O5 (issue 36 item 11): "N with alerts" counts the nodes whose Alerts cell
    says something, the same alerts `alerts` lists: a person's drain and a request's drain
    with no alert in Extra are each shown in the column, never counted over an empty one."""
    small.drain("gpu02", "bios update (bob)")
    small.drain("gpu03", "heal-request: reboot detector=ibmon id=1 link flaps")
    html = _console(tmp_path, small).get("/").text
    counted = re.search(r"(\d+) with alerts", html)
    assert counted is not None and counted.group(1) == "2"
    table = re.search(r'<table id="nodes">(.*?)</table>', html, re.S)
    assert table is not None
    cells = {m.group(1): m.group(2) for m in re.finditer(
        r'<td><a href="/nodes/([^"]+)">.*?<td>((?:(?!</td>).)*)</td>\s*</tr>', table.group(1),
        re.S)}
    with_alerts = sorted(n for n, cell in cells.items() if "<code>" in cell)
    assert with_alerts == ["gpu02", "gpu03"], cells
    assert "slurm.node_drain" in cells["gpu02"] and "<code>request</code>" in cells["gpu03"]


def test_a_wait_that_ends_by_itself_is_a_grey_badge_and_a_persons_hold_stays_red(
        tmp_path: Path, small: MemorySlurm) -> None:
    """docs/console.md (issue 36 item 11, SPEC S2, S7, S5): the cooldown and S7's settle
    wait end by themselves at their time: grey "waiting"; the open breaker and an
    incident wait for a person: red "blocked"."""
    records = [{"at": NOW.isoformat(), "node": "gpu02", "phase": "blocked", "rule": rule,
                "why": why, "action": "reboot"} for rule, why in (
        ("S2", "cooldown: the last remediation on gpu02 ended at 10:00; the next may start "
               "30m later"),
        ("S7", "gpu.xid.79 is a fault a shared component can cause: waits until 10:05 "
               "(incidents.settle = 5m) to see whether other nodes under rack r1 show it too"),
        ("S7", "held by incident i-1 on rack r1: a person closes it"),
        ("S5", "the breaker is open: automatic remediation waits for a person"))]
    html = _console(tmp_path, small, State(data={DECISIONS_KEY: records})).get(
        "/nodes/gpu02").text
    rows = re.findall(r'<tr><td>[^<]*</td><td><span class="phase ([^"]+)">([^<]+)</span></td>'
                      r'<td><code class="rule">([^<]+)</code>', html)
    assert rows == [("phase-neutral", "waiting", "S2"),
                    ("phase-neutral", "waiting", "S7"), ("phase-blocked", "blocked", "S7"),
                    ("phase-blocked", "blocked", "S5")]
    from slurm_heal.models import SETTLE_WORDS
    from slurm_heal.policy import gates

    # the settle wait's record says so in the engine's own words (what a record of an
    # older build, without its mark, is given the settle wait's mark by)
    assert SETTLE_WORDS in Path(gates.__file__).read_text()


def test_a_blocked_step_is_badged_by_its_holds_mark_never_by_its_words() -> None:
    """Issue 33 (SPEC S7, O6): the settle wait ends by itself (grey), an incident or a
    blast radius waits for something else (red): told by the record's typed mark, in a
    model or in its --json shape."""
    from slurm_heal.models import SETTLE, mark
    from slurm_heal.readmodel.badges import step_badge

    assert step_badge("blocked", "S7", SETTLE)[:2] == ("waiting", "phase-neutral")
    assert step_badge("blocked", "S7", "S7:settle")[:2] == ("waiting", "phase-neutral")
    assert step_badge("blocked", "S7", mark("S7", "i-1"))[:2] == ("blocked", "phase-blocked")
    assert step_badge("blocked", "S7", mark("S7", "rack:r1"))[:2] == \
        ("blocked", "phase-blocked")
    assert step_badge("blocked", "S7")[:2] == ("blocked", "phase-blocked")
