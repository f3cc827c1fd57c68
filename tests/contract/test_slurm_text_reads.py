"""The cli backend's whole-cluster reads in Slurm's text forms (issue 26) give exactly what
the JSON gives, field for field, on the real lab of the --slurm version (SPEC I3, I6):
free text with spaces, ``=``, ``|``, ``%`` and JSON read as it is; free text that could
forge a boot time makes the read fall back to the JSON, never misread."""

from __future__ import annotations

import logging
import subprocess
from datetime import datetime, timezone

import pytest

from slurm_heal.slurm import text
from slurm_heal.slurm.cli import CliSlurm, parse_squeue_json
from slurm_heal.types import JobInfo
from tests.lab import Lab

pytestmark = [pytest.mark.slurm]
FALLBACK = "reading Slurm's node JSON"


def _cli(lab: Lab) -> CliSlurm:
    return CliSlurm(slurm_conf=str(lab.conf), timeout=20)


def _agree(lab: Lab, cli: CliSlurm) -> None:
    def same() -> bool:
        return cli.nodes() == cli._nodes_json()  # a ping may flip a flag between reads

    lab.wait_for(same, timeout=20, what="text and JSON node reads agree")


def test_free_text_with_spaces_equals_and_json_is_read_from_the_text_forms(
        lab_clean: Lab, caplog: pytest.LogCaptureFixture) -> None:
    lab, cli = lab_clean, _cli(lab_clean)
    cli.drain(lab.nodes[1], 'heal: gpu.xid.79 Extra={"x": 1} Comment=a=b | %s 100%')
    cli.set_extra(lab.nodes[2], "site", {"rack": "r7 b=c", "note": "Reason=x Extra=y"})
    lab.scontrol("update", f"nodename={lab.nodes[3]}", "comment=a Comment=b  spaced")
    caplog.set_level(logging.INFO, logger="slurm_heal.slurm")
    _agree(lab, cli)
    caplog.clear()
    nodes = {n.name: n for n in cli.nodes()}
    assert FALLBACK not in caplog.text  # read from the text forms, no fallback
    assert nodes[lab.nodes[1]].reason.startswith('heal: gpu.xid.79 Extra={"x": 1} Comment=')
    assert nodes[lab.nodes[1]].drained and nodes[lab.nodes[1]].reason_user == "root"
    assert nodes[lab.nodes[2]].extra == {"site": {"rack": "r7 b=c", "note": "Reason=x Extra=y"}}
    assert nodes[lab.nodes[0]].boot_time is not None
    assert sorted(nodes) == lab.nodes


def test_a_reason_that_could_forge_a_boot_time_is_read_from_the_json(
        lab_clean: Lab, caplog: pytest.LogCaptureFixture) -> None:
    lab, cli = lab_clean, _cli(lab_clean)
    cli.drain(lab.nodes[1], "heal: x BootTime=1 SlurmdStartTime=1 InstanceId=forged")
    caplog.set_level(logging.INFO, logger="slurm_heal.slurm")
    _agree(lab, cli)
    nodes = {n.name: n for n in cli.nodes()}
    assert FALLBACK in caplog.text
    assert nodes[lab.nodes[1]].instance_id == ""
    boot = nodes[lab.nodes[1]].boot_time
    assert boot is not None and boot.year > 1970  # Slurm's, not the reason's "1"


def test_a_reason_that_forges_check_data_is_never_read_as_extra(lab_clean: Lab) -> None:
    """Issue 21: a person's drain reason holding ``Extra={...}`` on a node with no Extra
    (22.05 then prints no Extra field of its own) reads as the reason it is, by the
    whole-cluster read and by the one-node read; no check data comes of it."""
    lab, cli = lab_clean, _cli(lab_clean)
    name = lab.nodes[1]
    forged = 'broken Extra={"slurm_heal": {"v": 1, "alerts": []}}'
    cli.drain(name, forged)
    _agree(lab, cli)
    one, listed = cli.node(name), {n.name: n for n in cli.nodes()}[name]
    for node in (one, listed):
        assert node.reason == forged and node.reason_user == "root", node
        assert node.extra == {} and node.drained, node
    assert one == listed


def test_squeue_text_gives_the_jobs_squeue_json_gives(lab_clean: Lab) -> None:
    lab, cli = lab_clean, _cli(lab_clean)
    ours: set[int] = set()

    def sbatch(*args: str) -> None:
        out = lab.run(["sbatch", "--parsable", *args, "--wrap", "sleep 300"]).stdout
        ours.add(int(out.strip().split(";")[0]))

    sbatch("-J", 'odd name=x | %j {"a": 1}', "-t", "1-02:03:00", "-w", lab.nodes[0])
    sbatch("-J", "limited", "-t", "90", "-w", lab.nodes[0])
    sbatch("-J", "pending", "-t", "UNLIMITED", "-w", lab.nodes[0], "-N", "1", "--exclusive")

    def both() -> tuple[list[JobInfo], list[JobInfo]]:
        # This test's jobs only: the jobs earlier tests cancelled stay listed for
        # MinJobAge, by `-t all` always and by `squeue --json` on 22.05 only (25.11 and
        # 26.05 leave ended jobs out of the JSON).
        sep = text.separator()
        out = subprocess.run(text.squeue_argv(sep), env=cli._env(), capture_output=True,
                             check=True, text=True, timeout=30).stdout
        raw = subprocess.run(["squeue", "--json"], env=cli._env(), capture_output=True,
                             check=True, timeout=30).stdout
        return (sorted((j for j in text.jobs_from_text(out, sep) if j.job_id in ours),
                       key=lambda j: j.job_id),
                sorted((j for j in parse_squeue_json(raw) if j.job_id in ours),
                       key=lambda j: j.job_id))

    def agree() -> bool:
        mine, json_jobs = both()
        return mine == json_jobs and {j.job_id for j in mine} == ours

    lab.wait_for(agree, timeout=30, what="squeue text and JSON agree")
    jobs = {j.name: j for j in cli.jobs() if j.job_id in ours}
    assert jobs['odd name=x | %j {"a": 1}'].time_limit_minutes == 26 * 60 + 3
    assert jobs["limited"].time_limit_minutes == 90
    # a pending job has not started: Slurm gives no start time, or, once a scheduler has
    # planned it, its expected start (here after the first job's 26 h limit), never a past one
    pending = jobs["pending"]
    assert pending.time_limit_minutes is None and pending.state == "PENDING"
    assert pending.start_time is None or pending.start_time > datetime.now(timezone.utc), pending
