"""`slurm-heal plan`: the daemon's decision as a dry run; writes and executes nothing."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from click.testing import CliRunner

from slurm_heal import extra
from slurm_heal.cli import cli
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Alert, Severity

CONFIG = """
[[approvals.rules]]
fault = "gpu.xid.119"
mode = "auto"
[provider]
type = "http"
url = "http://127.0.0.1:9"
"""


def test_plan_shows_rule_and_why_and_changes_nothing(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    cluster = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: now)
    alert = Alert(node="gpu01", fault="gpu.xid.119", severity=Severity.CRITICAL,
                  summary="GSP timeout", first_seen=now, last_seen=now)
    cluster.set_extra("gpu01", extra.KEY, extra.our_section([alert], now))
    cfg = tmp_path / "heal.toml"
    cfg.write_text(CONFIG)
    state = tmp_path / "state"
    result = CliRunner().invoke(cli, ["plan", "--config", str(cfg), "--state-dir", str(state),
                                      "--json"], obj={"slurm": cluster})
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    phases = [(r["node"], r["phase"], r["rule"]) for r in out["records"]]
    assert ("gpu01", "approved", "P2:approvals[0]") in phases
    assert any(e["kind"] == "cordon" for e in out["effects"])
    assert not cluster.node("gpu01").drained  # nothing executed
    assert not (state / "state.json").exists()  # nothing written
