"""Each Slurm backend against the real lab (SPEC I3, I2, I6): the same calls, the same
answers, on 22.05 (cli), 25.11 (cli, pyslurm, rest) and 26.05 (cli, rest). `--slurm` and
`--slurm-backend` pick the pair (tests/conftest.py); `make test` runs them all.

The in-process simulated cluster (`MemorySlurm`, what `slurm-heal demo` and the
controller tests run on) is held to the same contract: the tests of `SlurmContract` run
on the lab through the backend under test (`TestRealBackend`, marked slurm) and on a
MemorySlurm set up like the lab (`TestMemorySlurm`, no Slurm needed). A `Bench` does
what a person or a job does on that cluster (`scontrol update extra=`, `sbatch`) and
waits in its time: real seconds on the lab, the fake's own clock in memory."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.slurm.memory import MemorySlurm
from tests.fakes import Clock
from tests.lab import Lab

T = TypeVar("T")


class Bench:
    """One cluster under the contract: its client and what happens around it."""

    client: SlurmClient
    nodes: list[str]

    def address(self, node: str) -> str:
        """The NodeAddr the cluster was configured with."""
        raise NotImplementedError

    def write_extra(self, node: str, text: str) -> None:
        """A person's `scontrol update nodename=NODE extra=TEXT`."""
        raise NotImplementedError

    def raw_extra(self, node: str) -> str:
        """Extra as Slurm itself holds it (`scontrol show node`)."""
        raise NotImplementedError

    def batch(self, node: str, limit_minutes: int, runs_seconds: int) -> int:
        """root's `sbatch -w NODE -t LIMIT --wrap "sleep RUNS"`: the job id."""
        raise NotImplementedError

    def trapping_job(self, node: str, signal: str) -> Callable[[], bool]:
        """A batch job on ``node`` whose shell traps ``signal``; the answer tells whether
        the trap ran."""
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 interval: float = 0.5, what: str = "") -> T:
        """Poll ``predicate`` in the cluster's time until it is truthy; return that."""
        raise NotImplementedError


class LabBench(Bench):
    def __init__(self, lab: Lab, client: SlurmClient) -> None:
        self.lab, self.client, self.nodes = lab, client, lab.nodes

    def address(self, node: str) -> str:
        return "127.0.0.1"

    def write_extra(self, node: str, text: str) -> None:
        self.lab.scontrol("update", f"nodename={node}", f"extra={text}")

    def raw_extra(self, node: str) -> str:
        return self.lab.show(node)["Extra"]

    def batch(self, node: str, limit_minutes: int, runs_seconds: int) -> int:
        out = self.lab.run(["sbatch", "--parsable", "-w", node, "-t", str(limit_minutes),
                            "-o", "/dev/null", "--wrap", f"sleep {runs_seconds}"]).stdout
        return int(out.strip().split(";")[0])

    def trapping_job(self, node: str, signal: str) -> Callable[[], bool]:
        mark = self.lab.dir / f"{signal.lower()}-{time.monotonic_ns()}"
        script = f"trap 'touch {mark}' {signal}; for i in $(seq 600); do sleep 0.5; done"
        self.lab.run(["sbatch", "--parsable", "-w", node, "-t", "10", "-o", "/dev/null",
                      "--wrap", script])
        return mark.exists

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 interval: float = 0.5, what: str = "") -> T:
        return self.lab.wait_for(predicate, timeout=timeout, interval=interval, what=what)


class MemoryBench(Bench):
    """A MemorySlurm set up like the lab: four nodes in partition gpu with feature lab."""

    def __init__(self) -> None:
        self.clock = Clock(datetime(2026, 1, 5, tzinfo=timezone.utc))
        self.nodes = [f"gpu0{i}" for i in range(1, 5)]
        self.cluster = MemorySlurm([(n, "gpu") for n in self.nodes], clock=self.clock,
                                   features=("lab",))
        self.client = self.cluster

    def address(self, node: str) -> str:
        return node  # no NodeAddr in the configuration: Slurm's default, the NodeName

    def write_extra(self, node: str, text: str) -> None:
        self.cluster.set_extra_text(node, text)

    def raw_extra(self, node: str) -> str:
        return self.cluster.node(node).extra_raw

    def batch(self, node: str, limit_minutes: int, runs_seconds: int) -> int:
        return self.cluster.submit_job(node, timedelta(seconds=runs_seconds), user="root",
                                time_limit=timedelta(minutes=limit_minutes))

    def trapping_job(self, node: str, signal: str) -> Callable[[], bool]:
        jid = self.cluster.submit_job(node, timedelta(minutes=5), user="root",
                                      time_limit=timedelta(minutes=10))
        return lambda: f"signal:{signal}:{jid}" in self.cluster.history(node)

    def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds=seconds)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 interval: float = 0.5, what: str = "") -> T:
        deadline = self.clock() + timedelta(seconds=timeout)
        while not (last := predicate()):
            if self.clock() > deadline:
                raise TimeoutError(f"{what or predicate!r} not true after {timeout}s "
                                   f"(last value {last!r})")
            self.clock.advance(seconds=interval)
        return last


class SlurmContract:
    """What every SlurmClient does, on the cluster of ``bench``."""

    def test_every_node_is_listed_with_its_state(self, bench: Bench) -> None:
        """The 25.11 bug: state lists and time objects read as no nodes at all."""
        slurm = bench.client
        nodes = {n.name: n for n in slurm.nodes()}
        assert sorted(nodes) == bench.nodes
        for n in nodes.values():
            assert n.states == {"IDLE"}, n
            assert n.boot_time is not None and n.slurmd_start_time is not None
            assert n.partitions == ("gpu",) and n.features == ("lab",)
            assert n.address == bench.address(n.name) and n.hostname == n.name
        assert slurm.node(bench.nodes[0]) == nodes[bench.nodes[0]]

    def test_drain_shows_reason_and_user_then_resume(self, bench: Bench) -> None:
        slurm, node = bench.client, bench.nodes[0]
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
        bench.wait_for(lambda: slurm.node(node).states == {"IDLE"}, timeout=30, what="IDLE")
        slurm.resume(node)  # resuming an idle node is a no-op, not an error

    def test_extra_round_trip_keeps_foreign_keys(self, bench: Bench) -> None:
        """SPEC I2: our key is set and removed; the site's key survives both."""
        slurm, node = bench.client, bench.nodes[1]
        bench.write_extra(node, '{"site": {"rack": "r7"}}')
        slurm.set_extra(node, "slurm_heal", {"v": 1, "alerts": []})
        assert slurm.node(node).extra == {"site": {"rack": "r7"},
                                          "slurm_heal": {"v": 1, "alerts": []}}
        slurm.set_extra(node, "slurm_heal", None)
        assert slurm.node(node).extra == {"site": {"rack": "r7"}}
        raw = bench.raw_extra(node)
        assert json.loads(raw) == {"site": {"rack": "r7"}}

    def test_foreign_non_json_extra_is_never_overwritten(self, bench: Bench) -> None:
        slurm, node = bench.client, bench.nodes[1]
        bench.write_extra(node, "owner bob, rack r7")
        with pytest.raises(SlurmError, match="non-JSON"):
            slurm.set_extra(node, "slurm_heal", {"v": 1})
        assert slurm.node(node).extra_raw == "owner bob, rack r7"

    def test_running_batch_job_is_listed_on_its_node_with_expected_end(
            self, bench: Bench) -> None:
        slurm, node = bench.client, bench.nodes[2]
        job_id = bench.batch(node, limit_minutes=10, runs_seconds=300)
        jobs = bench.wait_for(lambda: [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                              timeout=30, what="job RUNNING")
        assert [j.job_id for j in jobs] == [job_id]
        job = jobs[0]
        assert job.nodes == (node,) and job.user == "root" and job.time_limit_minutes == 10
        assert job.start_time is not None and job.end_time is not None
        assert (job.end_time - job.start_time).total_seconds() == 600
        assert slurm.jobs(bench.nodes[3]) == ()
        slurm.cancel_jobs(node)
        bench.wait_for(lambda: not [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                       timeout=30, what="job cancelled")

    def test_reboot_passes_through_reboot_states_and_returns(self, bench: Bench) -> None:
        """`scontrol reboot ASAP` runs the lab's RebootProgram; the node comes back with a
        new boot time, resumed (nextstate=RESUME)."""
        slurm, node = bench.client, bench.nodes[3]
        before = slurm.node(node)
        bench.sleep(1.1)  # boot times have one-second resolution
        slurm.reboot(node, reason="heal: gpu.xid.79 by=controller reboot")
        seen: set[str] = set()

        def back() -> bool:
            info = slurm.node(node)
            seen.update(info.states)
            return info.boot_time != before.boot_time and info.states == {"IDLE"}

        bench.wait_for(back, timeout=60, interval=0.2, what=f"{node} rebooted and IDLE")
        assert seen & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}, seen

    def test_unknown_node_is_not_found(self, bench: Bench) -> None:
        slurm = bench.client
        with pytest.raises(NotFound):
            slurm.node("gpu99")
        with pytest.raises(NotFound):
            slurm.drain("gpu99", "heal: test")
        with pytest.raises(NotFound):
            slurm.reboot("gpu99", "heal: test")

    def test_blank_drain_reason_and_unknown_nextstate_are_refused(self, bench: Bench) -> None:
        """A drain without a reason (Slurm refuses one) and a reboot into a state that
        is no nextstate are errors naming the problem, and the node is left as it was."""
        slurm, node = bench.client, bench.nodes[0]
        before = slurm.node(node)
        with pytest.raises(SlurmError, match="reason"):
            slurm.drain(node, "  ")
        with pytest.raises(SlurmError, match="nextstate"):
            slurm.reboot(node, "heal: test", nextstate="REBOOTED")
        after = slurm.node(node)
        assert after.states == {"IDLE"} and after.reason == ""
        assert after.boot_time == before.boot_time

    def test_signal_reaches_the_batch_shell_of_a_running_job(self, bench: Bench) -> None:
        """SPEC P3: the job's own script gets the signal (to checkpoint), on every backend."""
        slurm, node = bench.client, bench.nodes[2]
        trapped = bench.trapping_job(node, "USR1")
        bench.wait_for(lambda: [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                       timeout=30, what="job RUNNING")
        bench.sleep(1)  # let the shell install its trap
        slurm.signal_jobs(node, "USR1")
        bench.wait_for(trapped, timeout=20, what="the job's trap ran")
        slurm.cancel_jobs(node)
        bench.wait_for(lambda: not [j for j in slurm.jobs(node) if j.state == "RUNNING"],
                       timeout=30, what="job cancelled")


class TestMemorySlurm(SlurmContract):
    """The simulated cluster, in the unit pass (no Slurm)."""

    @pytest.fixture
    def bench(self) -> Bench:
        return MemoryBench()


@pytest.mark.slurm
class TestRealBackend(SlurmContract):
    """The backend under test (--slurm-backend) on the lab."""

    @pytest.fixture
    def bench(self, lab: Lab, slurm_client: SlurmClient) -> Bench:
        return LabBench(lab, slurm_client)


@pytest.fixture
def slurm(slurm_client: SlurmClient) -> SlurmClient:
    return slurm_client


@pytest.mark.slurm
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


@pytest.mark.slurm
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


@pytest.mark.slurm
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


@pytest.mark.slurm
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
