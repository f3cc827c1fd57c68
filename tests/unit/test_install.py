"""The documented site install (SPEC I1): the glue at PREFIX/libexec/ carries SLURM_CONF
(slurmd runs HealthCheckProgram without it), the slurm.conf snippet names exactly those
paths, and the controller gets a config the daemon takes. The venv part (pip) is run for
real by the lab test (tests/integration/test_install_lab.py); here `--no-venv` and a
stand-in PREFIX/bin/slurm-heal that records what it was given."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.configcheck import check_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def slurm_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=test\n")
    return conf


def fake_bin(prefix: Path, status: int = 0) -> Path:
    """PREFIX/bin/slurm-heal that records its arguments and environment."""
    exe = prefix / "bin" / "slurm-heal"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f'#!/bin/sh\necho "$@" > "{prefix}/args"\nenv > "{prefix}/env"\n'
                   f"exit {status}\n")
    exe.chmod(0o755)
    return exe


def install_node(prefix: Path, conf: Path, *extra: str) -> str:
    result = CliRunner().invoke(cli, ["install-node", "--prefix", str(prefix), "--no-venv",
                                      "--slurm-conf", str(conf), *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_healthcheck_wrapper_carries_slurm_conf_into_a_bare_environment(
        tmp_path: Path, slurm_conf: Path) -> None:
    """What slurmd does: runs HealthCheckProgram with no SLURM_CONF in the environment."""
    prefix = tmp_path / "opt" / "slurm-heal"
    fake_bin(prefix)
    install_node(prefix, slurm_conf, "--env", "SLURM_HEAL_ROOT=/srv/replay/${SLURMD_NODENAME}")
    wrapper = prefix / "libexec" / "slurm-heal-healthcheck"
    proc = subprocess.run([str(wrapper)], env={"SLURMD_NODENAME": "gpu07"}, check=False)
    assert proc.returncode == 0
    assert (prefix / "args").read_text().split() == ["check", "--mode", "healthcheck"]
    env = dict(line.split("=", 1) for line in (prefix / "env").read_text().splitlines()
               if "=" in line)
    assert env["SLURM_CONF"] == str(slurm_conf)
    assert env["SLURM_HEAL_ROOT"] == "/srv/replay/gpu07"
    assert os.access(wrapper, os.X_OK)


@pytest.mark.parametrize(("name", "status", "expected"), [
    ("slurm-heal-prolog", 1, 1), ("slurm-heal-prolog", 0, 0), ("slurm-heal-epilog", 1, 0)])
def test_prolog_and_epilog_wrappers_keep_the_glue_s_exit_rules(
        tmp_path: Path, slurm_conf: Path, name: str, status: int, expected: int) -> None:
    prefix = tmp_path / "p"
    fake_bin(prefix, status)
    install_node(prefix, slurm_conf)
    proc = subprocess.run([str(prefix / "libexec" / name)], env={}, check=False)
    assert proc.returncode == expected
    assert f"SLURM_CONF={slurm_conf}" in (prefix / "env").read_text()


def test_the_snippet_the_readme_and_contrib_name_the_same_paths(
        tmp_path: Path, slurm_conf: Path) -> None:
    prefix = Path("/opt/slurm-heal")
    out = install_node(tmp_path / "x", slurm_conf)
    snippet = (tmp_path / "x" / "share" / "slurm-heal" / "slurm.conf.snippet").read_text()
    assert f"HealthCheckProgram={tmp_path}/x/libexec/slurm-heal-healthcheck" in snippet
    assert "SchedulerParameters=nohold_on_prolog_fail" in snippet and snippet in out + "\n"
    from slurm_heal.install import snippet as make_snippet

    default = make_snippet(prefix)
    contrib = (REPO / "contrib" / "slurm" / "slurm-heal.conf").read_text()
    readme = (REPO / "README.md").read_text()
    for line in default.splitlines():
        assert line in contrib, line
        assert line in readme, line


def test_a_missing_slurm_conf_or_a_bad_env_is_refused(tmp_path: Path, slurm_conf: Path) -> None:
    missing = CliRunner().invoke(cli, ["install-node", "--prefix", str(tmp_path / "p"),
                                       "--no-venv", "--slurm-conf", str(tmp_path / "nope")])
    assert missing.exit_code == 3 and "slurm.conf not found" in missing.output
    bad = CliRunner().invoke(cli, ["install-node", "--prefix", str(tmp_path / "p"), "--no-venv",
                                   "--slurm-conf", str(slurm_conf), "--env", 'X=$(reboot)'])
    assert bad.exit_code == 2 and "--env" in bad.output
    assert not (tmp_path / "p" / "libexec").exists()


def test_install_controller_writes_a_config_the_daemon_takes_and_keeps_an_existing_one(
        tmp_path: Path, slurm_conf: Path) -> None:
    prefix, config = tmp_path / "opt", tmp_path / "etc" / "slurm-heal" / "heal.toml"
    args = ["install-controller", "--prefix", str(prefix), "--no-venv", "--slurm-conf",
            str(slurm_conf), "--config", str(config)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    report = check_config(config)
    assert report.policy.mode == "recommend_only" and report.provider_type == "slurm"
    unit = (prefix / "share" / "slurm-heal" / "slurm-heal.service").read_text()
    # --no-venv and no PREFIX/bin/slurm-heal: the unit runs the program that is there
    # (issue 36 item 3: it named PREFIX/bin/slurm-heal, which did not exist)
    start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    program = start.split("=", 1)[1].split()[0]
    assert os.access(program, os.X_OK) and start.endswith(f" daemon --config {config}")
    assert f"Environment=SLURM_CONF={slurm_conf}" in unit
    config.write_text("# mine\n" + config.read_text())
    again = CliRunner().invoke(cli, args)
    assert "kept the existing config" in again.output
    assert config.read_text().startswith("# mine")


def fake_slurm_bin(directory: Path) -> Path:
    """A directory of Slurm commands outside the system PATH (a Slurm built into its own
    prefix, as /opt/slurm/bin)."""
    directory.mkdir(parents=True)
    scontrol = directory / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'slurm 25.11.7'\n")
    scontrol.chmod(0o755)
    return directory


@pytest.mark.parametrize("name", ["slurm-heal-healthcheck", "slurm-heal-prolog",
                                  "slurm-heal-epilog"])
def test_the_glue_runs_the_site_s_slurm_commands_not_an_older_one_on_the_system_path(
        tmp_path: Path, slurm_conf: Path, name: str) -> None:
    """SPEC I1, I6: slurmd runs the glue without the operator's PATH; the check must run
    the site's Slurm commands (a 25.11 build in its own prefix), never the distribution's
    older `scontrol` in /usr/bin ("Zero Bytes were transmitted or received")."""
    prefix = tmp_path / "p"
    fake_bin(prefix)
    slurm_bin = fake_slurm_bin(tmp_path / "slurm" / "bin")
    install_node(prefix, slurm_conf, "--slurm-bin", str(slurm_bin))
    proc = subprocess.run([str(prefix / "libexec" / name)], env={}, check=False)
    assert proc.returncode == 0
    env = dict(line.split("=", 1) for line in (prefix / "env").read_text().splitlines()
               if "=" in line)
    assert env["PATH"].split(":")[0] == str(slurm_bin)
    assert env["PATH"].split(":")[1:] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".split(":")


def test_install_takes_the_slurm_commands_the_operator_runs_from_path_by_default(
        tmp_path: Path, slurm_conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed the README way (no --slurm-bin): the `scontrol` first on the installer's
    PATH names the Slurm the glue and the daemon unit use."""
    slurm_bin = fake_slurm_bin(tmp_path / "opt" / "slurm" / "bin")
    monkeypatch.setenv("PATH", f"{slurm_bin}:{os.environ.get('PATH', '')}")
    prefix = tmp_path / "p"
    fake_bin(prefix)
    out = install_node(prefix, slurm_conf)
    assert f"Slurm commands from {slurm_bin}" in out
    subprocess.run([str(prefix / "libexec" / "slurm-heal-healthcheck")],
                   env={"SLURMD_NODENAME": "gpu01"}, check=True)
    assert f"PATH={slurm_bin}:" in (prefix / "env").read_text()
    config = tmp_path / "heal.toml"
    assert CliRunner().invoke(cli, ["install-controller", "--prefix", str(prefix),
                                    "--no-venv", "--slurm-conf", str(slurm_conf),
                                    "--config", str(config)]).exit_code == 0
    unit = (prefix / "share" / "slurm-heal" / "slurm-heal.service").read_text()
    assert f"Environment=PATH={slurm_bin}:/usr/local/sbin:" in unit


def test_a_slurm_bin_without_scontrol_is_refused_before_anything_is_written(
        tmp_path: Path, slurm_conf: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["install-node", "--prefix", str(tmp_path / "p"),
                                      "--no-venv", "--slurm-conf", str(slurm_conf),
                                      "--slurm-bin", str(empty)])
    assert result.exit_code == 2 and "no executable scontrol" in result.output
    assert not (tmp_path / "p" / "libexec").exists()


def test_a_no_venv_install_points_the_glue_and_the_unit_at_the_program_that_is_there(
        tmp_path: Path, slurm_conf: Path) -> None:
    """Issue 36 item 3: `--no-venv --prefix X` wrote X/bin/slurm-heal, which does not exist,
    into the glue (HealthCheckProgram then exited 127) and the unit. The running
    installation's own slurm-heal is named instead, and the glue really runs the check."""
    prefix = tmp_path / "x"
    out = install_node(prefix, slurm_conf)
    glue = (prefix / "libexec" / "slurm-heal-healthcheck").read_text()
    named = next(ln for ln in glue.splitlines() if ln.startswith("SLURM_HEAL_BIN="))
    program = named.split("=", 1)[1].strip('"')
    assert not program.startswith(str(prefix)) and os.access(program, os.X_OK), named
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "kmsg").write_text("6,1,1,-;Linux version 6.1.0\n")
    proc = subprocess.run([str(prefix / "libexec" / "slurm-heal-healthcheck"), "--dry-run",
                           "--node", "gpu01"], env={"SLURM_HEAL_ROOT": str(root)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "gpu01: healthy" in proc.stdout, proc.stdout + proc.stderr
    assert f"SLURM_HEAL_BIN={program}" in out or program in out
    config = tmp_path / "heal.toml"
    done = CliRunner().invoke(cli, ["install-controller", "--prefix", str(prefix), "--no-venv",
                                    "--slurm-conf", str(slurm_conf), "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert f"`{program} policy check {config}`" in done.output
    assert f"ExecStart={program} daemon" in (
        prefix / "share" / "slurm-heal" / "slurm-heal.service").read_text()


def test_a_no_venv_install_keeps_the_prefix_s_own_program_when_it_is_there(
        tmp_path: Path, slurm_conf: Path) -> None:
    prefix = tmp_path / "p"
    exe = fake_bin(prefix)
    install_node(prefix, slurm_conf)
    assert f'SLURM_HEAL_BIN="{exe}"' in (prefix / "libexec" / "slurm-heal-prolog").read_text()


def test_install_controller_asks_pip_for_the_controller_extra_and_install_node_does_not(
        tmp_path: Path) -> None:
    """Issue 38: a node gets the node set; the controller host adds the `controller` extra,
    spelled for a checkout or a wheel as a direct reference; a name the operator gave
    (``--source slurm-heal==0.1.0``) is passed on as written."""
    from slurm_heal.install import pip_requirement

    wheel = tmp_path / "slurm_heal-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert pip_requirement(str(wheel), "node") == str(wheel)
    assert pip_requirement(str(wheel), "controller") == \
        f"slurm-heal[controller] @ file://{wheel}"
    assert pip_requirement(str(tmp_path), "controller") == \
        f"slurm-heal[controller] @ file://{tmp_path}"
    assert pip_requirement("slurm-heal==0.1.0", "controller") == "slurm-heal==0.1.0"
