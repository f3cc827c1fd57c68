"""Our own maintenance reservations as the node check and our Prolog tell them (SPEC S8,
E6, V1, V4; issue 32 items 2, 3, 7): by name prefix, the MAINT flag and users that are
root or SlurmUser, never by a job's name. Real `scontrol -o show reservation` output."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_heal.checks import maintenance
from slurm_heal.checks.config import CheckConfig, parse_config
from slurm_heal.errors import ConfigError

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "slurm"
PREFIXES = maintenance.DEFAULT_PREFIXES
TRUSTED = frozenset({"root", "slurm"})


def reservations() -> dict[str, maintenance.Reservation]:
    text = (REAL / "lab-scontrol-show-reservation-o-22.05.txt").read_text()
    return {r.name: r for r in maintenance.parse_reservations(text)}


def test_the_gpu_resets_reservation_is_ours_and_holds_its_node() -> None:
    res = reservations()["slurm-heal-reset-gpu01"]
    assert res.flags >= {"MAINT", "IGNORE_JOBS"} and res.users == ("root",)
    assert maintenance.ours(res, PREFIXES, TRUSTED)
    assert res.holds("gpu01") and not res.holds("gpu02")


def test_a_sites_own_reservation_is_not_ours() -> None:
    res = reservations()["site-window"]
    assert not maintenance.ours(res, PREFIXES, TRUSTED)


@pytest.mark.parametrize("why, line", [
    ("no MAINT flag", "ReservationName=slurm-heal-reset-gpu01 Nodes=gpu01 Flags=IGNORE_JOBS "
                      "Users=root State=ACTIVE"),
    ("a user may run in it", "ReservationName=slurm-heal-gate-gpu01 Nodes=gpu01 "
                             "Flags=MAINT Users=root,alice State=ACTIVE"),
    ("everyone but one user may", "ReservationName=slurm-heal-gate-gpu01 Nodes=gpu01 "
                                  "Flags=MAINT Users=-alice State=ACTIVE"),
    ("only accounts", "ReservationName=slurm-heal-gate-gpu01 Nodes=gpu01 Flags=MAINT "
                      "Users=(null) Accounts=ml State=ACTIVE"),
    ("not our prefix", "ReservationName=maint-gpu01 Nodes=gpu01 Flags=MAINT Users=root "
                       "State=ACTIVE"),
])
def test_a_reservation_that_looks_like_ours_but_is_not(why: str, line: str) -> None:
    (res,) = maintenance.parse_reservations(line)
    assert not maintenance.ours(res, PREFIXES, TRUSTED), why


def test_a_host_list_and_no_reservations_are_read() -> None:
    (res,) = maintenance.parse_reservations(
        "ReservationName=slurm-heal-validate-x Nodes=gpu[01-04] Flags=MAINT Users=slurm")
    assert res.holds("gpu03") and not res.holds("gpu05")
    assert maintenance.ours(res, PREFIXES, TRUSTED)
    assert maintenance.parse_reservations("No reservations in the system\n") == []


def test_slurm_user_comes_from_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nSlurmUser=slurm # the daemons' user\n")
    assert maintenance.slurm_user({"SLURM_CONF": str(conf)}) == "slurm"
    conf.write_text("ClusterName=c\n")
    assert maintenance.slurm_user({"SLURM_CONF": str(conf)}) == "root"  # Slurm's default


def test_a_job_is_ours_only_in_our_reservation_and_by_a_trusted_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC S8, I1 (issue 32 item 3): the Prolog's environment names the reservation and
    the user (set by slurmd); a job outside a reservation costs no Slurm call."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    line = (REAL / "lab-scontrol-show-reservation-o-22.05.txt").read_text().splitlines()[0]
    (bindir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/called\n"
                                     f"echo '{line}'\n")
    (bindir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    ours = {"SLURM_JOB_RESERVATION": "slurm-heal-reset-gpu01", "SLURM_JOB_USER": "root",
            "SLURM_JOB_UID": "0", "SLURM_JOB_NAME": "anything"}
    assert maintenance.job_is_ours(ours, PREFIXES, TRUSTED, "gpu01") == "slurm-heal-reset-gpu01"
    assert maintenance.job_is_ours(ours, PREFIXES, TRUSTED, "gpu02") == ""
    alice = dict(ours, SLURM_JOB_USER="alice", SLURM_JOB_UID="1000")
    assert maintenance.job_is_ours(alice, PREFIXES, TRUSTED, "gpu01") == ""
    named = {"SLURM_JOB_NAME": "slurm-heal-reset-gpu01", "SLURM_JOB_USER": "root"}
    (tmp_path / "called").unlink()
    assert maintenance.job_is_ours(named, PREFIXES, TRUSTED, "gpu01") == ""
    assert not (tmp_path / "called").exists()  # no reservation: Slurm is not asked


def test_the_checks_prefixes_are_the_controllers_defaults() -> None:
    from slurm_heal.config import RESET_RESERVATION_PREFIX, policy_from_dict

    policy = policy_from_dict({})
    assert CheckConfig().maintenance_prefixes == maintenance.DEFAULT_PREFIXES == (
        RESET_RESERVATION_PREFIX, policy.gate.reservation_prefix,
        policy.validation.reservation_prefix)


def test_a_site_lists_its_own_prefixes_and_users_in_check_toml() -> None:
    cfg = parse_config({"check": {"maintenance_prefixes": ["site-gate-"],
                                  "maintenance_users": ["healer"]}})
    assert cfg.maintenance_prefixes == ("site-gate-",) and cfg.maintenance_users == ("healer",)
    with pytest.raises(ConfigError, match="check.maintenance_users"):
        parse_config({"check": {"maintenance_users": "healer"}})
