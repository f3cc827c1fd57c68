"""The azure provider (azure-mgmt-compute, azure-identity) against a local HTTPS Azure on
127.0.0.1 (tests/cloud_emulators.py `AzureCloud`): the real ClientSecretCredential gets
its token from the local Entra ID endpoint (``authority``), the real
ComputeManagementClient calls the local Resource Manager (``base_url``), both trusting
the test's self-signed certificate (``verify``). SPEC L2, E4, S6, D11; issue 41."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.errors import ConfigError, ProviderError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.azure import AzureProvider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action
from tests.cloud_emulators import LOST, AzureCloud, Reply, azure_config
from tests.emulators import self_signed


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("azure-tls"))


@pytest.fixture
def az(tls: tuple[Path, Path]) -> Iterator[AzureCloud]:
    with AzureCloud(tls) as cloud:
        yield cloud


def _provider(az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path,
              **extra: Any) -> AzureProvider:
    p = make_provider(azure_config(az, tls[0], tmp_path, **extra), state_dir=tmp_path)
    assert isinstance(p, AzureProvider)
    return p


def _finish(p: AzureProvider, key: str, polls: int = 10) -> Any:
    for _ in range(polls):
        op = p.status(key)
        assert op is not None
        if op.finished:
            return op
    return op


def test_reboot_is_a_restart_polled_to_its_end_with_the_vm_id(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    vm = az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    op = p.submit("gpu01", Action.REBOOT, "r-z1:act:0")
    assert op.status == "running" and "restart" in op.detail
    done = _finish(p, "r-z1:act:0")
    assert done.status == "succeeded" and vm.vm_id in done.detail
    assert az.executed == [("restart", "gpu01")]
    assert p.identity("gpu01") == vm.vm_id  # SPEC D11: the vmId
    # the operation's URL is kept: a restarted controller asks it, never posts again
    rec = p.records.get("r-z1:act:0")
    assert rec is not None and "/operations/" in rec["operation"]
    assert az.tokens == 1  # one token, reused


def test_a_restarted_controller_asks_the_recorded_operation_instead_of_sending_again(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """SPEC S6: the key, the operation URL and the poller's continuation token are on
    disk; a new provider on the same state directory polls them."""
    az.vm("hpc-rg", "gpu01")
    first = _provider(az, tls, tmp_path)
    first.submit("gpu01", Action.MIGRATE, "r-z2:act:0")
    first.close()
    again = _provider(az, tls, tmp_path)
    assert again.submit("gpu01", Action.MIGRATE, "r-z2:act:0").status in ("running",
                                                                          "succeeded")
    assert _finish(again, "r-z2:act:0").status == "succeeded"
    assert az.executed == [("redeploy", "gpu01")]
    assert len(az.actions()) == 1


def test_migrate_is_a_redeploy_to_a_new_host(az: AzureCloud, tls: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    vm = az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    p.submit("gpu01", Action.MIGRATE, "r-z3:act:0")
    assert _finish(p, "r-z3:act:0").status == "succeeded"
    assert az.executed == [("redeploy", "gpu01")] and vm.host == 2


def test_rebuild_says_what_kind_of_reimage_and_refuses_an_attached_os_disk(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01", ephemeral=True)
    az.vm("hpc-rg", "gpu02", attached_os_disk=True)
    az.vm("hpc-rg", "ndv5/3")
    p = _provider(az, tls, tmp_path, vms={"gpu03": "ndv5/3"})
    p.submit("gpu01", Action.REBUILD, "r-z4:act:0")
    done = _finish(p, "r-z4:act:0")
    assert done.status == "succeeded" and "ephemeral OS disk reset to its image" in done.detail
    with pytest.raises(ProviderRefused, match="cannot be reimaged: its OS disk was attached"):
        p.submit("gpu02", Action.REBUILD, "r-z5:act:0")
    assert p.status("r-z5:act:0") is None  # nothing recorded, nothing sent
    p.submit("gpu03", Action.REBUILD, "r-z6:act:0")
    done = _finish(p, "r-z6:act:0")
    assert done.status == "succeeded" and "scale set VM" in done.detail
    assert az.executed == [("reimage", "gpu01"), ("reimage", "ndv5/3")]
    assert any("/virtualMachineScaleSets/ndv5/virtualMachines/3/reimage" in a
               for a in az.actions())


def test_power_cycle_deallocates_and_starts_only_where_allowed(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    assert not p.supports(Action.POWER_CYCLE)
    with pytest.raises(ProviderRefused, match="power_cycle = true"):
        p.submit("gpu01", Action.POWER_CYCLE, "r-z7:act:0")
    assert az.executed == []
    p = _provider(az, tls, tmp_path / "allowed", power_cycle=True)
    assert p.supports(Action.POWER_CYCLE)
    p.submit("gpu01", Action.POWER_CYCLE, "r-z8:act:0")
    assert _finish(p, "r-z8:act:0").status == "succeeded"
    assert az.executed == [("deallocate", "gpu01"), ("start", "gpu01")]


def test_the_vm_is_found_by_tag_or_by_name_template(az: AzureCloud, tls: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    az.vm("hpc-rg", "ndh100-7f3a", tags={"slurm-node": "gpu01"})
    az.vm("hpc-rg", "ndh100-9c1e", tags={"slurm-node": "gpu02"})
    az.vm("hpc-rg", "hpc-gpu05")
    p = _provider(az, tls, tmp_path, tag="slurm-node")
    p.submit("gpu02", Action.REBOOT, "r-z9:act:0")
    with pytest.raises(ProviderRefused, match="exactly one VM in hpc-rg tagged"):
        p.submit("gpu09", Action.REBOOT, "r-z10:act:0")
    q = _provider(az, tls, tmp_path / "t", vm_name="hpc-{node}")
    q.submit("gpu05", Action.REBOOT, "r-z11:act:0")
    assert az.executed == [("restart", "ndh100-9c1e"), ("restart", "hpc-gpu05")]


def test_a_vm_whose_id_is_not_the_nodes_instance_id_is_refused(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """SPEC D11: Slurm's InstanceId of the node names the machine; a VM of the same name
    with another vmId (recreated, or a wrong mapping) is not acted on."""
    vm = az.vm("hpc-rg", "gpu01")
    slurm = MemorySlurm([("gpu01", "gpu")], clock=lambda: datetime.now(timezone.utc))
    slurm.set_instance_id("gpu01", "11111111-2222-3333-4444-555555555555")
    cfg = azure_config(az, tls[0], tmp_path)
    p = make_provider(cfg, slurm=slurm, state_dir=tmp_path)
    with pytest.raises(ProviderRefused, match=f"has vmId {vm.vm_id}, but Slurm's InstanceId"):
        p.submit("gpu01", Action.REBOOT, "r-z12:act:0")
    slurm.set_instance_id("gpu01", vm.vm_id)
    assert p.submit("gpu01", Action.REBOOT, "r-z13:act:0").status == "running"
    assert az.executed == [("restart", "gpu01")]


# --- faults ----------------------------------------------------------------------------
def test_a_lost_answer_after_the_restart_ran_is_resolved_from_the_vm_never_resent(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """SPEC S6: the restart ran and its answer was lost (500; azure-core would resend a
    POST answered 500 by itself: the client's retries are off). The VM's instance view
    shows an operation ended after the send: succeeded, one restart."""
    az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    az.lose["restart"] = Reply(500, {"error": {"code": "InternalServerError",
                                               "message": "An unexpected error occured"}})
    op = p.submit("gpu01", Action.REBOOT, "r-f1:act:0")
    assert op.status == "running" and "never sending it again" in op.detail
    assert len(az.actions("restart")) == 1
    busy = p.status("r-f1:act:0")
    assert busy is not None and busy.status == "running" and "updating" in busy.detail
    az.finish()
    done = p.status("r-f1:act:0")
    assert done is not None and done.status == "succeeded", done.detail
    assert az.executed == [("restart", "gpu01")] and len(az.actions("restart")) == 1


def test_a_connection_closed_after_the_post_is_never_resent(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    az.lose["redeploy"] = LOST
    op = p.submit("gpu01", Action.MIGRATE, "r-f2:act:0")
    assert op.status == "running" and "unknown" in op.detail
    az.finish()
    assert _finish(p, "r-f2:act:0").status == "succeeded"
    assert az.executed == [("redeploy", "gpu01")] and len(az.actions("redeploy")) == 1


def test_throttling_waits_as_long_as_retry_after_says(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    sleeps: list[float] = []
    cfg = azure_config(az, tls[0], tmp_path)
    p = make_provider(cfg, state_dir=tmp_path)
    assert isinstance(p, AzureProvider)
    p._sleep = sleeps.append
    p.identity("gpu01")  # token fetched
    busy = Reply(429, {"error": {"code": "OperationNotAllowed", "message": "The server "
                                 "rejected the request because too many requests have "
                                 "been received for this subscription."}},
                 {"Retry-After": "7"})
    az.answer_next += [busy, busy]  # the GET of the VM, then the restart itself
    op = p.submit("gpu01", Action.REBOOT, "r-f3:act:0")
    assert op.status == "running"
    assert sleeps == [7.0, 7.0]
    assert az.executed == [("restart", "gpu01")]


def test_an_operation_that_fails_late_fails_with_the_platforms_words(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    az.fail_late.add("redeploy")
    p = _provider(az, tls, tmp_path)
    p.submit("gpu01", Action.MIGRATE, "r-f4:act:0")
    done = _finish(p, "r-f4:act:0")
    assert done.status == "failed"
    assert "operation Failed: AllocationFailed: Allocation failed" in done.detail


def test_refused_credentials_are_a_clear_error_and_nothing_is_sent(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path)
    az.secret = "rotated"  # the secret in the provider's file is no longer the app's
    with pytest.raises(ProviderError, match="Azure refused the credentials.*AADSTS7000215"):
        p.submit("gpu01", Action.REBOOT, "r-f5:act:0")
    assert az.actions() == [] and az.executed == []


def test_a_refusal_fails_the_operation_without_a_retry(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    az.refuse["restart"] = Reply(409, {"error": {"code": "OperationNotAllowed", "message":
                                 "Operation 'restart' is not allowed on VM 'gpu01' since "
                                 "the VM is deallocated."}})
    p = _provider(az, tls, tmp_path)
    op = p.submit("gpu01", Action.REBOOT, "r-f6:act:0")
    assert op.status == "failed" and "HTTP 409" in op.detail and "deallocated" in op.detail
    assert len(az.actions("restart")) == 1


def test_the_sdk_would_resend_a_post_answered_500_by_itself(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """Why the client's retries are off: the same SDK call with azure-core's default
    retry policy sends the restart twice after a 500 (this test fails the day it does
    not, and the comment in azure.py goes)."""
    from azure.identity import ClientSecretCredential
    from azure.mgmt.compute import ComputeManagementClient

    az.vm("hpc-rg", "gpu01")
    cred = ClientSecretCredential(az.tenant, az.client_id, az.secret, authority=az.url,
                                  disable_instance_discovery=True,
                                  connection_verify=str(tls[0]))
    client = ComputeManagementClient(
        cred, az.subscription, base_url=az.url, connection_verify=str(tls[0]),
        credential_scopes=["https://management.azure.com/.default"], retry_backoff_factor=0)
    az.lose["restart"] = Reply(500, {"error": {"code": "InternalServerError",
                                               "message": "lost"}})
    poller = client.virtual_machines.begin_restart("hpc-rg", "gpu01", polling=False)
    assert poller is not None
    assert len(az.actions("restart")) == 2 and len(az.executed) == 2


@pytest.mark.parametrize(("cfg", "key", "problem"), [
    ({"type": "azure", "resource_group": "rg"}, "provider.subscription_id", "is required"),
    ({"type": "azure", "subscription_id": "s", "resource_group": "rg",
      "client_secret": "x"}, "provider.client_secret", "never in this file"),
    ({"type": "azure", "subscription_id": "s", "resource_group": "rg",
      "vm_name": "gpu"}, "provider.vm_name", "must contain {node}"),
    ({"type": "azure", "subscription_id": "s", "resource_group": "rg",
      "client_secret_file": "/nonexistent"}, "provider.tenant_id", "needs tenant_id"),
    ({"type": "azure", "subscription_id": "s", "resource_group": "rg",
      "actions": ["remove"]}, "provider.actions", "'remove' is not one of"),
])
def test_config_names_the_key(cfg: dict[str, object], key: str, problem: str,
                              tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=problem) as err:
        make_provider(cfg, state_dir=tmp_path)
    assert err.value.key == key


def test_a_server_that_never_answers_cannot_hold_a_call_past_the_deadline(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """House style 6: a read that hangs ends at the deadline (ProviderTimeout); a restart
    that ran and then hangs is an unknown outcome, never sent again (SPEC S6)."""
    from slurm_heal.errors import ProviderTimeout
    from tests.cloud_emulators import hang

    az.vm("hpc-rg", "gpu01")
    p = _provider(az, tls, tmp_path, deadline=1, read_timeout=5)
    p.identity("gpu01")  # the token
    az.answer_next.append(hang(4))
    with pytest.raises(ProviderTimeout, match="deadline of 1s"):
        p.identity("gpu01")
    az.lose["restart"] = hang(4)
    op = p.submit("gpu01", Action.REBOOT, "r-f7:act:0")
    assert op.status == "running" and "whether it ran is unknown" in op.detail
    assert len(az.actions("restart")) == 1 and az.executed == [("restart", "gpu01")]


def test_policy_check_builds_it_dry_with_a_managed_identity(tmp_path: Path) -> None:
    """`slurm-heal policy check` builds the provider without calling Azure: a managed
    identity is only asked for a token at the first call."""
    from slurm_heal.configcheck import dry_provider

    assert dry_provider({"type": "azure", "subscription_id": "s", "resource_group": "rg",
                         "tag": "slurm-node"}, "policy.toml") == "azure"


def test_a_scale_set_vm_is_restarted_and_a_lost_answer_read_from_its_instance_view(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    """CycleCloud-style nodes: instances of a scale set (``scale_set`` + the instance id
    from ``vm_name``); a lost answer is resolved from the scale set VM's instance view."""
    az.vm("hpc-rg", "ndv5/7")
    p = _provider(az, tls, tmp_path, scale_set="ndv5", vm_name="{node}")
    az.lose["restart"] = LOST
    op = p.submit("7", Action.REBOOT, "r-z14:act:0")
    assert op.status == "running" and "unknown" in op.detail
    az.finish()
    assert _finish(p, "r-z14:act:0").status == "succeeded"
    assert az.executed == [("restart", "ndv5/7")]
    assert any("/virtualMachineScaleSets/ndv5/virtualMachines/7/instanceView" in path
               for _, path, _, _ in az.seen)


def test_a_role_without_the_action_is_named_and_nothing_runs(
        az: AzureCloud, tls: tuple[Path, Path], tmp_path: Path) -> None:
    az.vm("hpc-rg", "gpu01")
    az.refuse["redeploy"] = Reply(403, {"error": {"code": "AuthorizationFailed", "message":
                                  "The client 'app-1' does not have authorization to "
                                  "perform action 'Microsoft.Compute/virtualMachines/"
                                  "redeploy/action'."}})
    p = _provider(az, tls, tmp_path)
    with pytest.raises(ProviderError, match="HTTP 403: AuthorizationFailed.*the role lacks"):
        p.submit("gpu01", Action.MIGRATE, "r-f8:act:0")
    assert az.executed == []
    rec = p.records.get("r-f8:act:0")
    assert rec is not None and rec["token"] == "" and not rec["unknown"]  # sent again later
