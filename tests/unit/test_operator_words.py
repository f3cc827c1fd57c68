"""What an operator is told on the smaller things of issue 25 item 9, through the real
commands: a reason too long to keep is refused (as the API refuses it), an install whose
config is not where the admin commands look says how to point them at it, and the
daemon's start line names the provider type as configured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.api.bodies import MAX_REASON
from slurm_heal.cli import cli
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return Store(tmp_path / "state")


@pytest.mark.parametrize("args", [
    ["request", "gpu01", "reboot"], ["approve", "gpu01"], ["deny", "gpu01"],
    ["cancel", "gpu01"], ["validate", "gpu01"], ["pause"], ["unpause"], ["reset-breaker"],
])
def test_a_reason_longer_than_the_api_takes_is_refused_and_nothing_queued(
        store: Store, args: list[str]) -> None:
    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: datetime.now(timezone.utc))
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir), "SUDO_USER": "alice"}
    too_long = CliRunner().invoke(cli, [*args, "--reason", "x" * 20_000, "--json"], env=env,
                                  obj={"slurm": slurm})
    assert too_long.exit_code == 2, too_long.output
    err = json.loads(too_long.stdout)["error"]
    assert "--reason" in err["message"] and str(MAX_REASON) in err["message"]
    assert store.load().inbox == ()


def test_a_reason_of_the_api_limit_is_taken(store: Store) -> None:
    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: datetime.now(timezone.utc))
    env = {"SLURM_HEAL_STATE_DIR": str(store.dir), "SUDO_USER": "alice"}
    ok = CliRunner().invoke(cli, ["request", "gpu01", "reboot", "--reason", "y" * MAX_REASON],
                            env=env, obj={"slurm": slurm})
    assert ok.exit_code == 0, ok.output
    (cmd,) = store.load().inbox
    assert len(cmd.reason) == MAX_REASON


def test_install_controller_elsewhere_says_to_set_slurm_heal_config(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    config = tmp_path / "site" / "heal.toml"
    result = CliRunner().invoke(cli, ["install-controller", "--prefix", str(tmp_path / "opt"),
                                      "--no-venv", "--slurm-conf", str(conf), "--config",
                                      str(config), "--json"])
    assert result.exit_code == 0, result.output
    lines = json.loads(result.stdout)["lines"]
    assert any(f"SLURM_HEAL_CONFIG={config}" in line for line in lines), lines


DAEMON_CONFIG = """
[controller]
state_dir = "{state}"
slurm_conf = "{conf}"
slurm_backend = "rest"
slurm_rest_url = "http://127.0.0.1:9"
slurm_rest_token_file = "{token}"

[provider]
type = "simulator"
url = "http://127.0.0.1:9"
"""


def test_the_daemon_start_line_names_the_provider_type_as_configured(tmp_path: Path) -> None:
    """`type = "simulator"` with the `url` of one running beside it is served by the http
    client: the start line still says simulator, as configured. Slurm is a slurmrestd nobody listens for: the one cycle fails fast (exit 3,
    as JSON), after the start line."""
    conf, token = tmp_path / "slurm.conf", tmp_path / "jwt"
    conf.write_text("ClusterName=test\n")
    token.write_text("t\n")
    cfg = tmp_path / "heal.toml"
    cfg.write_text(DAEMON_CONFIG.format(state=tmp_path / "state", conf=conf, token=token))
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "daemon", "--config",
                           str(cfg), "--once", "--json"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SLURM_HEAL_CONFIG": ""})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    logs = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    (start,) = [line for line in logs if line.get("event") == "start"]
    assert start["provider"] == "simulator" and "provider=simulator" in start["message"]
    assert json.loads(proc.stdout)["error"]["kind"] == "SlurmUnreachable"


@pytest.mark.parametrize("interval", ["2s", 2, "1m"])
def test_status_reads_controller_interval_in_the_one_duration_syntax(interval: object) -> None:
    """Issue 25 (the operator's walk): `interval = "2s"` passed `policy check` and the
    daemon, and `status` died in the overview with float('2s')."""
    from slurm_heal.config import policy_from_dict
    from slurm_heal.models import State
    from slurm_heal.readmodel import overview

    policy = policy_from_dict({"controller": {"interval": interval}})
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    ov = overview.gather(State(), [], now, heartbeat=None, policy=policy)
    assert ov.controller is not None
