"""The console's node page with the machine's ledger (SPEC E7, O5) in a real browser
(headless Chromium, JavaScript off), against the console served by the production WSGI
server in this process: a node on a machine identified by its GPU serials, renamed once
(gpu07 -> gpu01), with five remediations in the last days (a lemon), in memory
(MemorySlurm) and a store and ledger in a temporary state directory. Written for the
test, not captured from a site.

The screenshot goes to test-output/console/console-node-ledger.png;
SLURM_HEAL_CONSOLE_DOCS=1 writes it into docs/img/ (docs/console.md shows it).

Without the browser: a skip naming `contrib/lab/lab install --browser`; with CI=true a
failure.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from slurm_heal import extra
from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.ledger import LedgerFile
from slurm_heal.location import Location
from slurm_heal.models import Attempt, Phase, Remediation, State, idempotency_key
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Severity
from tests.apiserve import make_tokens
from tests.browser.test_console_lab import REPO, Browser, browser_ok

pytestmark = [pytest.mark.slow, pytest.mark.browser]
__all__ = ["browser_ok"]  # the fixture, imported for its skip

SERIALS = ["1654922001234", "1654922001235", "1654922001236", "1654922001237"]
FAULTS = ("gpu.xid.48", "gpu.xid.119", "gpu.xid.48", "gpu.xid.79", "gpu.xid.119")


def _history(host: str, now: datetime) -> tuple[Remediation, ...]:
    out = []
    for i, fault in enumerate(FAULTS):
        at = now - timedelta(days=5 - i, hours=3)
        node = "gpu07" if i < 2 else "gpu01"
        action = Action.REBUILD if i == 2 else Action.REBOOT
        rid = f"r-ledger{i:05d}"
        out.append(Remediation(
            id=rid, node=node, host=host, pool="gpu", fault=fault, severity=Severity.CRITICAL,
            action=action, phase=Phase.FAILED if i == 3 else Phase.DONE, created=at,
            updated=at + timedelta(minutes=20), alert_first_seen=at,
            phase_times={"proposed": at, "done" if i != 3 else "failed":
                         at + timedelta(minutes=20)},
            attempts=(Attempt(key=idempotency_key(rid, "act", 0), effect="act", action=action,
                              started=at + timedelta(minutes=5), outcome="ok",
                              finished=at + timedelta(minutes=6)),)))
    return tuple(out)


@pytest.fixture(scope="module")
def console(browser_ok: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Browser, dict[str, str], str]]:
    root = tmp_path_factory.mktemp("console-ledger")
    now = datetime.now(timezone.utc)
    state_dir = root / "state"
    state_dir.mkdir()
    machine = extra.machine_identity(SERIALS)
    assert machine is not None
    host = machine["host"]
    slurm = MemorySlurm([("gpu01", "gpu"), ("gpu02", "gpu")], clock=lambda: now)
    alert = Alert(node="gpu01", fault="gpu.xid.48", severity=Severity.CRITICAL,
                  summary="double-bit ECC error (Xid 48)", first_seen=now - timedelta(hours=1),
                  last_seen=now, detector="kmsg")
    slurm.set_extra("gpu01", extra.KEY, extra.our_section([alert], now, machine))
    slurm.set_extra("gpu02", extra.KEY, extra.our_section([], now))
    store = Store(state_dir)
    history = _history(host, now)
    with store.transaction() as txn:
        txn.state = State(remediations=history)
    (state_dir / "heartbeat").write_text(now.isoformat())
    ledger = LedgerFile(state_dir)
    # the machine seen as gpu07 first (five days ago), then renamed gpu01
    from slurm_heal.types import NodeInfo

    before = NodeInfo(name="gpu07", states=frozenset({"IDLE"}), partitions=("gpu",),
                      extra={extra.KEY: extra.our_section([], now, machine)})
    ledger.update([before], history[:2], now - timedelta(days=5, hours=4))
    ledger.update(slurm.nodes(), history, now)
    tokens = make_tokens(root / "tokens.toml")
    settings = ApiSettings(tokens=root / "tokens.toml", bind="127.0.0.1:0")
    app = ApiApp(settings, Location(state_dir=state_dir, source="test"), slurm=lambda: slurm)
    server = wsgi_server(settings, app)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    b = Browser(f"http://{server.bind_addr[0]}:{server.bind_addr[1]}")
    try:
        yield b, tokens, host
    finally:
        b.close()
        server.stop()
        thread.join(timeout=10)


def test_the_node_page_shows_the_machines_ledger_across_a_rename(
        console: tuple[Browser, dict[str, str], str]) -> None:
    """SPEC E7: gpu01's page names its machine (by GPU serials), the names it had
    (gpu07, gpu01), its remediations by action and outcome, the faults seen, and the
    lemon badge (5 remediations acted within 7 days)."""
    b, tokens, host = console
    b.login(tokens["victor"], "/nodes/gpu01")
    card = b.find("#machine-ledger").text
    assert host in b.text() and "lemon (E7)" in b.text()
    assert "its GPU serials" in card and SERIALS[0] in card
    assert "Names it has had: gpu07, gpu01" in card
    assert "5 remediation(s) acted within 7d (5 in all)" in card
    assert "no more automatic remediation (E7)" in card
    assert "reboot done 3, failed 1" in card and "rebuild done 1" in card
    assert "gpu.xid.48" in card
    path = b.shot("node-ledger")
    if os.environ.get("SLURM_HEAL_CONSOLE_DOCS") == "1":
        (REPO / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(path, REPO / "docs" / "img" / path.name)
