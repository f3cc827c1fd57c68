"""`slurm-heal status` with no cluster: one clear line, non-zero exit (SPEC I4)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_heal.cli import cli


def test_status_with_missing_slurm_conf_fails_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "slurm.conf"
    result = CliRunner().invoke(cli, ["status", "--json", "--backend", "cli",
                                      "--slurm-conf", str(missing)])
    assert result.exit_code == 3
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    # --json: the error is one JSON object too (docs/cli.md)
    (line,) = lines
    # the one message of every admin command (slurm_heal.location.slurm_conf_path)
    assert json.loads(line)["error"]["message"] == (
        f"slurm.conf not found: {missing} (--slurm-conf); set SLURM_CONF or "
        "[controller] slurm_conf to the cluster's slurm.conf")
    assert json.loads(line)["error"]["exit"] == 3
