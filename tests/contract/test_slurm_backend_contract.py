"""Each Slurm backend against the real lab (SPEC I3, I2, I6): the same calls, the same
answers, on 22.05 (cli), 25.11 (cli, pyslurm, rest) and 26.05 (cli, rest). `--slurm` and
`--slurm-backend` pick the pair (tests/conftest.py); `make test` runs them all."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.cli import CliSlurm
from tests.lab import Lab

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm(slurm_client: SlurmClient) -> SlurmClient:
    return slurm_client


def test_every_node_is_listed_with_its_state(lab: Lab, slurm: SlurmClient) -> None:
    """The 25.11 bug: state lists and time objects read as no nodes at all."""
    nodes = {n.name: n for n in slurm.nodes()}
    assert sorted(nodes) == lab.nodes
    for n in nodes.values():
        assert n.states == {"IDLE"}, n
        assert n.boot_time is not None and n.slurmd_start_time is not None
        assert n.partitions == ("gpu",) and n.features == ("lab",)
        assert n.address == "127.0.0.1" and n.hostname == n.name
    assert slurm.node(lab.nodes[0]) == nodes[lab.nodes[0]]


def test_drain_shows_reason_and_user_then_resume(lab: Lab, slurm: SlurmClient) -> None:
    node = lab.nodes[0]
    slurm.drain(node, "heal: gpu.xid.79 by=controller cordoned")
    seen = slurm.node(node)
    assert "DRAIN" in seen.states
    assert seen.reason == "heal: gpu.xid.79 by=controller cordoned"
    assert seen.reason_user == "root" and seen.reason_time is not None
    assert [n for n in slurm.nodes() if n.name == node][0].reason == seen.reason
    slurm.resume(node)
    # 22.05.8: right after a resume the node shows IDLE* (NOT_RESPONDING) until
    # slurmctld's next ping of it, a second or so later.
    assert "DRAIN" not in slurm.node(node).states
    lab.wait_for(lambda: slurm.node(node).states == {"IDLE"}, timeout=30, what="IDLE")
    slurm.resume(node)  # resuming an idle node is a no-op, not an error


def test_extra_round_trip_keeps_foreign_keys(lab: Lab, slurm: SlurmClient) -> None:
    """SPEC I2: our key is set and removed; the site's key survives both."""
    node = lab.nodes[1]
    lab.scontrol("update", f"nodename={node}", 'extra={"site": {"rack": "r7"}}')
    slurm.set_extra(node, "slurm_heal", {"v": 1, "alerts": []})
    assert slurm.node(node).extra == {"site": {"rack": "r7"}, "slurm_heal": {"v": 1, "alerts": []}}
    slurm.set_extra(node, "slurm_heal", None)
    assert slurm.node(node).extra == {"site": {"rack": "r7"}}
    raw = lab.show(node)["Extra"]
    assert json.loads(raw) == {"site": {"rack": "r7"}}


def test_foreign_non_json_extra_is_never_overwritten(lab: Lab, slurm: SlurmClient) -> None:
    node = lab.nodes[1]
    lab.scontrol("update", f"nodename={node}", "extra=owner bob, rack r7")
    with pytest.raises(SlurmError, match="non-JSON"):
        slurm.set_extra(node, "slurm_heal", {"v": 1})
    assert slurm.node(node).extra_raw == "owner bob, rack r7"


def test_running_batch_job_is_listed_on_its_node_with_expected_end(
        lab: Lab, slurm: SlurmClient) -> None:
    node = lab.nodes[2]
    out = lab.run(["sbatch", "--parsable", "-w", node, "-t", "10", "-o", "/dev/null",
                   "--wrap", "sleep 300"]).stdout
    job_id = int(out.strip().split(";")[0])
    jobs = lab.wait_for(lambda: [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                        timeout=30, what="job RUNNING")
    assert [j.job_id for j in jobs] == [job_id]
    job = jobs[0]
    assert job.nodes == (node,) and job.user == "root" and job.time_limit_minutes == 10
    assert job.start_time is not None and job.end_time is not None
    assert (job.end_time - job.start_time).total_seconds() == 600
    assert slurm.jobs(lab.nodes[3]) == ()
    slurm.cancel_jobs(node)
    lab.wait_for(lambda: not [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                 timeout=30, what="job cancelled")


def test_reboot_passes_through_reboot_states_and_returns(lab: Lab, slurm: SlurmClient) -> None:
    """`scontrol reboot ASAP` runs the lab's RebootProgram; the node comes back with a
    new boot time, resumed (nextstate=RESUME)."""
    node = lab.nodes[3]
    before = slurm.node(node)
    time.sleep(1.1)  # boot times have one-second resolution
    slurm.reboot(node, reason="heal: gpu.xid.79 by=controller reboot")
    seen: set[str] = set()

    def back() -> bool:
        info = slurm.node(node)
        seen.update(info.states)
        return info.boot_time != before.boot_time and info.states == {"IDLE"}

    lab.wait_for(back, timeout=60, interval=0.2, what=f"{node} rebooted and IDLE")
    assert seen & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}, seen


def test_unknown_node_is_not_found(slurm: SlurmClient) -> None:
    with pytest.raises(NotFound):
        slurm.node("gpu99")
    with pytest.raises(NotFound):
        slurm.drain("gpu99", "heal: test")


def test_signal_reaches_the_batch_shell_of_a_running_job(lab: Lab, slurm: SlurmClient) -> None:
    """SPEC P3: the job's own script gets the signal (to checkpoint), on every backend."""
    node = lab.nodes[2]
    mark = lab.dir / f"usr1-{time.monotonic_ns()}"
    script = f"trap 'touch {mark}' USR1; for i in $(seq 600); do sleep 0.5; done"
    lab.run(["sbatch", "--parsable", "-w", node, "-t", "10", "-o", "/dev/null",
             "--wrap", script])
    lab.wait_for(lambda: [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                 timeout=30, what="job RUNNING")
    time.sleep(1)  # let the shell install its trap
    slurm.signal_jobs(node, "USR1")
    lab.wait_for(mark.exists, timeout=20, what="the job's trap ran")
    slurm.cancel_jobs(node)
    lab.wait_for(lambda: not [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                 timeout=30, what="job cancelled")


def test_controller_down_is_unreachable(lab: Lab, tmp_path: Path) -> None:
    """A slurm.conf whose controller port nobody listens on: SlurmUnreachable, fast."""
    conf = tmp_path / "slurm.conf"
    dead_port = lab.base_port + len(lab.nodes) + 1
    conf.write_text(lab.conf.read_text().replace(f"SlurmctldPort={lab.base_port}",
                                                 f"SlurmctldPort={dead_port}"))
    slurm = CliSlurm(slurm_conf=str(conf), timeout=3, retries=0)
    with pytest.raises(SlurmUnreachable):
        slurm.nodes()
    with pytest.raises(SlurmUnreachable):
        slurm.node(lab.nodes[0])


def test_every_version_of_the_matrix_is_one_the_backends_know(
        lab: Lab, slurm: SlurmClient, backend: str, caplog: pytest.LogCaptureFixture) -> None:
    """SPEC I6: the lab's Slurm is read as a known version (no "newer than the newest
    version slurm-heal knows" warning), and slurmrestd through its newest OpenAPI."""
    cli = CliSlurm(slurm_conf=str(lab.conf))
    with caplog.at_level(logging.WARNING, logger="slurm_heal.slurm"):
        assert "{}.{:02d}".format(*cli.version) == lab.slurm
        assert sorted(n.name for n in slurm.nodes()) == lab.nodes
    assert not [r.getMessage() for r in caplog.records if "newer than" in r.getMessage()]
    if backend == "rest":
        from slurm_heal.slurm.rest import RestSlurm

        assert isinstance(slurm, RestSlurm)
        assert slurm.api == {"25.11": "v0.0.44", "26.05": "v0.0.45"}[lab.slurm]


def test_auto_uses_pyslurm_only_where_it_matches_the_running_slurmctld(lab: Lab) -> None:
    """SPEC I3: "auto" picks pyslurm when it is installed and its libslurm's version is
    the running slurmctld's (25.11 here); on 22.05 and on 26.05 (no pyslurm release) the
    same pyslurm is passed over for the commands."""
    import importlib.util

    from slurm_heal.slurm import make_client
    from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm, pyslurm_matches

    installed = importlib.util.find_spec("pyslurm") is not None
    client = make_client("auto", slurm_conf=str(lab.conf))
    if installed and lab.slurm == "25.11":
        assert isinstance(client, PyslurmSlurm)
    else:
        assert isinstance(client, CliSlurm)
        if installed:
            assert "slurmctld" in str(pyslurm_matches(str(lab.conf)))
    assert sorted(n.name for n in client.nodes()) == lab.nodes


def test_the_backend_sees_the_cluster_exactly_as_the_commands_do(
        lab: Lab, slurm: SlurmClient, backend: str) -> None:
    """SPEC I3: pyslurm and rest give the same NodeInfo as the cli backend, field for
    field, on the same cluster (a drained node with our reason, a node with Extra)."""
    if backend == "cli":
        pytest.skip("compares another backend with cli; this pass is cli itself")
    cli = CliSlurm(slurm_conf=str(lab.conf), timeout=20)
    cli.drain(lab.nodes[1], "heal: gpu.xid.79 rem=r-1 by=controller cordoned")
    cli.set_extra(lab.nodes[2], "site", {"rack": "r7"})

    def same() -> bool:
        return {n.name: n for n in slurm.nodes()} == {n.name: n for n in cli.nodes()}

    lab.wait_for(same, timeout=20, what=f"{backend} and cli agree")  # a ping may flip a flag
    mine = {n.name: n for n in slurm.nodes()}
    assert mine[lab.nodes[1]].drained and mine[lab.nodes[1]].reason_user == "root"
    assert mine[lab.nodes[2]].extra == {"site": {"rack": "r7"}}
    assert slurm.node(lab.nodes[1]) == cli.node(lab.nodes[1])
