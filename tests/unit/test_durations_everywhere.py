"""One rule for every duration in every file, with the project's own words (issue 25
item 6, house style 13, `slurm_heal.durations`): "30s", "10m", "2h" everywhere; the keys
that were bare seconds still read a bare number; anything else is refused naming the
file and the key with durations.py's message, never a raw validation message.

heal.toml through `slurm-heal policy check`, check.toml through `slurm-heal check` (a bad
file is refused before any detector runs) and its parser for what a good value means.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.checks.config import parse_config
from slurm_heal.cli import cli

HTTP = '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'
NOT_A_DURATION = "'10x' is not a duration (use e.g."

# (section, key): every duration of heal.toml, its provider sections included
HEAL_DURATIONS = [
    ("controller", "interval"), ("controller", "audit_retention"),
    ("controller", "hot_retention"),
    ("notify", "backoff"), ("notify", "max_backoff"), ("notify", "poll"),
    ("api", "session_ttl"), ("safety", "cooldown"), ("safety", "return_timeout"),
    ("safety", "act_timeout"), ("waiting", "max_wait"), ("escalation", "window"),
    ("provider", "connect_timeout"), ("provider", "read_timeout"),
    ("provider", "backoff"), ("provider", "call_timeout"),
]
CHECK_DURATIONS = [
    ("check", "timeout"), ("kernel_log", "hold"), ("kernel_log", "timeout"),
    ("services", "window"), ("nvidia", "thermal_for"), ("nvidia", "tool_timeout"),
    ("amd", "tool_timeout"), ("network", "connect_timeout"), ("network", "unreachable_for"),
    ("mounts", "timeout"),
]


def heal_toml(section: str, key: str, value: str) -> str:
    if section == "provider":
        return HTTP + f"{key} = {value}\n"
    return f"[{section}]\n{key} = {value}\n" + HTTP


@pytest.mark.parametrize(("section", "key"), HEAL_DURATIONS, ids=[f"{s}.{k}" for s, k in HEAL_DURATIONS])
def test_every_heal_toml_duration_takes_a_unit_and_refuses_nonsense_in_one_voice(
        tmp_path: Path, section: str, key: str) -> None:
    f = tmp_path / "heal.toml"
    f.write_text(heal_toml(section, key, '"90s"'))
    ok = CliRunner().invoke(cli, ["policy", "check", str(f), "--no-slurm"])
    assert ok.exit_code == 0, ok.output
    f.write_text(heal_toml(section, key, '"10x"'))
    bad = CliRunner().invoke(cli, ["policy", "check", str(f), "--no-slurm"])
    assert bad.exit_code == 2
    assert f"heal.toml: {section}.{key}: {NOT_A_DURATION}" in bad.stderr, bad.stderr


@pytest.mark.parametrize(("section", "key"), CHECK_DURATIONS,
                         ids=[f"{s}.{k}" for s, k in CHECK_DURATIONS])
def test_every_check_toml_duration_takes_a_unit_and_refuses_nonsense_in_one_voice(
        tmp_path: Path, section: str, key: str) -> None:
    cfg = parse_config({section: {key: "2m"}}, file="check.toml")
    assert getattr(cfg if section == "check" else getattr(cfg, section), key) == 120.0
    legacy = parse_config({section: {key: 90}}, file="check.toml")  # bare seconds still read
    assert getattr(legacy if section == "check" else getattr(legacy, section), key) == 90
    f = tmp_path / "check.toml"
    f.write_text(f'[{section}]\n{key} = "10x"\n')
    bad = CliRunner().invoke(cli, ["check", "--check-config", str(f), "--dry-run"])
    assert bad.exit_code == 2
    assert f"check.toml: {section}.{key}: {NOT_A_DURATION}" in bad.stderr, bad.stderr


def test_audit_retention_as_a_bare_number_gets_the_projects_words(tmp_path: Path) -> None:
    f = tmp_path / "heal.toml"
    f.write_text('[controller]\naudit_retention = 90\n' + HTTP)
    bad = CliRunner().invoke(cli, ["policy", "check", str(f), "--no-slurm"])
    assert bad.exit_code == 2
    assert "controller.audit_retention: 90 is a bare number: write the duration with its " \
           "unit" in bad.stderr
