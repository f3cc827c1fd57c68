"""What holds a remediation, in a real browser (SPEC O5, O6, S7; issue 32 item 6):
headless Chromium, JavaScript off, against the console served by the production WSGI
server in this process. The store is decide()'s own plans for an InfiniBand leaf switch
down under three of four nodes, with approvals by a person (the default): one incident
holds the three nodes' own remediations. Nodes in memory (MemorySlurm); written for the
test, not captured from a site.

Without the browser: a skip naming `contrib/lab/lab install --browser`; with CI=true a
failure.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.config import policy_from_dict
from slurm_heal.location import Location
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.topology import parse_topology
from slurm_heal.types import Alert, ClusterView, Evidence, Severity
from tests.apiserve import make_tokens
from tests.browser.test_console_lab import Browser, browser_ok
from tests.policycore import decide

pytestmark = [pytest.mark.slow, pytest.mark.browser]
__all__ = ["browser_ok"]  # the fixture, imported for its skip

NAMES = ("gpu01", "gpu02", "gpu03", "gpu04")


@pytest.fixture(scope="module")
def console(browser_ok: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Browser, dict[str, str], Store]]:
    root = tmp_path_factory.mktemp("console-holds")
    now = datetime.now(timezone.utc)
    state_dir = root / "state"
    state_dir.mkdir()
    slurm = MemorySlurm([(n, "a") for n in NAMES], clock=lambda: now)
    store = Store(state_dir)
    view = ClusterView(nodes=tuple(slurm.nodes()),
                       topology=parse_topology("SwitchName=leaf1 Nodes=gpu[01-04]\n"))
    alerts = {n: [Alert(node=n, fault="ib.link_down", severity=Severity.CRITICAL,
                        summary="mlx5_0 port 1 Down", first_seen=now, last_seen=now,
                        evidence=(Evidence(source="sysfs", text=f"{n}: 1: DOWN"),))]
              for n in NAMES[:3]}
    policy = policy_from_dict({"approvals": {"default": "manual"},
                               "safety": {"concurrency": 10, "one_per_pool": False},
                               "capacity": {"min_available_percent": 0}})
    for at in (now, now + timedelta(seconds=30)):
        store.apply(decide(view, store.load(), at, policy, alerts), at)
    (state_dir / "heartbeat").write_text(now.isoformat())
    tokens = make_tokens(root / "tokens.toml")
    settings = ApiSettings(tokens=root / "tokens.toml", bind="127.0.0.1:0")
    app = ApiApp(settings, Location(state_dir=state_dir, source="test"), slurm=lambda: slurm)
    server = wsgi_server(settings, app)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    b = Browser(f"http://{server.bind_addr[0]}:{server.bind_addr[1]}")
    try:
        yield b, tokens, store
    finally:
        b.close()
        server.stop()
        thread.join(timeout=10)


def test_an_operator_is_offered_no_approval_for_a_node_the_incident_holds(
        console: tuple[Browser, dict[str, str], Store]) -> None:
    """SPEC S7, O6: the approvals page has nothing to approve; gpu02's remediation page
    says it is held by the incident, what lifts it and the command, with no Approve
    button; the overview's incident counts the three it holds."""
    b, tokens, store = console
    b.login(tokens["alice"], "/approvals")
    assert b.all("#no-approvals") and not b.all("button.approve")
    b.open("/")
    assert "3 node remediations held" in b.text(), b.text()
    rid = next(r.id for r in store.load().remediations if r.node == "gpu02")
    b.open(f"/remediations/{rid}")
    held = b.find("#held").text
    lifts = b.find("#lifts").text
    assert "S7" in held and "incident i-" in held, held
    assert "a person closes incident i-" in lifts and "slurm-heal incident close i-" in lifts
    assert not b.all("button.approve"), "an Approve button for a node the incident holds"
    assert "held by S7 (incident i-" in b.find("#phase").text
    b.shot("remediation-held-by-incident")
