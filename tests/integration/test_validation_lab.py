"""Validation of vacated machines on the real Slurm lab (SPEC V1, V2): `slurm-heal daemon`
as a process, `slurm-heal validate NODE` from the CLI, the suite as a real Slurm job in a
real MAINT reservation, stub tools on the job's PATH (a pass, a clear failure, a step
that hangs so the test can interrupt it), and a migrate through the provider simulator
whose vacated host is a lab node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.models import ValidationRun
from slurm_heal.providers.simulator import LabHook, SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from slurm_heal.types import Alert, Evidence, Severity
from tests.emulators import stop_daemons
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PREFIX = "slurm-heal-validate-"
# The stub tool: what it does is chosen per test through files beside it.
DCGMI = """#!/bin/sh
dir=$(dirname "$0")
echo "dcgmi (stub) $*"
if [ -f "$dir/sleep" ]; then sleep "$(cat "$dir/sleep")"; fi
exit "$(cat "$dir/rc" 2>/dev/null || echo 0)"
"""


class Val:
    """One test's slurm-heal installation with validation configured."""

    def __init__(self, lab: Lab, tmp: Path, sim: SimulatorServer, extra_toml: str = "",
                 extra_steps: str = "") -> None:
        self.lab, self.tmp, self.sim = lab, tmp, sim
        self.state_dir = tmp / "state"
        self.tickets = tmp / "tickets"
        self.results = tmp / "results"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "dcgmi").write_text(DCGMI)
        (self.bin / "dcgmi").chmod(0o755)
        self.config = tmp / "heal.toml"
        self.config.write_text(f"""
[approvals]
default = "manual"
[[approvals.rules]]
action = "migrate"
mode = "auto"

[safety]
concurrency = 4
one_per_pool = false
return_timeout = "5m"

[capacity]
min_available_percent = 0

[controller]
state_dir = "{self.state_dir}"
interval = 1
slurm_backend = "cli"
slurm_conf = "{lab.conf}"

[provider]
type = "http"
url = "{sim.url}"
read_timeout = 30

[validation]
results_dir = "{self.results}"
job_time_limit = "10m"
{extra_toml}
[[validation.suites.default]]
name = "gpu-diag"
command = ["dcgmi", "diag", "-r", "{{level}}"]
timeout = "5m"
{extra_steps}

[[validation.tickets]]
kind = "directory"
path = "{self.tickets}"
""")
        self.store = Store(self.state_dir)
        self.slurm = CliSlurm(slurm_conf=str(lab.conf))
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.env = dict(lab.env, PATH=f"{self.bin}:{lab.env['PATH']}")

    def tool(self, rc: int = 0, sleep: float | None = None) -> None:
        (self.bin / "rc").write_text(f"{rc}\n")
        if sleep is not None:
            (self.bin / "sleep").write_text(f"{sleep}\n")
        elif (self.bin / "sleep").exists():
            (self.bin / "sleep").unlink()

    def start_daemon(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"daemon-{len(self.daemons)}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", "daemon", "--config",
                                 str(self.config)], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.daemons.append(proc)
        return proc

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurm_heal.cli", *args, "--state-dir",
                               str(self.state_dir)], env=self.env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    def validate(self, node: str, *extra_args: str) -> None:
        self.wait(lambda: (self.state_dir / "heartbeat").exists(), "a heartbeat")
        proc = self.cli("validate", node, "--by", "alice", "--reason", "after repair",
                        *extra_args)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def runs(self, node: str) -> list[ValidationRun]:
        return [v for v in self.store.load().validations if v.node == node]

    def wait_run(self, node: str, phases: tuple[str, ...], timeout: float = 90
                 ) -> ValidationRun:
        def found() -> ValidationRun | None:
            runs = self.runs(node)
            return runs[-1] if runs and runs[-1].phase in phases else None
        return self.wait(found, f"{node} validation in {phases}", timeout)

    def wait(self, predicate, what: str, timeout: float = 60):  # type: ignore[no-untyped-def]
        try:
            return self.lab.wait_for(predicate, timeout=timeout, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\nvalidations: {self.store.load().validations}\n"
                                 + self.logs()) from None

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-5000:]
                         for p in sorted(self.tmp.glob("daemon-*.log")))

    def reservations(self) -> str:
        return self.lab.scontrol("show", "reservation", "-o").stdout

    def jobs_named(self, name: str) -> list[str]:
        out = self.lab.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"]).stdout
        return out.split()

    def close(self) -> None:
        stop_daemons(self.daemons)


def _clear_reservations(lab: Lab) -> None:
    for line in lab.scontrol("show", "reservation", "-o").stdout.splitlines():
        name = line.split()[0].partition("=")[2] if line.startswith("ReservationName=") else ""
        if name:
            lab.scontrol("delete", f"ReservationName={name}", check=False)


@pytest.fixture
def val(lab_clean: Lab, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Val]:
    lab = lab_clean
    _clear_reservations(lab)
    param = getattr(request, "param", {})
    hook = LabHook(lab.dir, slurm=CliSlurm(slurm_conf=str(lab.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.5) as sim:
        v = Val(lab, tmp_path, sim, param.get("toml", ""), param.get("steps", ""))
        try:
            yield v
        finally:
            v.close()
            lab.run(["scancel", "--user=root"], check=False)
            _clear_reservations(lab)


def test_validate_node_passes_reservation_removed_node_back_no_ticket(lab: Lab,
                                                                      val: Val) -> None:
    """SPEC V1, V2: `slurm-heal validate NODE` -> MAINT reservation -> the suite as a Slurm
    job there -> pass -> reservation gone, node in service, no ticket."""
    node = "gpu02"
    val.tool(rc=0, sleep=3)
    val.start_daemon()
    val.validate(node)
    running = val.wait_run(node, ("running",), timeout=60)
    # held: our reservation, named so an operator sees why, MAINT, only this node
    res = val.reservations()
    assert f"ReservationName={PREFIX}{node}" in res and "MAINT" in res, res
    assert f"Nodes={node} " in res, res
    assert running.job_id is not None and running.requested_by == "alice"
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=90)
    assert done.phase == "passed", done
    assert done.outcome == "pass" and done.ticket == ""
    assert PREFIX not in val.reservations()
    assert lab.state(node) == {"IDLE"}
    assert not val.tickets.exists() or not list(val.tickets.iterdir())
    # the job ran the stub with the policy's level, and its output is kept
    log = (Path(done.results_dir) / "gpu-diag.log").read_text()
    assert "dcgmi (stub) diag -r 2" in log
    # every phase is on record with its time and rule (P4)
    for phase in ("requested", "reserving", "submitting", "running", "returning", "passed"):
        assert phase in done.phase_times or phase == "requested", phase
    assert all(a.outcome == "ok" for a in done.attempts), done.attempts
    status = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "status", "--state-dir",
                             str(val.state_dir)], env=val.env, capture_output=True, text=True,
                            timeout=60)
    assert f"{node} passed job {done.job_id} pass" in status.stdout, status.stdout


def test_second_validation_of_a_node_runs_its_own_job(lab: Lab, val: Val) -> None:
    """SPEC V1, S6: the first validation's job is still listed (MinJobAge) when the node
    is validated again; the second one submits its own job, never adopts the old one."""
    node = "gpu02"
    val.tool(rc=0, sleep=1)
    val.start_daemon()
    val.validate(node)
    first = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=90)
    assert first.phase == "passed", first
    val.tool(rc=0, sleep=3)
    proc = val.cli("validate", node, "--by", "bob")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    def second() -> ValidationRun | None:
        runs = val.runs(node)
        return runs[-1] if len(runs) == 2 and runs[-1].terminal else None
    again = val.wait(second, "the second validation ends", timeout=90)
    assert again.phase == "passed", again
    assert again.job_id is not None and again.job_id != first.job_id
    assert (Path(again.results_dir) / "job.out").exists()
    assert {str(first.job_id), str(again.job_id)} <= set(val.jobs_named(f"{PREFIX}{node}"))


def test_clear_failure_files_ticket_with_logs_and_keeps_node_out(lab: Lab, val: Val) -> None:
    """SPEC V2: a step exits 1 -> a hardware ticket in the directory sink with the results
    and a tar of the logs; the node stays drained with a reason naming the ticket."""
    node = "gpu03"
    val.tool(rc=1)
    val.start_daemon()
    val.validate(node, "--level", "3")
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=90)
    assert done.phase == "failed", done
    assert done.outcome == "fail" and "gpu-diag fail" in done.summary
    ticket = json.loads((val.tickets / f"{done.id}.json").read_text())
    assert ticket["node"] == node and ticket["results"]["outcome"] == "fail"
    assert ticket["logs"] == f"{done.id}.logs.tar.gz"
    import tarfile
    with tarfile.open(val.tickets / ticket["logs"]) as tar:
        names = tar.getnames()
    assert f"{done.id}/gpu-diag.log" in names and f"{done.id}/results.json" in names
    assert done.ticket.endswith(f"{done.id}.json")
    assert "DRAIN" in lab.state(node)
    reason = lab.scontrol("show", "node", node).stdout
    assert f"ticket {done.id}" in reason and "heal: validation" in reason, reason
    assert PREFIX not in val.reservations()
    log = (Path(done.results_dir) / "gpu-diag.log").read_text()
    assert "diag -r 3" in log  # the operator's --level


def test_cancelled_job_restores_previous_drain_and_records_it(lab: Lab, val: Val) -> None:
    """SPEC V2: `scancel` of the validation job -> interrupted: the node is drained again
    with exactly its old reason, the reservation is gone, and the record says so."""
    node = "gpu01"
    old = "heal: gpu.xid.79 by=check GPU fell off the bus"
    lab.scontrol("update", f"nodename={node}", "state=drain", f"reason={old}")
    val.tool(rc=0, sleep=120)
    val.start_daemon()
    val.validate(node)
    running = val.wait_run(node, ("running",), timeout=60)
    val.wait(lambda: "RUNNING" in lab.run(["squeue", "-h", "-j", str(running.job_id), "-o",
                                           "%T"], check=False).stdout, "job running")
    assert "DRAIN" not in lab.state(node)  # lifted for the job; the reservation holds it
    lab.run(["scancel", str(running.job_id)])
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=90)
    assert done.phase == "interrupted", done
    assert done.previous is not None and done.previous.reason == old
    assert "drained again" in done.restored and done.job_state == "CANCELLED"
    assert "DRAIN" in lab.state(node)
    assert lab.scontrol("show", "node", node).stdout.count(old) == 1
    assert PREFIX not in val.reservations()
    assert not val.tickets.exists() or not list(val.tickets.iterdir())


def test_daemon_killed_mid_validation_follows_the_same_job(lab: Lab, val: Val) -> None:
    """SPEC V1, S6: SIGKILL of the daemon while the job runs; the restarted daemon follows
    the same job to its end: no second job, one reservation, the node returned."""
    node = "gpu04"
    val.tool(rc=0, sleep=10)
    first = val.start_daemon()
    val.validate(node)
    running = val.wait_run(node, ("running",), timeout=60)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    val.start_daemon()
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=120)
    assert done.phase == "passed", done
    assert done.job_id == running.job_id
    assert val.jobs_named(f"{PREFIX}{node}") == [str(running.job_id)]
    assert len([a for a in done.attempts if a.effect == "submit"]) == 1
    assert lab.state(node) == {"IDLE"} and PREFIX not in val.reservations()


def test_node_lost_mid_test_restores_and_records(lab: Lab, val: Val) -> None:
    """SPEC V2: the node's slurmd stops mid-test; Slurm fails the job (NODE_FAIL) or marks
    the node DOWN -> interrupted: the job is ended, the reservation removed, recorded."""
    node = "gpu02"
    val.tool(rc=0, sleep=90)  # outlives the NODE_FAIL (~40 s), not the test by much
    val.start_daemon()
    val.validate(node)
    running = val.wait_run(node, ("running",), timeout=60)
    val.wait(lambda: "RUNNING" in lab.run(["squeue", "-h", "-j", str(running.job_id), "-o",
                                           "%T"], check=False).stdout, "job running")
    pids = lab.run(["pgrep", "-f", f"slurmd -f {lab.conf} -N {node}( |$)"],
                   check=False).stdout.split()
    assert pids
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=150)
    assert done.phase == "interrupted", done
    assert "DOWN" in done.summary or done.job_state == "NODE_FAIL", done.summary
    assert any(s.phase == "interrupted" and "restored" in s.why for s in done.steps)
    assert PREFIX not in val.reservations()
    assert not val.tickets.exists() or not list(val.tickets.iterdir())


@pytest.mark.parametrize("val", [{"toml": 'hosts = { "host-gpu01" = "gpu03" }\n'}],
                         indirect=True)
def test_migrate_validates_the_vacated_host_as_a_job_there(lab: Lab, val: Val) -> None:
    """SPEC V1, L2: a migrate of gpu01 through the provider simulator vacates host-gpu01,
    which is lab node gpu03 (``[validation] hosts``): the daemon validates gpu03 as a
    Slurm job in a reservation, and the pass returns it."""
    val.tool(rc=0, sleep=2)
    now = datetime.now(timezone.utc)
    alert = Alert(node="gpu01", fault="gpu.xid.79", severity=Severity.CRITICAL,
                  summary="GPU has fallen off the bus", first_seen=now, last_seen=now,
                  detector="kernel_log", evidence=(Evidence(source="test", text="xid 79"),))
    val.slurm.set_extra("gpu01", extra.KEY, extra.our_section([alert], now))
    val.start_daemon()
    val.wait(lambda: (val.state_dir / "heartbeat").exists(), "a heartbeat")
    proc = val.cli("request", "gpu01", "migrate", "--reason", "xid 79", "--by", "alice")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = val.wait_run("gpu03", ("passed", "failed", "interrupted", "skipped"), timeout=150)
    assert done.phase == "passed", done
    assert (done.origin, done.host) == ("migrate", "host-gpu01")
    rem = val.store.load().get(done.remediation or "")
    assert rem is not None and rem.node == "gpu01" and rem.action.value == "migrate"
    assert done.job_id is not None and "running" in done.phase_times
    assert [h["host"] for h in val.sim.validation()] == ["host-gpu01"]
    assert lab.state("gpu03") == {"IDLE"} and PREFIX not in val.reservations()


PEER_STEP = """
[[validation.suites.default]]
name = "nccl-pair"
command = ["dcgmi", "pair", "{node}", "{peer}"]
timeout = "5m"
peer = true
"""


@pytest.mark.parametrize("val", [{"steps": PEER_STEP}], indirect=True)
def test_multi_node_step_pairs_with_an_idle_healthy_peer_held_only_for_the_test(
        lab: Lab, val: Val) -> None:
    """SPEC V1: a step across two machines gets a known-healthy peer chosen by the
    controller from the same pool (idle, not drained, not under remediation); it is in
    the reservation and the job while the test runs, and free again after."""
    node = "gpu01"
    lab.scontrol("update", "nodename=gpu02", "state=drain", "reason=bad DIMM")  # not a peer
    val.tool(rc=0, sleep=4)
    val.start_daemon()
    val.validate(node)
    running = val.wait_run(node, ("running",), timeout=60)
    assert running.peer == "gpu03", running.peer
    res = val.reservations()
    assert "Nodes=gpu[01,03]" in res or "Nodes=gpu01,gpu03" in res, res
    done = val.wait_run(node, ("passed", "failed", "interrupted", "skipped"), timeout=90)
    assert done.phase == "passed", done
    log = (Path(done.results_dir) / "nccl-pair.log").read_text()
    assert "dcgmi (stub) pair gpu01 gpu03" in log
    assert PREFIX not in val.reservations()
    assert lab.state("gpu01") == lab.state("gpu03") == {"IDLE"}
    assert "DRAIN" in lab.state("gpu02")  # someone else's drain, untouched
