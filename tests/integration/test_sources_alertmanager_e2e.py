"""SPEC D13 end to end with the real Prometheus and Alertmanager (Debian's packages) on
127.0.0.1: Prometheus scrapes a real dcgm-exporter page (tests/data/real/dcgm-exporter,
its origin in SOURCES.md) whose XID metric the test changes; the shipped rules
(contrib/prometheus) fire; Alertmanager, configured with the shipped receiver snippet
(contrib/alertmanager), posts to `serve`'s receiver with a bearer token; the controller's
decide() proposes the catalog's remediation for that Xid with the alert as its evidence
(P1, D7); the metric goes back and the resolved notification withdraws it (L4).

Slurm is the in-memory cluster every API test of the console uses (`MemorySlurm`): the
node is the page's own Hostname.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import catalog
from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.config import load_policy
from slurm_heal.location import Location
from slurm_heal.models import Phase
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.sources.stored import SOURCES_KEY, load
from slurm_heal.store import Store
from slurm_heal.types import ClusterView
from tests import promstack
from tests.apiserve import make_tokens
from tests.policycore import decide

PAGE = (Path(__file__).resolve().parents[1] / "data" / "real" / "dcgm-exporter"
        / "dcgm-exporter-4.x-a100-vgpu-metrics.txt")
NODE = "vks-cluster-0-0-np1-worker-xtxww-xw4wp-wn7j2"  # the page's Hostname label
POLICY = """
[approvals]
default = "manual"

[capacity]
min_available_percent = 0

[[sources.alertmanager.map]]
match = { alertname = "GpuXidError" }
match_re = { err_code = "[0-9]+" }
node_label = ["Hostname", "instance"]
fault = "gpu.xid.{{ labels.err_code }}"
"""

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(promstack.missing() is not None,
                                 reason=promstack.missing() or "")]


def _xid(page: str, code: int) -> str:
    """The page with the GPU's last Xid set to ``code`` (dcgm-exporter 3.3.6+ labels the
    series with err_code as well)."""
    old = 'err_code="0",err_msg="No Error"} 0'
    assert old in page
    return page.replace(old, f'err_code="{code}",err_msg="Xid {code}"}} {code}')


def _wait(what: str, cond: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Store, MemorySlurm, promstack.MetricsPage, Path]]:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    tokens = make_tokens(tmp_path / "tokens.toml")
    token_file = tmp_path / "am.token"
    token_file.write_text(tokens["alice"] + "\n")
    slurm = MemorySlurm([(NODE, "gpu"), ("gpu02", "gpu")],
                        clock=lambda: datetime.now(timezone.utc))
    settings = ApiSettings(tokens=tmp_path / "tokens.toml", bind="127.0.0.1:0")
    app = ApiApp(settings, Location(state_dir=state_dir, source="test"),
                 slurm=lambda: slurm, policy_file=str(policy_file))
    server = wsgi_server(settings, app)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    url = (f"http://{server.bind_addr[0]}:{server.bind_addr[1]}"
           "/api/v1/sources/alertmanager")
    page = promstack.MetricsPage(PAGE.read_text())
    am = promstack.Alertmanager(tmp_path, promstack.alertmanager_config(url, token_file))
    try:
        with am, promstack.Prometheus(tmp_path, page.target, promstack.RULES, am.port):
            yield Store(state_dir), slurm, page, policy_file
    finally:
        page.close()
        server.stop()
        thread.join(timeout=10)


def test_an_xid_alertmanager_fires_is_proposed_and_its_resolve_withdraws_it(
        stack: tuple[Store, MemorySlurm, promstack.MetricsPage, Path]) -> None:
    """SPEC D13, P1, D7, Q3, L4 with the real Prometheus and Alertmanager."""
    store, slurm, page, policy_file = stack
    policy = load_policy(policy_file)
    text = PAGE.read_text()
    page.set(_xid(text, 48))

    def firing() -> Any:
        got = [a for a in load(store.load().data.get(SOURCES_KEY)) if a.status == "firing"]
        return got[0] if got else None

    alert = _wait("Alertmanager's firing notification", firing)
    assert (alert.source, alert.node, alert.fault) == ("alertmanager", NODE, "gpu.xid.48")
    assert alert.problem == "" and alert.rule == "sources.alertmanager.map[0]"
    # D7: the alert as Alertmanager sent it, unchanged
    assert alert.payload["labels"]["Hostname"] == NODE
    assert alert.payload["labels"]["alertname"] == "GpuXidError"
    assert alert.payload["labels"]["UUID"] == "GPU-f809e614-a528-4083-acbf-334600000000"
    assert alert.payload["annotations"]["summary"].endswith("reported Xid 48")
    assert "DCGM_FI_DEV_XID_ERRORS" in alert.payload["generatorURL"]
    assert alert.payload["fingerprint"] == alert.id

    now = datetime.now(timezone.utc)
    view = ClusterView(nodes=tuple(slurm.nodes()))
    plan = decide(view, store.load(), now, policy)
    store.apply(plan, now)
    rems = [r for r in store.load().remediations if r.node == NODE]
    assert len(rems) == 1, rems
    rem = rems[0]
    assert rem.fault == "gpu.xid.48" and rem.detector == "alertmanager"
    assert rem.action is catalog.load().get("gpu.xid.48").action  # reboot
    assert rem.phase is Phase.PROPOSED  # P2: waits for a person
    why = next(d.why for d in plan.records if d.remediation == rem.id and d.phase == "proposed")
    assert next(d.rule for d in plan.records if d.remediation == rem.id) == "P1"
    assert "reported Xid 48" in why, why  # the alert's own words (D7)
    assert not [r for r in store.load().remediations if r.node == "gpu02"]

    # Q3: Alertmanager's repeats update the one entry, never add another
    assert len([a for a in load(store.load().data[SOURCES_KEY]) if a.id == alert.id]) == 1

    page.set(text)  # the Xid metric back to 0: Prometheus resolves, Alertmanager says so

    def resolved() -> Any:
        got = [a for a in load(store.load().data.get(SOURCES_KEY)) if a.id == alert.id]
        return got[0] if got and got[0].status == "resolved" else None

    gone = _wait("Alertmanager's resolved notification", resolved)
    assert gone.ends_at is not None and gone.payload["status"] == "resolved"
    later = datetime.now(timezone.utc)
    store.apply(decide(ClusterView(nodes=tuple(slurm.nodes())), store.load(), later,
                       policy), later)
    rem = next(r for r in store.load().remediations if r.id == rem.id)
    assert rem.phase is Phase.WITHDRAWN, rem.phase  # L4
