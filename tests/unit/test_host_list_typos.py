"""A host-list typo on the command line (issue 36 item 6, SPEC I4): `status`, `alerts` and
`remediations` with ``--node 'w[1-'`` say which host list is bad (exit 2, the CLI's usage
status; one JSON object under ``--json``), never a traceback and never "No open
remediations.". A valid host list still works.

No Slurm needed: the store is a real one in a temp directory, Slurm the in-process
`MemorySlurm`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.slurm.memory import MemorySlurm

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
TYPO = "w[1-"
COMMANDS = (["status"], ["alerts"], ["remediations"])


def run(args: list[str], state: Path) -> Result:
    slurm = MemorySlurm([("w1", "a"), ("w2", "a")], clock=lambda: T0)
    return CliRunner().invoke(cli, args, env={"SLURM_HEAL_STATE_DIR": str(state)},
                              obj={"slurm": slurm})


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_host_list_typo_is_a_usage_error_naming_it(command: list[str], tmp_path: Path) -> None:
    result = run([*command, "--node", TYPO], tmp_path)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert f"--node '{TYPO}' is not a host list" in result.output
    assert "Traceback" not in result.output and "No open remediations" not in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_host_list_typo_under_json_is_one_json_error(command: list[str], tmp_path: Path) -> None:
    result = run([*command, "--node", TYPO, "--json"], tmp_path)
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["exit"] == 2 and error["kind"] == "UsageError"
    assert TYPO in error["message"]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_valid_host_list_is_accepted(command: list[str], tmp_path: Path) -> None:
    result = run([*command, "--node", "w[1-2]", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
