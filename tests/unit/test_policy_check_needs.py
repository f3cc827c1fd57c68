"""`policy check` checks what the daemon and `serve` will open at start, not only the file
(issue 25 item 4): a slurm.conf that is not there, a token file that is not there.
Through the real command (CliRunner, no Slurm client handed in: as an operator runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from slurm_heal.cli import cli

HTTP = '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'


def policy_check(tmp_path: Path, text: str, *extra: str,
                 env: dict[str, str] | None = None) -> Result:
    f = tmp_path / "heal.toml"
    f.write_text(text)
    return CliRunner().invoke(cli, ["policy", "check", str(f), *extra], env=env)


def test_a_slurm_conf_pointing_nowhere_is_the_files_error(tmp_path: Path) -> None:
    nowhere = tmp_path / "etc" / "slurm.conf"
    result = policy_check(tmp_path, f'[controller]\nslurm_conf = "{nowhere}"\n' + HTTP,
                          "--json")
    assert result.exit_code == 2, result.output
    err = json.loads(result.stdout)["error"]
    assert "heal.toml: controller.slurm_conf" in err["message"]
    assert str(nowhere) in err["message"] and "daemon would stop" in err["message"]


def test_no_slurm_conf_where_slurm_looks_is_slurms_error_exit_3(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.conf"
    result = policy_check(tmp_path, HTTP, env={"SLURM_CONF": str(missing)})
    assert result.exit_code == 3, result.output
    assert f"slurm.conf not found: {missing}" in result.output
    assert "daemon would stop" in result.output


def test_no_slurm_skips_the_slurm_conf_as_it_skips_the_cluster(tmp_path: Path) -> None:
    nowhere = tmp_path / "etc" / "slurm.conf"
    result = policy_check(tmp_path, f'[controller]\nslurm_conf = "{nowhere}"\n' + HTTP,
                          "--no-slurm")
    assert result.exit_code == 0, result.output


def test_a_missing_token_file_is_refused_as_serve_refuses_it(tmp_path: Path) -> None:
    result = policy_check(tmp_path, HTTP + '[api]\ntokens = "tokens.toml"\n', "--no-slurm")
    assert result.exit_code == 2, result.output
    assert "heal.toml: api.tokens" in result.output
    assert str(tmp_path / "tokens.toml") in result.output and "api-token" in result.output


def test_an_existing_token_file_passes(tmp_path: Path) -> None:
    made = CliRunner().invoke(cli, ["api-token", "alice", "--file",
                                    str(tmp_path / "tokens.toml")])
    assert made.exit_code == 0, made.output
    result = policy_check(tmp_path, HTTP + '[api]\ntokens = "tokens.toml"\n', "--no-slurm")
    assert result.exit_code == 0, result.output
