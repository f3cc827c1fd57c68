"""The daemon end to end on the real Slurm lab with the azure and oci providers (issue
41): fault -> cordon -> act -> return -> resume, where the act goes through the real
azure-mgmt-compute / oci SDK to a local cloud on 127.0.0.1 (tests/cloud_emulators.py)
whose restart or SOFTRESET really reboots the lab node (slurmd restarted with -b), as
the other cloud lab tests do. SPEC L1-L5, L2, S6.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.types import Action
from tests.cloud_emulators import AzureCloud, OciCloud, oci_key
from tests.emulators import self_signed
from tests.integration.test_daemon_clouds_lab import XID119, Platform, _fault_to_done, _heal
from tests.integration.test_daemon_lab import Heal
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def azure_lab(lab_clean: Lab, tmp_path: Path) -> Iterator[tuple[Heal, AzureCloud]]:
    lab = lab_clean
    executed: dict[str, int] = {}

    def hardware(verb: str, vm: str) -> None:
        if verb in ("restart", "start", "redeploy", "reimage") and vm in lab.nodes:
            lab.reboot(vm, delay=0.5)
            executed[f"{vm}:{verb}"] = executed.get(f"{vm}:{verb}", 0) + 1

    tls = self_signed(tmp_path)
    with AzureCloud(tls, hook=hardware) as az:
        for node in lab.nodes:
            az.vm("hpc-rg", node)
        (tmp_path / "azure.secret").write_text(az.secret + "\n")
        heal = _heal(lab, tmp_path, Platform(az.url, executed), f"""
[provider]
type = "azure"
subscription_id = "{az.subscription}"
resource_group = "hpc-rg"
tenant_id = "{az.tenant}"
client_id = "{az.client_id}"
client_secret_file = "{tmp_path / 'azure.secret'}"
authority = "{az.url}"
base_url = "{az.url}"
verify = "{tls[0]}"
""")
        try:
            yield heal, az
        finally:
            heal.close()


def test_azure_xid119_restarts_the_vm_and_the_node_returns(
        lab: Lab, azure_lab: tuple[Heal, AzureCloud]) -> None:
    heal, az = azure_lab
    node = "gpu01"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert az.executed == [("restart", node)]
    assert heal.executed() == {f"{node}:restart": 1}
    act = [a for a in rem.attempts if a.effect == "act"][-1]
    assert act.outcome == "ok" and az.vms[("hpc-rg", node)].vm_id in act.detail, act


@pytest.fixture
def oci_lab(lab_clean: Lab, tmp_path: Path) -> Iterator[tuple[Heal, OciCloud, dict[str, str]]]:
    lab = lab_clean
    executed: dict[str, int] = {}
    config, key_id = oci_key(tmp_path)
    by_ocid: dict[str, str] = {}

    def hardware(action: str, ocid: str) -> None:
        node = by_ocid.get(ocid)
        if node is not None and action in ("SOFTRESET", "RESET", "REBOOTMIGRATE"):
            lab.reboot(node, delay=0.5)
            executed[f"{node}:{action}"] = executed.get(f"{node}:{action}", 0) + 1

    with OciCloud(key_id, hook=hardware) as oci:
        instances = {node: oci.instance().id for node in lab.nodes}
        by_ocid.update({ocid: node for node, ocid in instances.items()})
        table = "\n".join(f'{n} = "{i}"' for n, i in instances.items())
        heal = _heal(lab, tmp_path, Platform(oci.url, executed), f"""
[provider]
type = "oci"
config_file = "{config}"
endpoint = "{oci.url}"
[provider.instances]
{table}
""")
        try:
            yield heal, oci, instances
        finally:
            heal.close()


def test_oci_xid119_softresets_the_instance_and_the_node_returns(
        lab: Lab, oci_lab: tuple[Heal, OciCloud, dict[str, str]]) -> None:
    heal, oci, instances = oci_lab
    node = "gpu02"
    rem = _fault_to_done(lab, heal, node, XID119)
    assert rem.action is Action.REBOOT
    assert oci.executed == [("SOFTRESET", instances[node])]
    assert heal.executed() == {f"{node}:SOFTRESET": 1}
