"""The fleet map and the repairs over time at 10,000 nodes in a real browser (issue 42,
SPEC O5, S7, S5): headless Chromium, JavaScript off, against the console served by the
production WSGI server in this process, on the generated cluster and store of
`tests/consolegen.py` (NVLink blocks of 18 and racks of 40 as node features, the last 40
nodes under none, an open incident on block nvl100, 90 days of ended remediations, the
older ones in the audit archive).

The map draws one tile per group at this size; a tile opens its group node by node; a
node's cell is a focusable link to its page (Enter on it opens the page); a filter draws
only the nodes it keeps. The history page draws its charts with the generated data.

Each page's size (bytes the browser received: the body's length) and load time are
written to $SLURM_HEAL_TEST_OUTPUT/console/map-sizes.txt and printed, never asserted
(benchmarks/console_map.py measures the time to serve). Screenshots go to
test-output/console/; SLURM_HEAL_CONSOLE_DOCS=1 writes them into docs/img/ (docs/console.md
shows them).
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests import consolegen as gen
from tests.browser.test_console_lab import REPO, Browser, _out_dir, browser_ok
from tests.browser.test_console_scale import N, console

pytestmark = [pytest.mark.slow, pytest.mark.browser]
__all__ = ["browser_ok", "console"]  # the fixtures, imported for their use

BLOCKS = -(-(N // 2) // gen.BLOCK)  # 278 blocks of 18 (the last one of 14)
RACKS = (N // 2 - gen.LOOSE) // gen.RACK  # 124 racks of 40
GROUPS = BLOCKS + RACKS + 1  # and the loose nodes' partition


def _block(i: int) -> str:
    return f"block:nvl{(i - 1) // gen.BLOCK + 1:03d}"


def _save(b: Browser, css: str, name: str) -> Path:
    """A screenshot of one element (the map), into docs/img with SLURM_HEAL_CONSOLE_DOCS=1."""
    from tests.browser.test_console_lab import DESKTOP

    path = b.out / f"console-{name}.png"
    height = b.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    b.driver.set_window_size(DESKTOP[0], min(int(height["height"]) + 40, 8000))
    b.find(css).screenshot(str(path))
    b.driver.set_window_size(*DESKTOP)
    _to_docs(path)
    return path


def _to_docs(path: Path) -> None:
    if os.environ.get("SLURM_HEAL_CONSOLE_DOCS") == "1":
        (REPO / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(path, REPO / "docs" / "img" / path.name)


def _size(b: Browser, path: str) -> int:
    """The body's bytes of ``path`` as served to this browser's session (its cookie)."""
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in b.driver.get_cookies())
    req = urllib.request.Request(b.base + path, headers={"Cookie": cookie})
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 (127.0.0.1)
        return len(resp.read())


def _enter(b: Browser, token: str, path: str) -> None:
    """Open ``path``, logging in first when this browser has no session yet."""
    b.open(path)
    if b.path.startswith("/login"):
        b.login(token, path)


def test_the_fleet_map_of_ten_thousand_nodes_tiles_a_group_opens_a_cell_opens_the_node(
        console: tuple[Browser, dict[str, str]]) -> None:
    from selenium.webdriver.common.keys import Keys

    b, tokens = console
    _enter(b, tokens["alice"], "/")
    measured: list[str] = []

    def load(path: str) -> None:
        start = time.monotonic()
        b.open(path)
        secs = time.monotonic() - start
        measured.append(f"{path}: {_size(b, path):,} bytes, loaded in {secs:.2f}s")

    load("/")
    tiles = b.all("#fleet-map a.t")
    assert len(tiles) == GROUPS
    groups = {t.get_attribute("data-group"): t for t in tiles}
    # the worst state of each tile: the open remediation (acting) among the loose
    # nodes, an alert, someone else's drain; the incident's block outlined
    assert "t s-rem_act" in groups["pool:cpu"].get_attribute("class")
    assert "s-alerting" in groups[_block(500)].get_attribute("class")
    assert "s-others" in groups[_block(250)].get_attribute("class")
    assert "inc" in groups[f"block:{gen.INCIDENT_BLOCK}"].get_attribute("class").split()
    title = groups[_block(500)].find_element("css selector", "title")
    assert "17 healthy" in title.get_attribute("textContent")
    assert "1 alerting" in title.get_attribute("textContent")
    assert "i-scale-open" in b.find("#map-incidents").text
    legend = b.find("#map-legend").text
    assert "healthy" in legend and "drained by someone else" in legend
    _save(b, "#fleet-map", "map-scale")

    # a tile opens its group node by node (a plain link)
    b.submit(f"#fleet-map a.t[data-group='block:{gen.INCIDENT_BLOCK}']")
    assert "map=block%3Anvl100" in b.path
    group = b.find("#group-block-nvl100")
    assert "INCIDENT i-scale-open" in group.text
    cells = group.find_elements("css selector", "a.c")
    assert [c.get_dom_attribute("href").rsplit("/", 1)[1] for c in cells] == gen.block_nodes(100)
    assert all("inc" in c.get_attribute("class").split() for c in cells)
    first = cells[0].find_element("css selector", "title").get_attribute("textContent")
    assert first.startswith("n01783: healthy") and "incident i-scale-open" in first
    load(f"/?map=block%3A{gen.INCIDENT_BLOCK}")
    _save(b, "#fleet-map", "map-group")

    # the keyboard: a cell is a focusable link, Enter opens the node's page
    b.all("#group-block-nvl100 a.c")[2].send_keys(Keys.ENTER)
    for _ in range(100):
        if b.path.startswith("/nodes/"):
            break
        time.sleep(0.1)
    assert b.path == "/nodes/n01785"
    assert "n01785" in b.find("h1").text

    # a click on a cell opens the node too
    b.open(f"/?map={_block(500).replace(':', '%3A')}")
    b.submit("#fleet-map a.c[href='/nodes/n00500']")
    assert b.path == "/nodes/n00500"

    # the filters apply: the nodes that need attention, cell by cell
    load("/?state=attention")
    names = sorted(str(a.get_dom_attribute("href")).rsplit("/", 1)[1]
                   for a in b.all("#fleet-map a.c"))
    assert names == gen.attention(N)
    assert not b.all("#fleet-map a.t")
    states = {a.get_dom_attribute("href").rsplit("/", 1)[1]: a.get_attribute("class")
              for a in b.all("#fleet-map a.c")}
    assert "s-rem_act" in states[gen.name(N - 1)] and "s-others" in states["n00250"]
    _save(b, "#fleet-map", "map-attention")

    report = f"console fleet map, {N} nodes:\n" + "\n".join(measured) + "\n"
    (_out_dir() / "map-sizes.txt").write_text(report)
    print(report)


def test_the_history_page_draws_repairs_over_time_from_the_store_and_the_archive(
        console: tuple[Browser, dict[str, str]]) -> None:
    b, tokens = console
    _enter(b, tokens["alice"], "/history?days=90")
    measured = [f"/history?days=90: {_size(b, '/history?days=90'):,} bytes"]
    totals = b.find("#outcome-totals").text
    ended = int(totals.split(" ", 1)[0])
    assert ended > 100  # 90 days of the generated history, most of it archived
    bars = b.all("#chart-outcomes rect.bar")
    assert len(bars) > 60
    assert {c for r in bars for c in (r.get_attribute("class") or "").split()} >= {
        "o-done", "o-failed"}
    assert len(b.all("#chart-ttr rect.bar.med")) == len(gen.FAULTS)
    assert b.all("#chart-repeats a")  # machines remediated more than once
    assert b.find("#breaker-count").text.startswith("2 openings")
    assert len(b.all("#chart-breaker rect.bar")) == 2
    assert len(b.all("#incident-list tbody tr")) == 6
    path = b.shot("history")
    _to_docs(path)
    b.submit("#days-7")
    assert b.path == "/history?days=7"
    assert b.find("#breaker-count").text.startswith("1 opening")
    assert len(b.all("#incident-list tbody tr")) == 2  # day 2's and the open one
    measured.append(f"/history?days=7: {_size(b, '/history?days=7'):,} bytes")
    print("\n".join(measured))
    with (_out_dir() / "map-sizes.txt").open("a") as fh:
        fh.write("\n".join(measured) + "\n")
