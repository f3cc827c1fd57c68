"""The Provider contract (slurm_heal/providers/base.py), run through every provider type
that supports the case: the controller relies on exactly these behaviours (SPEC S6, L2).
Cloud and BMC providers run against their emulators on 127.0.0.1 (moto's EC2 server,
sushy-tools' Redfish emulator, pyghmi's IPMI BMC server, a local Compute Engine REST
endpoint, a local HTTPS Azure and a local OCI Core Services endpoint:
tests/cloud_emulators.py).

Plus the lab test: the slurm provider reboots a real lab node through scontrol (the
lab's RebootProgram) and the simulator in lab mode reboots one from outside."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.base import Provider
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.openstack import OpenStackProvider
from slurm_heal.providers.script import ExecProvider
from slurm_heal.providers.simulator import LabHook, SimulatorServer
from slurm_heal.providers.slurm import SlurmRebootProvider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action
from tests.emulators import ComputeEngine, IpmiBmc, RecordingProxy, aws_env
from tests.fakes import Clock
from tests.lab import Lab

DATA = Path(__file__).resolve().parent.parent / "data" / "providers"
NODE = "gpu01"


@dataclass
class Case:
    provider: Provider
    executions: Callable[[], int]  # how often the action really ran, per the backend
    settle: Callable[[], None]  # let a started operation finish


@pytest.fixture(params=["http", "simulator", "exec", "openstack", "slurm", "aws", "redfish",
                        "ipmi", "gcp", "azure", "oci"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    kind = request.param
    if kind == "azure":  # a local HTTPS Entra ID + Resource Manager (authority, base_url)
        from tests.cloud_emulators import AzureCloud, azure_config
        from tests.emulators import self_signed

        tls = self_signed(tmp_path)
        with AzureCloud(tls) as az:
            az.vm("hpc-rg", NODE)
            yield Case(make_provider(azure_config(az, tls[0], tmp_path / "az"),
                                     state_dir=tmp_path),
                       lambda: az.executed.count(("restart", NODE)), az.finish)
    elif kind == "oci":  # a local Core Services endpoint (service_endpoint), signed calls
        from tests.cloud_emulators import OciCloud, oci_config, oci_key

        config, key_id = oci_key(tmp_path)
        with OciCloud(key_id) as oci:
            inst = oci.instance()
            yield Case(make_provider(oci_config(oci, config, instances={NODE: inst.id}),
                                     state_dir=tmp_path),
                       lambda: oci.executed.count(("SOFTRESET", inst.id)), oci.finish)
    elif kind == "gcp":  # a local Compute Engine endpoint (the client's api_endpoint)
        from google.auth.credentials import AnonymousCredentials

        from slurm_heal.providers.gcp import GcpProvider

        with ComputeEngine() as gce:
            yield Case(GcpProvider(project="hpc", zone="us-central1-a", api_endpoint=gce.url,
                                   credentials=AnonymousCredentials(), state_dir=tmp_path),
                       lambda: gce.executed.count(("reset", NODE)), lambda: None)
    elif kind == "aws":  # moto's EC2 server, behind a proxy that counts what reached it
        moto = request.getfixturevalue("moto_server")
        iid = moto.instance()
        with aws_env(), RecordingProxy(moto.url) as proxy:
            yield Case(make_provider({"type": "aws", "region": "us-east-1",
                                      "endpoint_url": proxy.url, "instances": {NODE: iid}},
                                     state_dir=tmp_path),
                       lambda: proxy.ec2_calls("RebootInstances", iid), lambda: None)
    elif kind == "redfish":  # sushy-tools' emulator, likewise
        emulator = request.getfixturevalue("sushy_emulator")
        (tmp_path / "pw").write_text("secret")
        with RecordingProxy(emulator.url) as proxy:
            yield Case(make_provider({"type": "redfish", "username": "admin",
                                      "password_file": str(tmp_path / "pw"),
                                      "bmcs": {NODE: {"address": proxy.url}}},
                                     state_dir=tmp_path),
                       lambda: len(proxy.redfish_resets()), lambda: None)
    elif kind == "ipmi":  # pyghmi's BMC server (IPMI over LAN) behind the redfish provider
        pytest.importorskip("pyghmi")
        (tmp_path / "pw").write_text("secret")
        with IpmiBmc(tmp_path / "bmc.log") as bmc:
            yield Case(make_provider({"type": "redfish", "username": "admin",
                                      "password_file": str(tmp_path / "pw"),
                                      "bmcs": {NODE: {"protocol": "ipmi",
                                                      "address": "127.0.0.1",
                                                      "port": bmc.port}}},
                                     state_dir=tmp_path),
                       lambda: bmc.commands().count("reset"), lambda: None)
    elif kind in ("http", "openstack"):
        with SimulatorServer(port=0, duration=0.02) as sim:
            p: Provider
            if kind == "http":
                p = HttpProvider(sim.url, backoff=0.01)
            else:
                p = OpenStackProvider(auth_url=sim.url, username="u", password="p",
                                      project_name="hpc", image="img", state_dir=tmp_path)
            yield Case(p, lambda: sum(sim.stats()["executed"].values()),
                       lambda: sim.wait_idle(5) and None)
    elif kind == "simulator":
        p = make_provider({"type": "simulator", "duration": 0.02})
        server = p.server
        try:
            yield Case(p, lambda: sum(server.stats()["executed"].values()),
                       lambda: server.wait_idle(5) and None)
        finally:
            p.close()
    elif kind == "exec":
        runs = tmp_path / "runs"
        p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path,
                         env={"RUNS_FILE": str(runs)})
        yield Case(p, lambda: len(runs.read_text().split()) if runs.exists() else 0,
                   lambda: None)
    else:
        clock = Clock(datetime.now(timezone.utc))
        cluster = MemorySlurm([(NODE, "gpu")], clock=clock)
        clock.now += timedelta(seconds=10)

        def settle() -> None:
            clock.now += timedelta(seconds=10)  # the simulated reboot takes 2 s

        yield Case(SlurmRebootProvider(cluster, state_dir=tmp_path, clock=clock),
                   lambda: cluster.history(NODE).count("reboot"), settle)


def test_submit_returns_the_operation_for_that_node_action_and_key(case: Case) -> None:
    op = case.provider.submit(NODE, Action.REBOOT, "r-c1:act:0")
    assert (op.node, op.action, op.key) == (NODE, Action.REBOOT, "r-c1:act:0")
    assert op.status in ("pending", "running", "succeeded")


def test_same_key_twice_executes_once(case: Case) -> None:
    """SPEC S6: the second submit is answered from the first; nothing runs again."""
    first = case.provider.submit(NODE, Action.REBOOT, "r-c2:act:0")
    second = case.provider.submit(NODE, Action.REBOOT, "r-c2:act:0")
    assert first.id == second.id
    assert case.executions() == 1


def test_status_answers_for_a_submitted_key_until_it_finishes(case: Case) -> None:
    """How a restarted controller resolves an in-flight attempt: ask by key."""
    op = case.provider.submit(NODE, Action.REBOOT, "r-c3:act:0")
    case.settle()
    done = case.provider.status("r-c3:act:0")
    assert done is not None and done.id == op.id
    assert done.finished and done.status == "succeeded"


def test_status_of_an_unknown_key_is_none(case: Case) -> None:
    assert case.provider.status("r-never:act:0") is None


def test_remove_is_never_a_provider_action(case: Case) -> None:
    """SPEC Q2: removal is done by a person; every provider refuses it."""
    assert not case.provider.supports(Action.REMOVE)
    with pytest.raises(ProviderRefused):
        case.provider.submit(NODE, Action.REMOVE, "r-c5:act:0")
    assert case.executions() == 0


# --- the real Slurm lab ------------------------------------------------------------------
@pytest.mark.slurm
def test_slurm_provider_reboot_never_lets_a_waiting_job_land_before_the_health_check(
        lab_clean: Lab, tmp_path: Path) -> None:
    """SPEC L5: a job waits for the node (sbatch -w). The slurm provider reboots the node
    (the lab's RebootProgram, a new boot time) and the operation succeeds once, but Slurm
    keeps the node drained with our reason: the job is still pending after the reboot,
    for as long as Slurm would have taken to resume it on its own. With
    `nextstate=RESUME` the job started ~5 s after the boot."""
    from slurm_heal.reasons import format_marker, is_ours
    from slurm_heal.slurm import make_client

    lab = lab_clean
    node = lab.nodes[-1]
    slurm = make_client(slurm_conf=str(lab.conf))
    marker = format_marker("cordon", remediation="r-lab", text="gpu.xid.79")
    slurm.drain(node, marker)  # the controller's cordon (L1) before the act
    job = lab.run(["sbatch", "--parsable", "-w", node, "-t", "5", "--wrap", "sleep 1"]
                  ).stdout.strip().split(";")[0]
    before = lab.show(node)["BootTime"]
    provider = make_provider({"type": "slurm", "timeout": 120}, slurm=slurm, state_dir=tmp_path)
    assert provider.submit(node, Action.REBOOT, "r-lab:act:0").status == "running"
    deadline = time.monotonic() + 90
    while True:
        done = provider.status("r-lab:act:0")
        assert done is not None
        if done.finished or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert done.status == "succeeded", done.detail
    assert lab.show(node)["BootTime"] != before
    assert provider.submit(node, Action.REBOOT, "r-lab:act:0").status == "succeeded"
    # Past the moment Slurm would have resumed it on its own (RESUME: ~5 s; DOWN under
    # ReturnToService=2: ~20 s), the node is still drained by us and the job waits.
    for _ in range(25):
        info = slurm.node(node)
        assert info.drained and is_ours(info.reason), (info.states, info.reason)
        state = lab.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        assert state == "PENDING", state
        time.sleep(1)
    # Leave no job behind for the tests after this one (a pending job has no node).
    lab.run(["scancel", job])
    slurm.resume(node)  # what the controller does once the health check passed


@pytest.mark.slurm
def test_simulator_in_lab_mode_reboots_the_node_slurm_sees_it(lab_clean: Lab) -> None:
    lab = lab_clean
    node = lab.nodes[-2]
    before = lab.show(node)["BootTime"]
    hook = LabHook(lab.dir)
    with SimulatorServer(port=0, duration=0, on_action=hook) as sim:
        p = HttpProvider(sim.url)
        p.submit(node, Action.REBOOT, "r-lab2:act:0")
        assert sim.wait_idle(60)
        assert p.status("r-lab2:act:0").status == "succeeded"  # type: ignore[union-attr]
    lab.wait_for(lambda: lab.show(node)["BootTime"] != before,
                 timeout=30, what="new BootTime")
