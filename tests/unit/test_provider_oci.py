"""The oci provider (the oci SDK) against a local Core Services endpoint on 127.0.0.1
(tests/cloud_emulators.py `OciCloud`): the real ComputeClient and WorkRequestClient
(``service_endpoint``), signing every request with a real oci.signer.Signer over an API
key the test makes, read from a real oci config file. SPEC L2, E4, S6, D11; issue 41."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.errors import ConfigError, ProviderError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.oci import OciProvider, retry_token
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action
from tests.cloud_emulators import LOST, OciCloud, Reply, oci_config, oci_key


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return oci_key(tmp_path_factory.mktemp("oci-key"))


@pytest.fixture
def oci(key: tuple[Path, str]) -> Iterator[OciCloud]:
    with OciCloud(key[1]) as cloud:
        yield cloud


def _provider(oci: OciCloud, key: tuple[Path, str], tmp_path: Path, **extra: Any) -> OciProvider:
    p = make_provider(oci_config(oci, key[0], **extra), state_dir=tmp_path)
    assert isinstance(p, OciProvider)
    return p


def _finish(p: OciProvider, k: str, polls: int = 10) -> Any:
    for _ in range(polls):
        op = p.status(k)
        assert op is not None
        if op.finished:
            return op
    return op


def test_reboot_is_a_softreset_under_a_retry_token_from_the_key(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    op = p.submit("gpu01", Action.REBOOT, "r-o1:act:0")
    assert op.status == "running" and "SOFTRESET" in op.detail and "STOPPING" in op.detail
    done = _finish(p, "r-o1:act:0")
    assert done.status == "succeeded" and inst.id in done.detail
    assert oci.executed == [("SOFTRESET", inst.id)]
    (path, headers), = oci.posts()
    assert path.endswith(f"/instances/{inst.id}?action=SOFTRESET")
    assert headers["opc-retry-token"] == retry_token("r-o1:act:0", "SOFTRESET")
    assert p.submit("gpu01", Action.REBOOT, "r-o1:act:0").id == op.id  # SPEC S6
    assert len(oci.posts()) == 1


def test_power_cycle_is_a_reset(oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    p.submit("gpu01", Action.POWER_CYCLE, "r-o2:act:0")
    assert _finish(p, "r-o2:act:0").status == "succeeded"
    assert oci.executed == [("RESET", inst.id)]


def test_slurms_instance_id_is_the_instance(oci: OciCloud, key: tuple[Path, str],
                                           tmp_path: Path) -> None:
    """SPEC D11: the instance OCID is the machine; Slurm's InstanceId names it."""
    inst = oci.instance()
    slurm = MemorySlurm([("gpu07", "gpu")], clock=lambda: datetime.now(timezone.utc))
    slurm.set_instance_id("gpu07", inst.id)
    p = make_provider(oci_config(oci, key[0]), slurm=slurm, state_dir=tmp_path)
    assert isinstance(p, OciProvider) and p.instance_id("gpu07") == inst.id
    p.submit("gpu07", Action.REBOOT, "r-o3:act:0")
    assert oci.executed == [("SOFTRESET", inst.id)]
    with pytest.raises(ProviderRefused, match="no instance OCID for gpu08"):
        p.submit("gpu08", Action.REBOOT, "r-o4:act:0")


def test_rebuild_replaces_the_boot_volume_and_follows_the_work_request(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance(image="ocid1.image.oc1.iad.aaaagpuimage")
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    op = p.submit("gpu01", Action.REBUILD, "r-o5:act:0")
    assert op.status == "running" and "work request" in op.detail
    done = _finish(p, "r-o5:act:0")
    assert done.status == "succeeded" and "boot volume replacement" in done.detail
    (path, headers), = oci.posts()
    body = next(b for m, _, _, b in oci.seen if m == "PUT")
    import json

    sent = json.loads(body)["sourceDetails"]
    assert sent == {"sourceType": "image", "imageId": "ocid1.image.oc1.iad.aaaagpuimage",
                    "isPreserveBootVolumeEnabled": False}
    assert headers["opc-retry-token"] == retry_token("r-o5:act:0", "replaceBootVolume")


def test_migrate_is_a_reboot_migration_where_oci_offers_it_else_refused(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    due = oci.instance(maintenance_due="2026-12-09T02:00:00.000Z")
    none_due = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": due.id, "gpu02": none_due.id})
    p.submit("gpu01", Action.MIGRATE, "r-o6:act:0")
    assert _finish(p, "r-o6:act:0").status == "succeeded" and due.host == 2
    body = next(b for m, _, _, b in oci.seen if m == "POST")
    import json

    assert json.loads(body) == {"actionType": "rebootMigrate", "deleteLocalStorage": False}
    with pytest.raises(ProviderRefused, match="no reboot migration .* no maintenance reboot "
                                              "due"):
        p.submit("gpu02", Action.MIGRATE, "r-o7:act:0")
    assert oci.executed == [("REBOOTMIGRATE", due.id)]


# --- faults ----------------------------------------------------------------------------
@pytest.mark.parametrize("lost", [Reply(500, {"code": "InternalServerError", "message":
                                              "Internal error"}), LOST])
def test_a_lost_answer_is_resent_under_the_same_retry_token_and_runs_once(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path, lost: Reply) -> None:
    """SPEC S6: the reset ran and its answer was lost; the resend carries the same
    opc-retry-token and OCI answers it from the first: one reset."""
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    oci.lose["RESET"] = lost
    p.submit("gpu01", Action.POWER_CYCLE, "r-f1:act:0")
    assert _finish(p, "r-f1:act:0").status == "succeeded"
    tokens = [h["opc-retry-token"] for _, h in oci.posts()]
    assert len(tokens) == 2 and len(set(tokens)) == 1
    assert oci.executed == [("RESET", inst.id)]


def test_the_sdk_itself_never_resends(oci: OciCloud, key: tuple[Path, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With the SDK's global retries switched on (OCI_SDK_DEFAULT_RETRY_ENABLED, as a
    site may have set), one try of ours sends one request: the SDK's are off. (Without
    ``NoneRetryStrategy`` the SDK resends the lost reset, and this test fails.)"""
    import oci as sdk

    monkeypatch.setattr(sdk.retry, "GLOBAL_RETRY_STRATEGY", sdk.retry.DEFAULT_RETRY_STRATEGY)
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id}, attempts=1)
    oci.lose["RESET"] = Reply(500, {"code": "InternalServerError", "message": "lost"})
    with pytest.raises(ProviderError, match="gave up after 1 tries.*HTTP 500"):
        p.submit("gpu01", Action.POWER_CYCLE, "r-f2:act:0")
    assert len(oci.posts()) == 1


def test_throttling_waits_as_long_as_retry_after_says(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    sleeps: list[float] = []
    p._sleep = sleeps.append
    busy = Reply(429, {"code": "TooManyRequests", "message": "Too many requests for the "
                       "user"}, {"retry-after": "3"})
    oci.answer_next += [busy, busy]
    p.submit("gpu01", Action.REBOOT, "r-f3:act:0")
    assert sleeps == [3.0, 3.0]
    assert oci.executed == [("SOFTRESET", inst.id)]


def test_a_work_request_that_fails_late_fails_the_operation(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance()
    oci.fail_late.add("replaceBootVolume")
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    p.submit("gpu01", Action.REBUILD, "r-f4:act:0")
    done = _finish(p, "r-f4:act:0")
    assert done.status == "failed" and "FAILED" in done.detail


def test_refused_credentials_are_a_clear_error_and_nothing_runs(
        key: tuple[Path, str], tmp_path: Path) -> None:
    with OciCloud("ocid1.tenancy.oc1..other/ocid1.user.oc1..other/aa:bb") as oci:
        inst = oci.instance()
        p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
        with pytest.raises(ProviderError, match="HTTP 401 NotAuthenticated.*OCI refused the "
                                                "credentials"):
            p.submit("gpu01", Action.REBOOT, "r-f5:act:0")
        assert oci.executed == []


def test_an_instance_in_the_wrong_state_fails_without_a_retry(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    inst.state = "STOPPED"
    op = p.submit("gpu01", Action.REBOOT, "r-f6:act:0")
    assert op.status == "failed" and "409 IncorrectState" in op.detail
    assert len(oci.posts()) == 1


@pytest.mark.parametrize(("cfg", "key_name", "problem"), [
    ({"type": "oci", "auth": "password"}, "provider.auth", "must be \"config_file\""),
    ({"type": "oci", "key_file": "/k.pem"}, "provider.key_file", "never in this file"),
    ({"type": "oci", "config_file": "/nonexistent/oci.config"}, "provider.config_file",
     "cannot use profile 'DEFAULT'"),
    ({"type": "oci", "actions": ["remove"]}, "provider.actions", "'remove' is not one of"),
])
def test_config_names_the_key(cfg: dict[str, object], key_name: str, problem: str,
                              tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=problem) as err:
        make_provider(cfg, state_dir=tmp_path)
    assert err.value.key == key_name


def test_an_instance_principal_is_asked_for_only_at_the_first_call(tmp_path: Path) -> None:
    """`policy check` builds the provider dry, off OCI: the instance principal's signer
    (which asks the instance metadata service) is made at the first call, not here."""
    p = make_provider({"type": "oci", "auth": "instance_principal", "region": "us-ashburn-1",
                       "instances": {"gpu01": "ocid1.instance.oc1.iad.x"}}, state_dir=tmp_path)
    assert isinstance(p, OciProvider) and p.supports(Action.REBOOT)
    assert p._clients is None


def test_a_server_that_never_answers_cannot_hold_a_call_past_the_deadline(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    from slurm_heal.errors import ProviderTimeout
    from tests.cloud_emulators import hang

    inst = oci.instance()
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id}, deadline=1,
                  read_timeout=5)
    oci.answer_next.append(hang(4))
    with pytest.raises(ProviderTimeout, match="deadline of 1s"):
        p.submit("gpu01", Action.REBOOT, "r-f8:act:0")
    assert oci.executed == []


def test_an_action_never_seen_under_way_is_taken_as_done_after_a_while(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    """A reset that fell between two looks (RUNNING at each): done after UNSEEN_WAIT, not
    before, and never sent again."""
    from slurm_heal.providers.oci import UNSEEN_WAIT

    inst = oci.instance()
    now = [1000.0]
    p = _provider(oci, key, tmp_path, instances={"gpu01": inst.id})
    p._clock = lambda: now[0]
    oci.answer_next.append(Reply(200, oci._json(inst)))  # GetInstance before the action
    p.submit("gpu01", Action.REBOOT, "r-o8:act:0")
    oci.finish()
    inst.state = "RUNNING"
    # the answer said STOPPING: seen under way, done at the next look
    assert _finish(p, "r-o8:act:0", polls=1).status == "succeeded"
    running = oci._json(inst)
    oci.answer_next += [Reply(200, running), Reply(200, running), Reply(200, running)]
    p.submit("gpu01", Action.POWER_CYCLE, "r-o9:act:0")  # GET, then the answer: RUNNING
    op = p.status("r-o9:act:0")
    assert op is not None and op.status == "running"
    now[0] += UNSEEN_WAIT
    op = p.status("r-o9:act:0")
    assert op is not None and op.status == "succeeded" and "every look" in op.detail
    # the RESET was answered by the test (RUNNING), not carried out by the local cloud
    assert [a for a, _ in oci.executed] == ["SOFTRESET"]


# --- migrate by terminate and relaunch (migrate_relaunch) --------------------------------
def _relaunching(oci: OciCloud, key: tuple[Path, str], tmp_path: Path, slurm: Any = None,
                 **extra: Any) -> OciProvider:
    cfg = oci_config(oci, key[0], migrate_relaunch=True,
                     compute_cluster_id=extra.pop("compute_cluster_id", None) or oci.cluster(),
                     **extra)
    p = make_provider(cfg, slurm=slurm, state_dir=tmp_path)
    assert isinstance(p, OciProvider)
    return p


def _calls(oci: OciCloud) -> list[str]:
    """The method and path (no query) of every request, in order."""
    return [f"{m} {p.split('?')[0]}" for m, p, _, _ in oci.seen]


def test_migrate_without_a_reboot_migration_terminates_and_relaunches_the_instance(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    """Issue 41: no maintenance reboot due, migrate_relaunch on: everything the new
    instance needs is read first, then TerminateInstance, then LaunchInstance with the
    same details in the compute cluster; the new OCID is the node's machine (D11)."""
    from slurm_heal.extra import HOST_KEY

    old = oci.instance(display_name="gpu07", image="ocid1.image.oc1.iad.aaaagpuimage")
    cluster = oci.cluster()
    slurm = MemorySlurm([("gpu07", "gpu")], clock=lambda: datetime.now(timezone.utc))
    slurm.set_instance_id("gpu07", old.id)
    p = _relaunching(oci, key, tmp_path, slurm, compute_cluster_id=cluster)
    op = p.submit("gpu07", Action.MIGRATE, "r-m1:act:0")
    assert op.status == "running" and "TerminateInstance accepted" in op.detail
    calls = _calls(oci)
    first_write = next(i for i, c in enumerate(calls) if not c.startswith("GET"))
    assert calls[first_write] == f"DELETE /20160918/instances/{old.id}"
    assert {"GET /20160918/vnicAttachments", f"GET /20160918/computeClusters/{cluster}",
            f"GET /20160918/vnics/{old.vnics[0]['id']}"} <= set(calls[:first_write])
    done = _finish(p, "r-m1:act:0")
    assert done.status == "succeeded"
    (_, new_id), = [e for e in oci.executed if e[0] == "LaunchInstance"]
    assert oci.executed == [("TerminateInstance", old.id), ("LaunchInstance", new_id)]
    assert new_id in done.detail and old.id in done.detail and cluster in done.detail
    assert old.state == "TERMINATED" and old.preserved_boot_volume is False
    new = oci.instances[new_id]
    assert new.state == "RUNNING" and new.launched is not None
    sent = new.launched
    assert sent["computeClusterId"] == cluster and sent["displayName"] == "gpu07"
    assert sent["availabilityDomain"] == oci.shape["availabilityDomain"]
    assert sent["compartmentId"] == oci.shape["compartmentId"]
    assert sent["shape"] == "BM.GPU.H100.8" and "shapeConfig" not in sent  # a fixed shape
    assert sent["faultDomain"] == oci.shape["faultDomain"]
    assert sent["metadata"] == oci.shape["metadata"]
    assert sent["launchOptions"]["firmware"] == "UEFI_64"
    assert sent["agentConfig"] == {"isMonitoringDisabled": False}
    assert sent["sourceDetails"] == {"sourceType": "image",
                                     "imageId": "ocid1.image.oc1.iad.aaaagpuimage"}
    vnic = old.vnics[0]
    assert sent["createVnicDetails"] == {
        "subnetId": vnic["subnetId"], "privateIp": vnic["privateIp"],
        "hostnameLabel": "gpu07", "nsgIds": vnic["nsgIds"], "assignPublicIp": False,
        "skipSourceDestCheck": False, "displayName": "gpu07"}
    (_, headers), = [(p_, h) for p_, h in oci.posts() if p_ == "/20160918/instances"]
    assert headers["opc-retry-token"] == retry_token("r-m1:act:0", "LaunchInstance")
    # D11: the node is now the new instance, for the ledger and escalation, and for the
    # provider (Slurm's InstanceId still names the terminated one)
    assert slurm.node("gpu07").extra[HOST_KEY] == {"host": f"instance-{new_id}",
                                                   "previous": f"instance-{old.id}"}
    assert p.instance_id("gpu07") == new_id
    # S6: the same key again answers with the same operation, nothing sent
    before = len(oci.seen)
    assert p.submit("gpu07", Action.MIGRATE, "r-m1:act:0").id == op.id
    assert len(oci.seen) == before


def test_a_restarted_controller_continues_a_relaunch_and_never_terminates_twice(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    """SPEC S6: the controller dies after TerminateInstance; a new provider over the same
    records continues with the launch (display-name mapping finds the new instance)."""
    old = oci.instance(display_name="gpu02")
    cluster = oci.cluster()
    first = _relaunching(oci, key, tmp_path, compute_cluster_id=cluster,
                         compartment_id=oci.shape["compartmentId"], preserve_boot_volume=True)
    assert first.instance_id("gpu02") == old.id
    first.submit("gpu02", Action.MIGRATE, "r-m2:act:0")
    assert oci.executed == [("TerminateInstance", old.id)]
    assert old.preserved_boot_volume is True
    del first  # the controller is gone
    again = _relaunching(oci, key, tmp_path, compute_cluster_id=cluster,
                         compartment_id=oci.shape["compartmentId"], preserve_boot_volume=True)
    done = _finish(again, "r-m2:act:0")
    assert done.status == "succeeded"
    assert [a for a, _ in oci.executed] == ["TerminateInstance", "LaunchInstance"]
    assert [m for m, _, _, _ in oci.seen].count("DELETE") == 1
    new_id = oci.executed[1][1]
    assert again.instance_id("gpu02") == new_id
    assert again.submit("gpu02", Action.MIGRATE, "r-m2:act:0").status == "succeeded"
    assert len(oci.executed) == 2


@pytest.mark.parametrize("lost", [LOST, Reply(500, {"code": "InternalServerError",
                                                    "message": "Internal error"})])
def test_a_lost_launch_answer_is_resent_under_the_same_token_and_one_instance_exists(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path, lost: Reply) -> None:
    """SPEC S6: LaunchInstance ran and its answer was lost; the resend carries the same
    opc-retry-token and is answered with the first instance: one relaunch."""
    old = oci.instance(display_name="gpu03")
    p = _relaunching(oci, key, tmp_path, compartment_id=oci.shape["compartmentId"],
                     attempts=1)
    oci.lose["LaunchInstance"] = lost
    p.submit("gpu03", Action.MIGRATE, "r-m3:act:0")
    with pytest.raises(ProviderError, match="LaunchInstance gpu03: gave up after 1 tries"):
        _finish(p, "r-m3:act:0")  # terminated at the first look, launch answer lost
    done = _finish(p, "r-m3:act:0")  # the next poll resends it
    assert done.status == "succeeded"
    launches = [h["opc-retry-token"] for p_, h in oci.posts() if p_ == "/20160918/instances"]
    assert len(launches) == 2 and set(launches) == {retry_token("r-m3:act:0",
                                                                "LaunchInstance")}
    new = [i for i in oci.instances.values() if i.display_name == "gpu03" and i.id != old.id]
    assert len(new) == 1 and new[0].id in done.detail
    assert [a for a, _ in oci.executed] == ["TerminateInstance", "LaunchInstance"]


@pytest.mark.parametrize(("spoil", "problem"), [
    ("cluster_elsewhere", r"compute cluster .* is ACTIVE in PHX-AD-1, the instance is in"),
    ("cluster_deleted", r"compute cluster .* is DELETED"),
    ("no_vnic", r"found 0 primary VNICs"),
    ("secondary_vnic", r"1 secondary VNICs, which a relaunch would not bring back"),
    ("unknown_cluster", r"GetComputeCluster .*HTTP 404"),
    ("boot_volume", r"does not give the image it boots from .*set \[provider\] image"),
])
def test_a_relaunch_that_cannot_read_what_it_needs_is_refused_and_nothing_is_sent(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path, spoil: str,
        problem: str) -> None:
    inst = oci.instance(display_name="gpu04")
    cluster = {"cluster_elsewhere": lambda: oci.cluster("PHX-AD-1"),
               "cluster_deleted": lambda: oci.cluster(state="DELETED"),
               "unknown_cluster": lambda: "ocid1.computecluster.oc1.iad.gone"}.get(
                   spoil, oci.cluster)()
    if spoil == "no_vnic":
        inst.vnics = []
    if spoil == "boot_volume":  # launched from a volume: no image to launch again from
        inst.image = ""
        inst.fields["sourceDetails"] = {"sourceType": "bootVolume",
                                        "bootVolumeId": "ocid1.bootvolume.oc1.iad.b"}
    if spoil == "secondary_vnic":
        inst.vnics.append(oci._vnic(inst, {"subnetId": "ocid1.subnet.oc1.iad.b"},
                                    primary=False))
    p = _relaunching(oci, key, tmp_path, compute_cluster_id=cluster,
                     compartment_id=oci.shape["compartmentId"])
    with pytest.raises(ProviderRefused, match=problem):
        p.submit("gpu04", Action.MIGRATE, "r-m4:act:0")
    assert oci.executed == [] and oci.posts() == []
    assert all(m == "GET" for m, _, _, _ in oci.seen)
    assert p.status("r-m4:act:0") is None  # nothing recorded either


def test_a_relaunched_instance_that_ends_terminated_fails_with_words(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    old = oci.instance(display_name="gpu05")
    p = _relaunching(oci, key, tmp_path, compartment_id=oci.shape["compartmentId"])
    p.submit("gpu05", Action.MIGRATE, "r-m5:act:0")
    for _ in range(3):  # TERMINATING, TERMINATED: launched
        op = p.status("r-m5:act:0")
        assert op is not None and op.status == "running"
        if "new instance is" in op.detail:
            break
    assert "new instance is" in op.detail
    new_id = oci.executed[-1][1]
    oci.instances[new_id].state = "TERMINATED"  # OCI could not place it
    done = _finish(p, "r-m5:act:0")
    assert done.status == "failed" and "launch it by hand" in done.detail
    assert old.state == "TERMINATED"


def test_a_reboot_migration_is_still_preferred_with_relaunch_on(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    due = oci.instance(display_name="gpu06", maintenance_due="2026-12-09T02:00:00.000Z")
    p = _relaunching(oci, key, tmp_path, compartment_id=oci.shape["compartmentId"])
    p.submit("gpu06", Action.MIGRATE, "r-m6:act:0")
    assert _finish(p, "r-m6:act:0").status == "succeeded"
    assert oci.executed == [("REBOOTMIGRATE", due.id)]


@pytest.mark.parametrize(("cfg", "key_name", "problem"), [
    ({"migrate_relaunch": True, "compute_cluster_id": "ocid1.computecluster.oc1..c",
      "instances": {"gpu01": "ocid1.instance.oc1.iad.x"}}, "provider.instances",
     "this table would name the terminated one"),
    ({"migrate_relaunch": True}, "provider.compute_cluster_id",
     "does not say which compute cluster"),
    ({"compute_cluster_id": "ocid1.computecluster.oc1..c"}, "provider.compute_cluster_id",
     "only with migrate_relaunch = true"),
])
def test_relaunch_config_is_checked(cfg: dict[str, object], key_name: str, problem: str,
                                    tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=problem) as err:
        make_provider({"type": "oci", "auth": "instance_principal", **cfg},
                      state_dir=tmp_path)
    assert err.value.key == key_name


def test_a_relaunch_carries_the_flex_shape_placement_and_platform_but_not_the_host(
        oci: OciCloud, key: tuple[Path, str], tmp_path: Path) -> None:
    """The parts of the Instance that LaunchInstanceDetails takes go over with only the
    keys it takes (a flexible shape's config without the read-only GPU and disk
    descriptions); a placement that pins the old bare-metal host never does."""
    old = oci.instance(shape="VM.Standard.E5.Flex", display_name="cpu01", fields={
        "shapeConfig": {"ocpus": 8.0, "memoryInGBs": 96.0, "vcpus": 16,
                        "baselineOcpuUtilization": "BASELINE_1_1", "gpus": 0,
                        "processorDescription": "4th Gen AMD EPYC", "localDisks": 0},
        "platformConfig": {"type": "AMD_VM", "isSecureBootEnabled": False,
                           "isSymmetricMultiThreadingEnabled": True},
        "clusterPlacementGroupId": "ocid1.clusterplacementgroup.oc1.iad.cpg",
        "capacityReservationId": "ocid1.capacityreservation.oc1.iad.cr",
        "placementConstraintDetails": {"type": "COMPUTE_BARE_METAL_HOST",
                                       "computeBareMetalHostId": "ocid1.computebmh.bad"},
        "freeformTags": {"cluster_name": "hpc"}})
    p = _relaunching(oci, key, tmp_path, compartment_id=oci.shape["compartmentId"])
    p.submit("cpu01", Action.MIGRATE, "r-m7:act:0")
    assert _finish(p, "r-m7:act:0").status == "succeeded"
    (_, new_id), = [e for e in oci.executed if e[0] == "LaunchInstance"]
    sent = oci.instances[new_id].launched
    assert sent is not None and old.state == "TERMINATED"
    assert sent["shapeConfig"] == {"ocpus": 8.0, "memoryInGBs": 96.0, "vcpus": 16,
                                   "baselineOcpuUtilization": "BASELINE_1_1"}
    assert sent["platformConfig"] == {"type": "AMD_VM", "isSecureBootEnabled": False,
                                      "isSymmetricMultiThreadingEnabled": True}
    assert sent["clusterPlacementGroupId"] == "ocid1.clusterplacementgroup.oc1.iad.cpg"
    assert sent["capacityReservationId"] == "ocid1.capacityreservation.oc1.iad.cr"
    assert sent["freeformTags"] == {"cluster_name": "hpc"}
    assert "placementConstraintDetails" not in sent
