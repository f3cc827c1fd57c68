"""An IB leaf switch's incident in the console, in a real browser (SPEC S7, O5): the lab
with ``topology/tree`` (leaf1: gpu[01-04]), the real IB sysfs of an H100 node replayed on
gpu01-03 with every port down, the real node check and two controller cycles (as in
tests/integration/test_incident_lab.py); then the console, served in this process on
that lab's Slurm and store, shows the incident on the overview (one card for the switch,
the held remediations, how to close it) and on gpu02's page (its remediation "held by
S7", never a green "approved").

Screenshots go to $SLURM_HEAL_TEST_OUTPUT/console/; SLURM_HEAL_CONSOLE_DOCS=1 writes
console-incident-overview.png and console-incident-node.png into docs/img/
(docs/console.md shows them). Without the browser: a skip naming `contrib/lab/lab
install --browser`; without the real IB capture: a skip naming where it comes from.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller
from slurm_heal.location import Location
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from tests.apiserve import make_tokens
from tests.browser.test_console_lab import REPO, Browser, browser_ok
from tests.integration.test_incident_lab import IB, POLICY, TOPOLOGY, node_check, replayed_node
from tests.lab import Lab
from tests.realdata import MISSING

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(not IB.is_dir() and os.environ.get("CI") != "true",
                                 reason=MISSING)]
__all__ = ["browser_ok"]  # the fixture, imported for its skip


@pytest.fixture
def incident_console(browser_ok: None, request: pytest.FixtureRequest,
                     tmp_path: Path) -> Iterator[tuple[Browser, dict[str, str]]]:
    (tmp_path / "lab" / "etc").mkdir(parents=True)
    (tmp_path / "lab" / "etc" / "topology.conf").write_text(TOPOLOGY)
    lab = Lab(tmp_path / "lab", nodes=6, slurm=str(request.config.getoption("--slurm")),
              conf_lines=["TopologyPlugin=topology/tree"])
    lab.start()
    try:
        for i, node in enumerate(lab.nodes[:4]):
            out = node_check(lab, replayed_node(tmp_path / node, down=i < 3), node)
            assert out.returncode == (1 if i < 3 else 0), out.stdout + out.stderr
        slurm = CliSlurm(slurm_conf=str(lab.conf))
        (tmp_path / "state").mkdir()
        clock = [datetime.now(timezone.utc)]
        with SimulatorServer(port=0, duration=0.0) as sim:
            ctl = Controller(slurm=slurm, provider=HttpProvider(sim.url, attempts=1),
                             store=Store(tmp_path / "state"), policy=policy_from_dict(POLICY),
                             clock=lambda: clock[0])
            ctl.cycle()
            clock[0] += timedelta(minutes=6)  # past the settle wait: still held
            ctl.cycle()
        (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
        tokens = make_tokens(tmp_path / "tokens.toml")
        settings = ApiSettings(tokens=tmp_path / "tokens.toml", bind="127.0.0.1:0")
        app = ApiApp(settings, Location(state_dir=tmp_path / "state", source="test"),
                     slurm=lambda: slurm)
        server = wsgi_server(settings, app)
        server.prepare()
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        browser = Browser(f"http://{server.bind_addr[0]}:{server.bind_addr[1]}")
        try:
            yield browser, tokens
        finally:
            browser.close()
            server.stop()
            thread.join(timeout=10)
    finally:
        lab.stop()


def _doc_shot(b: Browser, name: str) -> None:
    path = b.shot(name)
    if os.environ.get("SLURM_HEAL_CONSOLE_DOCS") == "1":
        (REPO / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(path, REPO / "docs" / "img" / path.name)


def test_the_switch_incident_on_the_overview_and_the_node_page(
        incident_console: tuple[Browser, dict[str, str]]) -> None:
    b, tokens = incident_console
    b.login(tokens["victor"], "/")
    [card] = b.all("#incidents article.incident")
    text = str(card.text)
    assert "INCIDENT on switch leaf1" in text and "ib.link_down on 3 of 4 nodes" in text
    assert "3 node remediations held" in text and "slurm-heal incident close i-" in text
    assert [str(a.text) for a in card.find_elements("css selector", "a")] == [
        "gpu01", "gpu02", "gpu03"]
    _doc_shot(b, "incident-overview")
    b.open("/nodes/gpu02")
    page = b.text()
    assert "INCIDENT on switch leaf1" in page
    assert "gpu02's own remediation is held" in page
    assert "held by S7 (incident i-" in page and "approved," in page
    _doc_shot(b, "incident-node")
