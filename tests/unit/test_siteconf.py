"""Fit the site, never overwrite it (SPEC I7; issue 36 item 1): the slurm.conf lines the
install and `policy check` print keep the site's own settings. Slurm keeps the last of
two lines with one key, so a plain `SchedulerParameters=nohold_on_prolog_fail` after the
site's line dropped the site's options, and our Prolog= replaced the site's prolog.

The live configuration is `scontrol show config` as the 22.05 lab printed it with a
site's own lines (tests/data/real/slurm/lab-scontrol-show-config-site-22.05.txt)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.siteconf import parse_show_config, plan, site_wrapper

REPO = Path(__file__).resolve().parents[2]
SHOWN = REPO / "tests" / "data" / "real" / "slurm" / "lab-scontrol-show-config-site-22.05.txt"
PREFIX = Path("/opt/slurm-heal")


def live() -> dict[str, str]:
    return parse_show_config(SHOWN.read_text())


def line_of(result: object, key: str) -> dict[str, object]:
    lines = result.lines if hasattr(result, "lines") else result["lines"]  # type: ignore[index]
    found = [ln if isinstance(ln, dict) else ln.as_dict() for ln in lines
             if (ln["key"] if isinstance(ln, dict) else ln.key) == key]
    assert len(found) == 1, key
    return found[0]


def test_scontrol_show_config_is_read_with_unset_keys_left_out() -> None:
    conf = live()
    assert conf["SchedulerParameters"] == "bf_continue,bf_interval=60"
    assert conf["Prolog"] == "/etc/slurm/prolog.d/*"
    assert conf["ResumeTimeout"] == "60 sec"
    assert "PrologSlurmctld" not in conf  # (null)
    assert not any(k.startswith("Slurmctld(primary)") for k in conf)


def test_the_site_s_scheduler_parameters_are_kept_and_ours_added() -> None:
    got = line_of(plan(live(), PREFIX), "SchedulerParameters")
    assert got["status"] == "merge"
    assert got["line"] == "SchedulerParameters=bf_continue,bf_interval=60,nohold_on_prolog_fail"


def test_a_site_s_prolog_glob_gets_a_link_and_no_prolog_line() -> None:
    """Slurm runs every program a Prolog glob matches: ours joins the site's directory."""
    got = line_of(plan(live(), PREFIX), "Prolog")
    assert got["status"] == "keep" and got["line"] is None
    assert "ln -s /opt/slurm-heal/libexec/slurm-heal-prolog /etc/slurm/prolog.d/slurm-heal" \
        in str(got["note"])


def test_a_site_s_own_epilog_runs_first_through_the_wrapper() -> None:
    result = plan(live(), PREFIX)
    got = line_of(result, "Epilog")
    assert got["status"] == "merge"
    assert got["line"] == "Epilog=/opt/slurm-heal/libexec/slurm-heal-site-epilog"
    assert result.wrap == {"epilog": "/etc/slurm/site-epilog.sh"}


def test_a_site_running_nhc_keeps_it_with_its_interval_and_node_states() -> None:
    result = plan(live(), PREFIX)
    check = line_of(result, "HealthCheckProgram")
    assert check["status"] == "keep" and check["line"] is None
    assert "check_slurm_heal" in str(check["note"])
    for key in ("HealthCheckInterval", "HealthCheckNodeState"):
        assert line_of(result, key)["line"] is None, key


def test_no_printed_line_replaces_a_site_s_setting() -> None:
    """Every line for a key the site sets either keeps the site's value in it or names
    our wrapper, which runs the site's program first."""
    conf = live()
    result = plan(conf, PREFIX)
    for ln in result.lines:
        if ln.site is None or ln.line is None:
            continue
        assert ln.status == "merge", ln
        value = ln.line.split("=", 1)[1]
        assert conf[ln.key] in value or (
            "slurm-heal-site-" in value and conf[ln.key] in result.wrap.values()), ln


def test_a_fresh_site_gets_every_line() -> None:
    result = plan({"ResumeTimeout": "60 sec"}, PREFIX)
    lines = {ln.key: ln.line for ln in result.lines}
    assert lines["Prolog"] == "Prolog=/opt/slurm-heal/libexec/slurm-heal-prolog"
    assert lines["SchedulerParameters"] == "SchedulerParameters=nohold_on_prolog_fail"
    assert lines["HealthCheckNodeState"] == "HealthCheckNodeState=ANY,CYCLE"
    assert all(ln.status == "add" for ln in result.lines)


def test_a_second_install_finds_its_own_lines_present() -> None:
    conf = live() | {"SchedulerParameters": "bf_continue,nohold_on_prolog_fail",
                     "Epilog": "/opt/slurm-heal/libexec/slurm-heal-site-epilog",
                     "HealthCheckProgram": "/opt/slurm-heal/libexec/slurm-heal-healthcheck"}
    result = plan(conf, PREFIX)
    for key in ("SchedulerParameters", "Epilog", "HealthCheckProgram"):
        assert line_of(result, key)["status"] == "present", key
    assert result.wrap == {}


def test_resume_timeout_below_the_reboot_timeout_and_no_reboot_program_are_warned() -> None:
    conf = live()
    warned = plan(conf, PREFIX, reboot_timeout=1800, reboot_source="[provider] timeout").warnings
    assert any("ResumeTimeout is 60 s, below the reboot timeout 1800 s" in w for w in warned)
    assert not any("RebootProgram" in w for w in warned)
    ok = plan(conf | {"ResumeTimeout": "1800 sec"}, PREFIX, reboot_timeout=1800).warnings
    assert ok == []
    bare = {k: v for k, v in conf.items() if k != "RebootProgram"}
    assert any("RebootProgram is not set" in w for w in plan(bare, PREFIX,
                                                             reboot_timeout=600).warnings)
    # another provider reboots outside Slurm: no ResumeTimeout warning
    assert plan(conf, PREFIX, reboot_timeout=None).warnings == []


def test_an_unreadable_live_configuration_is_said_loudly() -> None:
    result = plan(None, PREFIX, source="`scontrol show config` failed (exit 1): x")
    assert result.warnings and "could not be read" in result.warnings[0]
    assert all(ln.status == "unknown" for ln in result.lines)
    # SPEC I7: not knowing the site's lines, none is printed as a line to paste (it could
    # replace the site's own): each is a commented template to merge by hand
    written = [t for t in result.snippet().splitlines() if not t.startswith("#")]
    assert written == [], written
    assert "# SchedulerParameters=nohold_on_prolog_fail" in result.snippet()


@pytest.mark.parametrize(("name", "site_rc", "ours_rc", "rc", "ran"), [
    ("prolog", 0, 0, 0, ["site", "ours"]), ("prolog", 0, 1, 1, ["site", "ours"]),
    ("prolog", 3, 0, 3, ["site"]), ("epilog", 2, 0, 2, ["site", "ours"]),
    ("epilog", 0, 0, 0, ["site", "ours"])])
def test_the_wrapper_runs_the_site_s_program_first_and_keeps_its_status(
        tmp_path: Path, name: str, site_rc: int, ours_rc: int, rc: int,
        ran: list[str]) -> None:
    record = tmp_path / "ran"
    for who, status in (("site", site_rc), ("ours", ours_rc)):
        prog = tmp_path / who
        prog.write_text(f'#!/bin/sh\necho "{who} $*" >> {record}\nexit {status}\n')
        prog.chmod(0o755)
    script = tmp_path / "wrapper"
    script.write_text(site_wrapper(name, str(tmp_path / "site"), tmp_path / "ours"))
    script.chmod(0o755)
    proc = subprocess.run([str(script), "a1"], env={"SLURM_JOB_ID": "7"}, check=False)
    assert proc.returncode == rc
    assert record.read_text().split("\n")[:-1] == [f"{who} a1" for who in ran]


def fake_scontrol(directory: Path) -> Path:
    """A Slurm command directory whose `scontrol show config` prints the lab's capture."""
    directory.mkdir(parents=True)
    scontrol = directory / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat {SHOWN}\n")
    scontrol.chmod(0o755)
    return directory


def test_install_node_prints_the_merged_lines_and_writes_the_site_s_wrapper(
        tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    prefix = tmp_path / "opt"
    result = CliRunner().invoke(cli, ["install-node", "--prefix", str(prefix), "--no-venv",
                                      "--slurm-conf", str(conf), "--slurm-bin",
                                      str(fake_scontrol(tmp_path / "slurm"))])
    assert result.exit_code == 0, result.output
    assert "SchedulerParameters=bf_continue,bf_interval=60,nohold_on_prolog_fail" \
        in result.output
    assert "\nSchedulerParameters=nohold_on_prolog_fail" not in result.output
    assert f"\nProlog={prefix}" not in result.output
    wrapper = prefix / "libexec" / "slurm-heal-site-epilog"
    assert 'SITE="/etc/slurm/site-epilog.sh"' in wrapper.read_text()
    assert os.access(wrapper, os.X_OK)
    snippet = (prefix / "share" / "slurm-heal" / "slurm.conf.snippet").read_text()
    assert f"Epilog={wrapper}" in snippet
    # A node has no controller config; the site reboots through Slurm (RebootProgram set),
    # so Slurm's default ResumeTimeout is said against the slurm provider's default.
    assert "warning: ResumeTimeout is 60 s, below the reboot timeout 1800 s (the slurm " \
        "provider's default timeout" in result.output


def test_policy_check_says_what_slurm_conf_lacks(tmp_path: Path) -> None:
    slurm = fake_scontrol(tmp_path / "slurm")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    policy = tmp_path / "heal.toml"
    policy.write_text(f'[controller]\nstate_dir = "{tmp_path / "state"}"\n'
                      f'slurm_conf = "{conf}"\n[provider]\ntype = "slurm"\ntimeout = "30m"\n')
    env = {"PATH": f"{slurm}:{os.environ.get('PATH', '')}"}
    result = CliRunner().invoke(cli, ["policy", "check", str(policy), "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert line_of(out["slurm_conf"], "SchedulerParameters")["line"] == \
        "SchedulerParameters=bf_continue,bf_interval=60,nohold_on_prolog_fail"
    assert any("ResumeTimeout is 60 s, below the reboot timeout 1800 s" in w
               for w in out["warnings"])


def test_install_controller_warns_that_resume_timeout_is_below_the_reboot_timeout(
        tmp_path: Path) -> None:
    """The starter config reboots through Slurm (the `slurm` provider, 1800 s): the lab's
    ResumeTimeout of 60 s would mark a booting GPU node DOWN."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    result = CliRunner().invoke(cli, [
        "install-controller", "--prefix", str(tmp_path / "opt"), "--no-venv",
        "--slurm-conf", str(conf), "--config", str(tmp_path / "heal.toml"),
        "--slurm-bin", str(fake_scontrol(tmp_path / "slurm"))])
    assert result.exit_code == 0, result.output
    assert "warning: ResumeTimeout is 60 s, below the reboot timeout 1800 s" in result.output
    assert "SchedulerParameters=bf_continue,bf_interval=60,nohold_on_prolog_fail" \
        in result.output


SHOWN_25 = SHOWN.with_name("lab-scontrol-show-config-site-25.11.txt")


def test_25_11_s_indexed_prolog_and_epilog_are_read_as_the_site_s() -> None:
    """25.11 shows `Prolog[0] = ...` (a key slurm.conf may repeat): read as the site's, so
    the site's prolog is wrapped, not replaced (the 25.11 lab: before, it was 'add')."""
    conf = parse_show_config(SHOWN_25.read_text())
    assert conf["Prolog"] == "/etc/slurm/site-prolog.sh"
    result = plan(conf, PREFIX)
    assert line_of(result, "Prolog")["line"] == \
        "Prolog=/opt/slurm-heal/libexec/slurm-heal-site-prolog"
    assert result.wrap == {"prolog": "/etc/slurm/site-prolog.sh"}
    assert line_of(result, "Epilog")["status"] == "keep"  # a glob: a link
    assert line_of(result, "SchedulerParameters")["line"] == \
        "SchedulerParameters=bf_continue,bf_interval=60,nohold_on_prolog_fail"


def test_several_prolog_lines_are_kept() -> None:
    conf = {"Prolog": "/etc/a.sh", "Prolog[1]": "/etc/b.sh"}
    got = line_of(plan(conf, PREFIX), "Prolog")
    assert got["status"] == "keep" and got["line"] is None and "2 Prolog lines" in str(got["note"])
