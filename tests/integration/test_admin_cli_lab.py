"""The admin CLI against real Slurm 22.05 (the session lab): where the store lives by
default, and alerts/explain/request reading real nodes (SPEC I4, I5, I2, D7).

Marked `slurm`: they run with the lab (tests/conftest.py) and skip where Slurm is absent.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.extra import KEY, our_section
from slurm_heal.store import default_state_dir
from slurm_heal.types import Alert, Evidence, Severity
from tests.lab import Lab

pytestmark = pytest.mark.slurm
T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def run(lab: Lab, tmp_path: Path, args: list[str]) -> Result:
    env = {"SLURM_CONF": str(lab.conf), "SLURM_HEAL_STATE_DIR": str(tmp_path / "state"),
           "SUDO_USER": "alice"}
    return CliRunner().invoke(cli, args, env=env)


def test_the_default_store_is_beside_the_labs_state_save_location(lab: Lab) -> None:
    """SPEC I5: the store lives next to slurmctld's own state."""
    config = lab.run(["scontrol", "show", "config"]).stdout
    line = next(ln for ln in config.splitlines() if ln.startswith("StateSaveLocation"))
    save = Path(line.split("=", 1)[1].strip())
    assert default_state_dir(lab.conf) == save.parent / "slurm-heal"


def test_alerts_and_explain_read_a_real_nodes_extra(lab: Lab, tmp_path: Path) -> None:
    """SPEC D7/I2: what the node check published in Extra reaches the operator unchanged."""
    node = lab.nodes[0]
    alert = Alert(node=node, fault="gpu.xid.79", severity=Severity.CRITICAL,
                  summary="GPU 3 has fallen off the bus", first_seen=T0, last_seen=T0,
                  detector="kernel_log",
                  evidence=(Evidence(source="kmsg", text="NVRM: Xid (PCI:0000:3b:00): 79"),))
    extra = json.dumps({KEY: our_section([alert], T0)}, separators=(",", ":"))
    lab.scontrol("update", f"nodename={node}", f"extra={extra}")

    result = run(lab, tmp_path, ["alerts", "--json"])
    assert result.exit_code == 0, result.output
    (got,) = json.loads(result.output)["alerts"]
    assert (got["node"], got["fault"], got["summary"]) == \
        (node, "gpu.xid.79", "GPU 3 has fallen off the bus")
    assert got["evidence"][0]["text"] == "NVRM: Xid (PCI:0000:3b:00): 79"

    explained = run(lab, tmp_path, ["explain", node])
    assert explained.exit_code == 0, explained.output
    assert "Slurm: IDLE" in explained.output
    assert "gpu.xid.79 (critical)" in explained.output and "what it means:" in explained.output


def test_a_request_for_a_node_the_cluster_lacks_exits_6(lab: Lab, tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()  # a store a controller runs on (its heartbeat)
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat())
    result = run(lab, tmp_path, ["request", "gpu999", "reboot", "--reason", "typo"])
    assert result.exit_code == 6, result.output
    ok = run(lab, tmp_path, ["request", lab.nodes[1], "reboot", "--reason", "NCCL hangs"])
    assert ok.exit_code == 0, ok.output


def test_a_request_without_a_store_flag_to_a_store_no_daemon_runs_on_is_refused(
        lab: Lab, tmp_path: Path) -> None:
    """The request that was lost: no --config, no state dir; the store found beside the
    lab's StateSaveLocation has no controller, so the request is refused (exit 5), naming
    the path and how to point at the right store, and nothing is written there."""
    env = {"SLURM_CONF": str(lab.conf), "SLURM_HEAL_STATE_DIR": None,
           "SLURM_HEAL_CONFIG": None, "SUDO_USER": "alice"}
    where = default_state_dir(lab.conf)
    result = CliRunner().invoke(cli, ["request", lab.nodes[0], "reboot", "--reason", "x"],
                                env=env)
    assert result.exit_code == 5, result.output
    assert f"store {where} (from beside StateSaveLocation of {lab.conf})" in result.output
    assert "--config" in result.output and not (where / "state.json").exists()


def test_status_reads_the_cluster_named_by_the_configs_slurm_conf(lab: Lab, tmp_path: Path) -> None:
    """SPEC I4, issue 36 item 5: $SLURM_CONF unset, the config naming the lab's slurm.conf:
    `status` asks that cluster (it used to stop on scontrol's "Could not establish a
    configuration source", exit 3), as `explain` and `alerts` do."""
    cfg = tmp_path / "heal.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{tmp_path / "state"}"\n'
                   f'slurm_conf = "{lab.conf}"\n[provider]\ntype = "simulator"\n')
    env = {"SLURM_CONF": None, "SLURM_HEAL_STATE_DIR": None, "SLURM_HEAL_CONFIG": None}
    result = CliRunner().invoke(cli, ["status", "--json", "--config", str(cfg),
                                      "--backend", "cli"], env=env)
    assert result.exit_code == 0, result.output
    listed = {n["name"] for n in json.loads(result.stdout)["node_status"]}
    assert set(lab.nodes) <= listed
    alerts = CliRunner().invoke(cli, ["alerts", "--json", "--config", str(cfg)], env=env)
    assert alerts.exit_code == 0, alerts.output
