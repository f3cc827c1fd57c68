"""The daemon end to end on the real Slurm lab with the cloud and bare-metal providers:
fault -> cordon -> act -> return -> resume, where the act goes to moto's EC2 server (aws)
or sushy-tools' Redfish emulator (redfish) over HTTP, or to pyghmi's BMC server over IPMI
(redfish provider, protocol = "ipmi"; that BMC reboots the lab node itself on a reset). A recording proxy in front of the
emulator plays the hardware: when EC2 is asked to start (or reboot) the node's instance,
or the BMC to reset its system, the proxy reboots the lab node (slurmd restarted with -b)
before passing the call on, as the simulator's LabHook does for the http provider.
SPEC L1-L5, L2, S6.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.models import Phase, Remediation
from slurm_heal.providers.simulator import LabHook, SimulatorServer, server_id
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.types import Action
from tests.emulators import (
    FAKE_AWS_ENV,
    ComputeEngine,
    IpmiBmc,
    MotoServer,
    RecordingProxy,
    Seen,
    SushyEmulator,
    service_account_key,
)
from tests.integration.test_daemon_lab import XID79, Heal
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, Timeout after 6s of waiting for "
          "RPC response from GPU0 GSP!")
REBOOTING_RESETS = ("ForceRestart", "GracefulRestart", "PowerCycle", "On")


class Platform:
    """What Heal reads from its simulator: the url and the executed actions."""

    def __init__(self, url: str, executed: dict[str, int],
                 proxy: RecordingProxy | None = None) -> None:
        self.proxy, self.url, self._executed = proxy, url, executed

    def stats(self) -> dict[str, dict[str, int]]:
        return {"executed": dict(self._executed)}


def _heal(lab: Lab, tmp_path: Path, platform: Platform, provider_toml: str) -> Heal:
    heal = Heal(lab, tmp_path, platform)  # type: ignore[arg-type]
    text = heal.config.read_text()
    head = text[:text.index("[provider]")]
    heal.config.write_text(head + provider_toml)
    heal.baseline()
    heal._watcher.start()
    return heal


def _fault_to_done(lab: Lab, heal: Heal, node: str, kernel_line: str) -> Remediation:
    """The kernel says ``kernel_line`` on ``node``, its check finds it, the daemon starts:
    the remediation that ends DONE with the node back IDLE in Slurm."""
    heal.kernel_says(node, kernel_line)
    assert heal.check(node).returncode == 1
    heal.start_daemon()
    rem = heal.wait_phase(node, Phase.DONE, timeout=150)
    lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
    return rem


@pytest.fixture
def aws_lab(lab_clean: Lab, tmp_path: Path, moto_server: MotoServer,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Heal, dict[str, str]]]:
    lab = lab_clean
    instances = {node: moto_server.instance() for node in lab.nodes}
    by_instance = {iid: node for node, iid in instances.items()}
    executed: dict[str, int] = {}

    def hardware(seen: Seen) -> None:
        if seen.ec2_action in ("StartInstances", "RebootInstances"):
            node = by_instance.get((seen.form.get("InstanceId.1") or [""])[0])
            if node is not None:
                lab.reboot(node, delay=0.5)
                executed[f"{node}:{seen.ec2_action}"] = executed.get(
                    f"{node}:{seen.ec2_action}", 0) + 1

    for k, v in FAKE_AWS_ENV.items():  # the daemon finds credentials the boto3 way
        monkeypatch.setitem(lab.env, k, v)
    with RecordingProxy(moto_server.url, hook=hardware) as proxy:
        table = "\n".join(f'{n} = "{i}"' for n, i in instances.items())
        heal = _heal(lab, tmp_path, Platform(proxy.url, executed, proxy), f"""
[provider]
type = "aws"
region = "us-east-1"
endpoint_url = "{proxy.url}"
read_timeout = 60
[provider.instances]
{table}
""")
        try:
            yield heal, instances
        finally:
            heal.close()


@pytest.fixture
def redfish_lab(lab_clean: Lab, tmp_path: Path,
                sushy_emulator: SushyEmulator) -> Iterator[Heal]:
    lab = lab_clean
    node = "gpu02"
    executed: dict[str, int] = {}

    def hardware(seen: Seen) -> None:
        if seen.op == "Reset" and seen.json().get("ResetType") in REBOOTING_RESETS:
            lab.reboot(node, delay=0.5)
            executed[f"{node}:Reset"] = executed.get(f"{node}:Reset", 0) + 1

    (tmp_path / "bmc.pass").write_text("secret\n")
    with RecordingProxy(sushy_emulator.url, hook=hardware) as proxy:
        heal = _heal(lab, tmp_path, Platform(proxy.url, executed, proxy), f"""
[provider]
type = "redfish"
username = "admin"
password_file = "{tmp_path / 'bmc.pass'}"
read_timeout = 60
[provider.bmcs.{node}]
address = "{proxy.url}"
""")
        try:
            yield heal
        finally:
            heal.close()


@pytest.fixture
def openstack_lab(lab_clean: Lab, tmp_path: Path) -> Iterator[Heal]:
    """The simulator's Keystone + (stricter) Nova, whose actions really reboot lab nodes."""
    lab = lab_clean
    hook = LabHook(lab.dir, slurm=CliSlurm(slurm_conf=str(lab.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.5,
                         os_users={"heal": "pw"}) as sim:
        (tmp_path / "os.pass").write_text("pw\n")
        heal = _heal(lab, tmp_path, sim, f"""
[provider]
type = "openstack"
auth_url = "{sim.url}"
username = "heal"
password_file = "{tmp_path / 'os.pass'}"
project_name = "hpc"
read_timeout = 60
""")
        try:
            yield heal
        finally:
            heal.close()


def test_openstack_xid79_cold_migrate_is_confirmed_and_the_node_returns(
        lab: Lab, openstack_lab: Heal) -> None:
    """SPEC L2: Nova's cold migration stops at VERIFY_RESIZE; the provider confirms it and
    the remediation completes: cordon -> act -> return -> resume."""
    heal = openstack_lab
    node = "gpu04"
    rem = _fault_to_done(lab, heal, node, XID79)
    assert rem.action is Action.MIGRATE
    assert list(heal.executed().values()) == [1]
    assert _nova_status(heal.sim, node) == "ACTIVE"  # confirmed, not left in VERIFY_RESIZE
    act = [a for a in rem.attempts if a.effect == "act"][-1]
    assert act.outcome == "ok" and "confirmResize" in act.detail, act


def _nova_status(sim: SimulatorServer, node: str) -> str:
    import requests

    token = requests.post(sim.url + "/v3/auth/tokens", timeout=10, json={"auth": {"identity": {
        "methods": ["password"], "password": {"user": {"name": "heal", "password": "pw",
                                                       "domain": {"name": "Default"}}}}}}
                          ).headers["X-Subject-Token"]
    body = requests.get(f"{sim.url}/compute/v2.1/servers/{server_id(node)}", timeout=10,
                        headers={"X-Auth-Token": token}).json()
    status: str = body["server"]["status"]
    return status


@pytest.fixture
def gcp_lab(lab_clean: Lab, tmp_path: Path) -> Iterator[tuple[Heal, ComputeEngine]]:
    """A local Compute Engine endpoint whose reset really reboots the lab node; the daemon
    authenticates with a service-account key whose token endpoint is that server."""
    lab = lab_clean
    executed: dict[str, int] = {}

    def hardware(method: str, instance: str) -> None:
        if method in ("reset", "start") and instance in lab.nodes:
            lab.reboot(instance, delay=0.5)
            executed[f"{instance}:{method}"] = executed.get(f"{instance}:{method}", 0) + 1

    with ComputeEngine(hook=hardware) as gce:
        key = service_account_key(tmp_path, gce.url + "/token")
        heal = _heal(lab, tmp_path, Platform(gce.url, executed), f"""
[provider]
type = "gcp"
project = "hpc-prod"
zone = "us-central1-a"
api_endpoint = "{gce.url}"
credentials_file = "{key}"
""")
        try:
            yield heal, gce
        finally:
            heal.close()


def test_gcp_xid119_resets_the_vm_and_the_node_returns(
        lab: Lab, gcp_lab: tuple[Heal, ComputeEngine]) -> None:
    heal, gce = gcp_lab
    node = "gpu01"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert gce.executed == [("reset", node)]
    assert heal.executed() == {f"{node}:reset": 1}
    # signed with the service-account key (a self-signed JWT, or a token from its endpoint)
    assert gce.authorizations and all(a.startswith("Bearer ") for a in gce.authorizations)


def test_aws_xid79_migrates_by_stop_and_start_and_the_node_returns(
        lab: Lab, aws_lab: tuple[Heal, dict[str, str]]) -> None:
    """SPEC L1, L2: Xid 79 -> migrate (auto) -> EC2 stop, then start -> back, resumed."""
    heal, instances = aws_lab
    node = "gpu01"
    rem = _fault_to_done(lab, heal, node, XID79)
    assert rem.action is Action.MIGRATE
    proxy = heal.sim.proxy  # type: ignore[attr-defined]
    iid = instances[node]
    assert (proxy.ec2_calls("StopInstances", iid), proxy.ec2_calls("StartInstances", iid)) \
        == (1, 1)
    assert heal.executed() == {f"{node}:StartInstances": 1}
    act = [a for a in rem.attempts if a.effect == "act"][0]
    assert act.operation and act.operation.startswith("ec2-")
    for phase in ("cordoned", "acting", "returning", "done"):
        assert phase in rem.phase_times, phase


def test_aws_xid119_reboots_through_reboot_instances_once(
        lab: Lab, aws_lab: tuple[Heal, dict[str, str]]) -> None:
    heal, instances = aws_lab
    node = "gpu03"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert heal.sim.proxy.ec2_calls("RebootInstances", instances[node]) == 1  # type: ignore[attr-defined]
    assert heal.executed() == {f"{node}:RebootInstances": 1}


@pytest.fixture
def ipmi_lab(lab_clean: Lab, tmp_path: Path) -> Iterator[tuple[Heal, IpmiBmc]]:
    """A BMC without Redfish: IPMI over LAN on 127.0.0.1 (tests/ipmi_bmc.py), whose reset
    reboots the lab node."""
    pytest.importorskip("pyghmi")
    lab = lab_clean
    node = "gpu03"
    (tmp_path / "bmc.pass").write_text("secret\n")
    with IpmiBmc(tmp_path / "bmc.log",
                 on_reset=[*lab.reboot_script, node, "--delay", "0.5"]) as bmc:
        heal = _heal(lab, tmp_path, Platform("", {}), f"""
[provider]
type = "redfish"
username = "admin"
password_file = "{tmp_path / 'bmc.pass'}"
[provider.bmcs.{node}]
protocol = "ipmi"
address = "127.0.0.1"
port = {bmc.port}
""")
        try:
            yield heal, bmc
        finally:
            heal.close()


def test_ipmi_xid119_resets_the_machine_and_the_node_returns(
        lab: Lab, ipmi_lab: tuple[Heal, IpmiBmc]) -> None:
    """SPEC L1, L2: a BMC without Redfish: Xid 119 -> reboot (auto) -> IPMI chassis
    control reset, once (S6) -> the node boots, passes its check and is resumed."""
    heal, bmc = ipmi_lab
    node = "gpu03"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert bmc.commands() == ["reset"]
    act = [a for a in rem.attempts if a.effect == "act"][-1]
    assert act.outcome == "ok" and "ipmi: boot on gpu03 accepted" in act.detail, act


def test_redfish_xid119_resets_the_system_and_the_node_returns(
        lab: Lab, redfish_lab: Heal) -> None:
    """SPEC L1, L2: Xid 119 -> reboot (auto) -> ComputerSystem.Reset ForceRestart."""
    heal = redfish_lab
    node = "gpu02"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert heal.sim.proxy.redfish_resets() == ["ForceRestart"]  # type: ignore[attr-defined]
    assert heal.executed() == {f"{node}:Reset": 1}
