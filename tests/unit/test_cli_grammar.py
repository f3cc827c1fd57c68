"""The command line as one grammar (SPEC I4, issue 25 item 7): every command has
``--json`` and prints its errors as JSON under it; the old spellings still work for a
release and say the new one; ``plan`` finds its config as the other commands do.

Through the real commands: click's CliRunner on `slurm_heal.cli.cli`, and the node
check's fast entry point (`slurm_heal.checks.fastcli.main`) as slurmd runs it.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from slurm_heal.checks import fastcli
from slurm_heal.cli import COMMANDS, cli
from slurm_heal.models import Breaker, Plan
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store


def invoke(args: list[str], env: dict[str, str] | None = None, obj: Any = None) -> Result:
    return CliRunner().invoke(cli, args, env=env, obj=obj)


def json_error(result: Result) -> dict[str, Any]:
    """The one JSON object an error under --json is, on stdout."""
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert lines, result.output
    err: dict[str, Any] = json.loads(lines[-1])["error"]
    assert err["exit"] == result.exit_code
    return err


def _commands() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name in COMMANDS:
        cmd = cli.get_command(click.Context(cli), name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            out.extend((name, sub) for sub in cmd.list_commands(click.Context(cmd)))
        else:
            out.append((name,))
    return out


@pytest.mark.parametrize("words", _commands(), ids=" ".join)
def test_every_command_has_json(words: tuple[str, ...]) -> None:
    """SPEC I4: every command, the long-running and install ones included, has --json."""
    result = invoke([*words, "--help"])
    assert result.exit_code == 0, result.output
    assert "--json" in result.stdout


def test_simulate_prints_its_error_as_json(tmp_path: Path) -> None:
    bad = tmp_path / "scenario.json"
    bad.write_text("{not json")
    result = invoke(["simulate", str(bad), "--json"])
    assert result.exit_code == 2
    err = json_error(result)
    assert err["kind"] == "ScenarioError" and "scenario.json" in err["message"]


def test_check_prints_a_config_error_as_json_both_ways(tmp_path: Path) -> None:
    bad = tmp_path / "check.toml"
    bad.write_text("hold = [\n")
    result = invoke(["check", "--json", "--dry-run", "--check-config", str(bad)])
    assert result.exit_code == 2
    assert json_error(result)["kind"] == "ConfigError"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = fastcli.main(["--json", "--dry-run", "--config", str(bad)])
    assert code == 2 and err.getvalue() == ""
    assert json.loads(out.getvalue())["error"]["kind"] == "ConfigError"


def test_a_usage_error_is_json_under_json_too() -> None:
    result = invoke(["check", "--json", "--no-such-option"])
    assert result.exit_code == 2
    assert json_error(result)["kind"] == "UsageError"
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as ex:
        fastcli.main(["--json", "--no-such-option"])
    assert ex.value.code == 2
    assert json.loads(out.getvalue())["error"]["kind"] == "UsageError"


def test_agent_prints_its_error_as_json(tmp_path: Path) -> None:
    bad = tmp_path / "check.toml"
    bad.write_text("interval = [\n")
    result = invoke(["agent", "--json", "--dry-run", "--check-config", str(bad)])
    assert result.exit_code == 2
    assert json_error(result)["kind"] == "ConfigError"


def test_daemon_prints_its_start_error_as_json(tmp_path: Path) -> None:
    result = invoke(["daemon", "--json", "--once"],
                    env={"SLURM_HEAL_CONFIG": str(tmp_path / "missing.toml")})
    assert result.exit_code == 2
    assert "missing.toml" in json_error(result)["message"]


def test_status_json_gives_the_store_as_an_object(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: now)
    state = tmp_path / "state"
    result = invoke(["status", "--json", "--state-dir", str(state)], obj={"slurm": slurm})
    assert result.exit_code == 0, result.output
    store = json.loads(result.stdout)["store"]
    assert store["dir"] == str(state) and store["from"] == "--state-dir"
    assert str(state) in store["text"]


CONFIG = """
[provider]
type = "http"
url = "http://127.0.0.1:9"
"""


def test_plan_reads_the_config_from_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "heal.toml"
    cfg.write_text(CONFIG)
    now = datetime.now(timezone.utc)
    slurm = MemorySlurm([("gpu01", "a")], clock=lambda: now)
    result = invoke(["plan", "--json", "--state-dir", str(tmp_path / "state")],
                    env={"SLURM_HEAL_CONFIG": str(cfg)}, obj={"slurm": slurm})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == []


def test_plan_without_any_config_says_where_to_put_one(tmp_path: Path) -> None:
    result = invoke(["plan", "--state-dir", str(tmp_path)], env={"SLURM_HEAL_CONFIG": ""})
    assert result.exit_code == 2
    assert "SLURM_HEAL_CONFIG" in result.output


@pytest.fixture
def open_breaker(tmp_path: Path) -> Store:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "heartbeat").write_text(datetime.now(timezone.utc).isoformat() + "\n")
    store = Store(tmp_path / "state")
    now = datetime.now(timezone.utc)
    store.apply(Plan(breaker=Breaker(open=True, opened_at=now, why="surge")), now)
    return store


def test_reset_breaker_is_a_verb_like_pause(open_breaker: Store) -> None:
    env = {"SLURM_HEAL_STATE_DIR": str(open_breaker.dir), "SUDO_USER": "erin"}
    result = invoke(["reset-breaker", "--reason", "checked", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["queued"]["kind"] == "reset_breaker"
    assert [c.kind for c in open_breaker.load().inbox] == ["reset_breaker"]


def test_the_old_breaker_spelling_still_works_and_says_the_new_one(open_breaker: Store) -> None:
    env = {"SLURM_HEAL_STATE_DIR": str(open_breaker.dir), "SUDO_USER": "erin"}
    result = invoke(["breaker", "reset", "--reason", "checked"], env=env)
    assert result.exit_code == 0, result.output
    assert "`breaker reset` is now `reset-breaker`" in result.stderr
    assert [c.kind for c in open_breaker.load().inbox] == ["reset_breaker"]
    shown = invoke(["breaker", "--json"], env=env)
    assert json.loads(shown.stdout)["reset_pending"] is True


def test_the_simulator_is_the_provider_simulator_and_the_old_name_works() -> None:
    result = invoke(["--help"])
    assert "provider-simulator" in result.stdout
    assert "  simulator" not in result.stdout  # the alias is not listed
    old = invoke(["simulator", "--help"])
    assert old.exit_code == 0 and "--port" in old.stdout
    assert "`simulator` is now `provider-simulator`" in old.stderr


def test_check_config_is_the_check_toml_option_and_config_its_old_spelling() -> None:
    for words in (["check"], ["agent"]):
        text = invoke([*words, "--help"]).stdout
        assert "--check-config" in text and "check.toml" in text
    assert "--check-config" in fastcli.parser().format_help()


def _first_json_line(argv: list[str], stream: str, tmp_path: Path,
                     want: dict[str, str]) -> dict[str, Any]:
    """Start a long-running command with --json and read its lines until one has
    every key/value of ``want``; then stop it."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env={**os.environ, "SLURM_HEAL_CONFIG": ""})
    try:
        pipe = proc.stdout if stream == "stdout" else proc.stderr
        assert pipe is not None
        for _ in range(50):
            line = pipe.readline()
            assert line, "the command ended before saying it listens"
            obj: dict[str, Any] = json.loads(line)  # every line is JSON under --json
            if all(obj.get(k) == v for k, v in want.items()):
                return obj
        raise AssertionError(f"no line with {want}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_provider_simulators_first_line_is_json(tmp_path: Path) -> None:
    first = _first_json_line(["provider-simulator", "--port", "0", "--json"], "stdout",
                             tmp_path, {"event": "listening"})
    assert first["url"].startswith("http://127.0.0.1:")


def test_serve_logs_json_lines_with_its_listening_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    assert invoke(["api-token", "alice", "--file", str(tokens)]).exit_code == 0
    line = _first_json_line(["serve", "--json", "--bind", "127.0.0.1:0", "--tokens",
                             str(tokens), "--state-dir", str(tmp_path / "state")], "stderr",
                            tmp_path, {"event": "listening"})
    assert line["url"].startswith("http://127.0.0.1:") and line["level"] == "INFO"
    assert line["store"]["dir"] == str(tmp_path / "state")
