"""`policy check` checks the whole file the daemon reads, as the daemon reads it (SPEC I4):
what the daemon would refuse exits 2 naming the key; what matches nothing is a warning
(a typo'd fault glob silently disables an approval rule, SPEC P2); a bare number where a
duration is meant is refused (SPEC S2: `cooldown = 30` is not "30 minutes").

The cluster part asks the in-process `MemorySlurm`; no Slurm needed.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from slurm_heal.cli import cli
from slurm_heal.configcheck import check_config
from slurm_heal.errors import ConfigError
from slurm_heal.slurm.memory import MemorySlurm

HTTP = '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'


def check(tmp_path: Path, text: str, *extra: str, slurm: Any = None) -> Result:
    f = tmp_path / "heal.toml"
    f.write_text(text)
    args = ["policy", "check", str(f), *extra]
    if slurm is None:
        args.append("--no-slurm")
    return CliRunner().invoke(cli, args, obj={"slurm": slurm} if slurm else None)


@pytest.mark.parametrize(("text", "key", "why"), [
    ('[provider]\ntype = "htp"\n', "provider.type", "unknown provider type 'htp'"),
    ('[provider]\ntype = "http"\n', "provider.url", "is required"),
    ('[controller]\nintervall = 5\n' + HTTP, "controller.intervall", "Extra inputs"),
    ('[approvals]\ndefault = "manual"\n', "provider", "missing: the daemon needs a [provider]"),
    ('[provider]\ntype = "exec"\n[provider.scripts]\nreboot = "/nonexistent/reboot.sh"\n',
     "provider.scripts.reboot", "not an executable file"),
    ('[safety]\ncooldown = 30\n' + HTTP, "safety.cooldown", "bare number"),
    ('[safety.persistence]\nwarning = 600\n' + HTTP, "safety.persistence", "bare number"),
    ('[waiting]\nmax_wait = 7200\n' + HTTP, "waiting.max_wait", "bare number"),
])
def test_a_file_the_daemon_refuses_is_refused_by_policy_check(
        tmp_path: Path, text: str, key: str, why: str) -> None:
    result = check(tmp_path, text)
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert f"heal.toml: {key}" in line and why in line


def test_json_errors_of_policy_check_are_json(tmp_path: Path) -> None:
    result = check(tmp_path, '[provider]\ntype = "htp"\n', "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["kind"] == "ConfigError"


def test_a_typod_fault_glob_is_a_warning_naming_the_rule(tmp_path: Path) -> None:
    """SPEC P2: `gpu.xdi.119` matches nothing, so the auto-approval never applies."""
    text = ('[[approvals.rules]]\nfault = "gpu.xdi.119"\nmode = "auto"\n'
            '[[approvals.rules]]\nfault = "gpu.xid.*"\naction = "migrate"\nmode = "manual"\n'
            '[[approvals.rules]]\nfault = "gpu.xid.999"\nmode = "auto"\n'
            '[safety.persistence]\n"fs.redonly" = "5m"\n' + HTTP)
    result = check(tmp_path, text, "--json")
    assert result.exit_code == 0, result.output
    warnings = json.loads(result.stdout)["warnings"]
    assert len(warnings) == 2, warnings
    assert "approvals.rules[0].fault: 'gpu.xdi.119' matches no fault" in warnings[0]
    assert "safety.persistence.fs.redonly" in warnings[1]
    plain = check(tmp_path, text)
    assert plain.exit_code == 0 and "2 warning(s)" in plain.stdout
    assert "warning: " in plain.stderr and "gpu.xdi.119" in plain.stderr


def test_host_lists_and_pools_matching_no_node_are_warnings(tmp_path: Path) -> None:
    slurm = MemorySlurm([("gpu01", "a"), ("gpu02", "a")], clock=lambda: datetime.now(timezone.utc))
    text = ('[[approvals.rules]]\nnodes = "gpu[01-02]"\nmode = "auto"\n'
            '[[approvals.rules]]\nnodes = "gpo[01-02]"\nmode = "auto"\n'
            '[[approvals.rules]]\npools = ["a", "b"]\nmode = "auto"\n' + HTTP)
    data = json.loads(check(tmp_path, text, "--json", slurm=slurm).stdout)
    assert data["cluster_checked"] is True
    assert len(data["warnings"]) == 2, data["warnings"]
    assert "approvals.rules[1].nodes: 'gpo[01-02]' matches no node" in data["warnings"][0]
    assert "approvals.rules[2].pools: 'b' is no pool" in data["warnings"][1]


def test_the_provider_is_built_dry_and_a_good_exec_file_passes(tmp_path: Path) -> None:
    script = tmp_path / "reboot.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(script, script.stat().st_mode | stat.S_IXUSR)
    f = tmp_path / "heal.toml"
    f.write_text(f'[provider]\ntype = "exec"\n[provider.scripts]\nreboot = "{script}"\n')
    report = check_config(f)
    assert report.provider_type == "exec" and report.warnings == []
    assert not list(tmp_path.glob("*.json"))  # built in a throw-away state directory


def test_check_config_raises_config_error_for_what_the_daemon_refuses(tmp_path: Path) -> None:
    f = tmp_path / "heal.toml"
    f.write_text('[controller]\nintervall = 5\n' + HTTP)
    with pytest.raises(ConfigError, match="controller.intervall"):
        check_config(f)
