"""`slurm-heal status` against the lab and against no cluster at all (SPEC I4, I2, D5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.cli import cli
from tests.lab import Lab

pytestmark = pytest.mark.slurm

ALERT_EXTRA = json.dumps({"site": "x", "slurm_heal": {"v": 1, "alerts": [{
    "fault": "gpu.xid.79", "severity": "critical", "summary": "GPU has fallen off the bus",
    "detector": "kernel_log", "first_seen": "2026-01-05T00:00:00+00:00",
    "last_seen": "2026-01-05T00:01:00+00:00", "evidence": []}]}})


def _backend_args(lab: Lab, backend: str) -> tuple[list[str], dict[str, str]]:
    """`status` options and environment for the backend under test."""
    env = {}
    if backend == "rest":
        env = {"SLURM_HEAL_REST_URL": lab.rest_url,
               "SLURM_HEAL_REST_TOKEN_FILE": str(lab.token_file)}
    return ["--backend", backend], env


def test_status_json_lists_nodes_with_states_reasons_and_alerts(lab: Lab, backend: str,
                                                                tmp_path: Path) -> None:
    """Through every backend: the 25.11 bug was `{"nodes": []}` with exit 0."""
    ours, foreign, alerted = lab.nodes[0], lab.nodes[1], lab.nodes[2]
    lab.scontrol("update", f"nodename={ours}", "state=drain",
                 "reason=heal: gpu.xid.79 rem=r-1 by=controller cordoned")
    lab.scontrol("update", f"nodename={foreign}", "state=drain", "reason=ops: bad fan")
    lab.scontrol("update", f"nodename={alerted}", f"extra={ALERT_EXTRA}")
    args, env = _backend_args(lab, backend)
    result = CliRunner().invoke(cli, ["status", "--json", "--slurm-conf", str(lab.conf),
                                      "--state-dir", str(tmp_path / "state"), *args], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    nodes = {n["name"]: n for n in doc["node_status"]}
    assert doc["groups"]["drained_by_others"] == foreign  # D5: the overview too
    assert doc["counts"]["cordoned"] == 1 and doc["counts"]["alerting"] == 1
    assert sorted(nodes) == lab.nodes
    assert nodes[ours]["states"] == ["IDLE", "DRAIN"]
    assert nodes[ours]["reason"]["kind"] == "ours"
    assert nodes[ours]["reason"]["fault"] == "gpu.xid.79"
    assert nodes[ours]["reason"]["remediation"] == "r-1"
    assert nodes[foreign]["reason"]["kind"] == "foreign"
    assert nodes[foreign]["reason"]["text"] == "ops: bad fan"
    assert [a["fault"] for a in nodes[alerted]["alerts"]] == ["gpu.xid.79"]
    assert nodes[lab.nodes[3]]["reason"] is None and nodes[lab.nodes[3]]["alerts"] == []


def test_status_text_marks_foreign_reasons(lab: Lab, backend: str, tmp_path: Path) -> None:
    lab.scontrol("update", f"nodename={lab.nodes[1]}", "state=drain", "reason=ops: bad fan")
    args, env = _backend_args(lab, backend)
    result = CliRunner().invoke(cli, ["status", "--slurm-conf", str(lab.conf),
                                      "--state-dir", str(tmp_path / "state"), *args], env=env)
    assert result.exit_code == 0, result.output
    assert f"{lab.nodes[1]} drained by " in result.stdout and ": ops: bad fan" in result.stdout


def test_status_without_a_reachable_cluster_says_so_in_one_line(lab: Lab, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(lab.conf.read_text().replace(
        f"SlurmctldPort={lab.base_port}", f"SlurmctldPort={lab.base_port + len(lab.nodes) + 1}"))
    result = CliRunner().invoke(cli, ["status", "--slurm-conf", str(conf), "--timeout", "2",
                                      "--backend", "cli", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 3
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    # the store's part is still shown; the nodes are said to be unknown, in one line
    assert lines[0].startswith("NO CONTROLLER")
    (nodes,) = [ln for ln in lines if ln.startswith("Nodes:")]
    assert "Slurm did not answer" in nodes and "no Slurm controller answered" in nodes
