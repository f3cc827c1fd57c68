"""The console's overview at 10,000 nodes in a real browser (issue 25 item 8, SPEC O5,
O6): headless Chromium, JavaScript off, against the console served by the production
WSGI server in this process, on a generated cluster (in memory) and store of 10,000 nodes
(`tests/consolegen.py`). The page shows the nodes that need attention first, one page of
50, and the filters (state, pool, fault, a NodeSet host list) and the paging links work as
plain links and a plain GET form.

How long each page takes to load (from the request until the browser has the page) is
measured and printed, and written to $SLURM_HEAL_TEST_OUTPUT/console/scale-timing.txt;
it is never asserted (timing is not a test's business). The screenshots of the overview,
normal and filtered, go to test-output/console/; SLURM_HEAL_CONSOLE_DOCS=1 writes them
into docs/img/ (docs/console.md shows them).

Without the browser: a skip naming `contrib/lab/lab install --browser`; with CI=true a
failure.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.location import Location
from tests import consolegen as gen
from tests.apiserve import make_tokens
from tests.browser.test_console_lab import REPO, Browser, _out_dir, browser_ok

pytestmark = [pytest.mark.slow, pytest.mark.browser]

N = 10_000
__all__ = ["browser_ok"]  # the fixture, imported for its skip


@pytest.fixture(scope="module")
def console(browser_ok: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Browser, dict[str, str]]]:
    root = tmp_path_factory.mktemp("console-scale")
    now = datetime.now(timezone.utc)
    (root / "state").mkdir()
    gen.store(root / "state", N, now)
    slurm = gen.cluster(N, now)
    tokens = make_tokens(root / "tokens.toml")
    settings = ApiSettings(tokens=root / "tokens.toml", bind="127.0.0.1:0")
    app = ApiApp(settings, Location(state_dir=root / "state", source="test"),
                 slurm=lambda: slurm)
    server = wsgi_server(settings, app)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    host, port = server.bind_addr[0], server.bind_addr[1]
    browser = Browser(f"http://{host}:{port}")
    try:
        yield browser, tokens
    finally:
        browser.close()
        server.stop()
        thread.join(timeout=10)


def _timed(b: Browser, path: str, timings: list[tuple[str, float]]) -> None:
    start = time.monotonic()
    b.open(path)
    timings.append((path, time.monotonic() - start))


def _names(b: Browser) -> list[str]:
    return [str(a.text) for a in b.all("#nodes tbody tr td:first-child a")]


def _doc_shot(b: Browser, name: str) -> None:
    path = b.shot(name)
    if os.environ.get("SLURM_HEAL_CONSOLE_DOCS") == "1":
        (REPO / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(path, REPO / "docs" / "img" / path.name)


def test_ten_thousand_nodes_the_ones_that_need_attention_first_filtered_and_paged(
        console: tuple[Browser, dict[str, str]]) -> None:
    b, tokens = console
    timings: list[tuple[str, float]] = []
    b.login(tokens["alice"], "/")
    _timed(b, "/", timings)
    want = gen.attention(N)
    rows = _names(b)
    assert len(rows) == 50  # one page, not 10,000 rows
    assert sorted(rows[:len(want)]) == want and rows[len(want)] == "n00001"
    assert all("attention" in (r.get_attribute("class") or "")
               for r in b.all("#nodes tbody tr")[:len(want)])
    assert b.find("#attention-count").text == str(len(want))
    assert "Nodes 1–50 of 10000" in b.find("#node-range").text
    assert b.find("#page-of").text == "page 1 of 200"
    _doc_shot(b, "overview-scale")

    # paging by its links
    start = time.monotonic()
    b.submit("#page-next")
    timings.append(("the next-page link", time.monotonic() - start))
    assert b.path == "/?page=2" and b.find("#page-of").text == "page 2 of 200"
    assert not set(_names(b)) & set(rows)

    # the filter form: a plain GET; a host list in NodeSet syntax and a fault prefix
    b.open("/")
    b.find("#f-hosts").send_keys("n0[0001-5000]")
    b.find("#f-fault").send_keys("gpu.xid")
    start = time.monotonic()
    b.submit("#f-apply")
    timings.append(("the filter form (hosts, fault)", time.monotonic() - start))
    assert _names(b) == [f"n0{i:04d}" for i in range(500, 5001, 500)]
    assert "of 10 matching (of 10000)" in b.find("#node-range").text
    _doc_shot(b, "overview-filtered")

    # state and pool from their menus' values, as links
    _timed(b, "/?state=drained_by_others&pool=cpu", timings)
    assert _names(b) == [gen.name(i) for i in range(5250, N + 1, 1000)]
    _timed(b, "/?state=attention&per=10", timings)
    assert len(_names(b)) == 10 and b.find("#page-of").text.endswith("of 4")
    _timed(b, "/?hosts=n0[0001-", timings)
    assert "is not a host list" in b.text()

    lines = [f"{path}: {secs:.2f}s" for path, secs in timings]
    report = f"console overview, {N} nodes, page loads (request to page loaded):\n" + \
        "\n".join(lines) + "\n"
    (_out_dir() / "scale-timing.txt").write_text(report)
    print(report)


