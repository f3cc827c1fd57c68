"""The aws provider against moto's EC2 server on 127.0.0.1, through a recording proxy
(tests/emulators.py) that counts what reached EC2 and serves the recorded exchange of the
operations moto lacks (CreateReplaceRootVolumeTask, DescribeReplaceRootVolumeTasks).
SPEC L2, E4, S6."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from string import Template

import pytest

from slurm_heal.errors import ConfigError, ProviderError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.aws import AwsProvider, client_token
from slurm_heal.slurm.cli import node_from_json, parse_scontrol_nodes
from slurm_heal.types import Action, NodeInfo
from tests.emulators import DATA, MotoServer, RecordingProxy, aws_env


@pytest.fixture
def ec2(moto_server: MotoServer) -> Iterator[RecordingProxy]:
    with aws_env(), RecordingProxy(moto_server.url) as proxy:
        yield proxy


def _provider(proxy: RecordingProxy, tmp_path: Path, **kw: object) -> AwsProvider:
    p = make_provider({"type": "aws", "region": "us-east-1", "endpoint_url": proxy.url,
                       "backoff": 0.01, **kw}, state_dir=tmp_path)
    assert isinstance(p, AwsProvider)
    return p


def _error(code: str, message: str = "") -> str:
    return Template((DATA / "aws" / "error.xml").read_text()).substitute(
        code=code, message=message or code)


def _state(moto: MotoServer, iid: str) -> str:
    out = moto.ec2().describe_instances(InstanceIds=[iid])
    state: str = out["Reservations"][0]["Instances"][0]["State"]["Name"]
    return state


def _finish(p: AwsProvider, key: str, polls: int = 10) -> str:
    for _ in range(polls):
        op = p.status(key)
        assert op is not None
        if op.finished:
            return op.status
    return "running"


def test_reboot_sends_reboot_instances_once_for_the_mapped_instance(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    op = p.submit("gpu01", Action.REBOOT, "r-a1:act:0")
    assert op.status == "succeeded" and iid in op.detail
    assert p.submit("gpu01", Action.REBOOT, "r-a1:act:0").id == op.id  # SPEC S6
    assert ec2.ec2_calls("RebootInstances", iid) == 1


def test_migrate_stops_then_starts_the_instance_on_other_hardware(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """SPEC L2: stop + start moves an EBS-backed instance; status drives the second step."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    op = p.submit("gpu01", Action.MIGRATE, "r-a2:act:0")
    assert op.status == "running" and "StopInstances" in op.detail
    assert _finish(p, "r-a2:act:0") == "succeeded"
    assert _state(moto_server, iid) == "running"
    assert (ec2.ec2_calls("StopInstances", iid), ec2.ec2_calls("StartInstances", iid)) == (1, 1)
    stop = next(s for s in ec2.seen if s.ec2_action == "StopInstances")
    assert stop.form.get("Force") in (None, ["false"])
    # asked again after it finished: answered from the record, nothing sent
    assert p.submit("gpu01", Action.MIGRATE, "r-a2:act:0").status == "succeeded"
    assert ec2.ec2_calls("StopInstances", iid) == 1


def test_power_cycle_is_a_forced_stop_then_start(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """SPEC E4: cutting the power is EC2's forced stop, then a start."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    p.submit("gpu01", Action.POWER_CYCLE, "r-a3:act:0")
    assert _finish(p, "r-a3:act:0") == "succeeded"
    stop = next(s for s in ec2.seen if s.ec2_action == "StopInstances")
    assert stop.form["Force"] == ["true"]
    assert ec2.ec2_calls("StartInstances", iid) == 1


def test_migrate_of_an_instance_store_root_is_refused_with_the_reason(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = "i-0fedcba9876543210"
    xml = Template((DATA / "aws" / "describe-instances-instance-store.xml").read_text())
    ec2.answer_next.append((200, xml.substitute(instance=iid)))
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    with pytest.raises(ProviderRefused, match="instance-store root device.*cannot stop"):
        p.submit("gpu01", Action.MIGRATE, "r-a4:act:0")
    assert ec2.ec2_calls("StopInstances") == 0
    assert p.status("r-a4:act:0") is None  # nothing recorded: it may be asked again


def test_rebuild_replaces_the_root_volume_from_the_launch_image(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """Recorded exchange (moto lacks CreateReplaceRootVolumeTask): the task carries a
    ClientToken from our key and the instance's launch image; status follows the task."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    op = p.submit("gpu01", Action.REBUILD, "r-a5:act:0")
    assert op.status == "running" and "in-progress" in op.detail
    create = next(s for s in ec2.seen if s.ec2_action == "CreateReplaceRootVolumeTask")
    assert create.form["ClientToken"] == [client_token("r-a5:act:0")]
    assert create.form["ImageId"] == ["ami-12c6146b"]  # the image it was launched from
    assert create.form["DeleteReplacedRootVolume"] == ["true"]
    done = p.status("r-a5:act:0")
    assert done is not None and done.status == "succeeded" and "replacevol-" in done.detail
    assert ec2.ec2_calls("CreateReplaceRootVolumeTask") == 1


def test_rebuild_whose_answer_was_lost_is_resent_with_the_same_client_token(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """SPEC S6: the task was created but its answer lost; the repeat carries the same
    ClientToken and EC2 returns the same task, not a second one."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid}, attempts=1)
    ec2.lose["CreateReplaceRootVolumeTask"] = (503, _error("ServiceUnavailable"))
    with pytest.raises(ProviderError, match="ServiceUnavailable"):
        p.submit("gpu01", Action.REBUILD, "r-a6:act:0")
    assert len(ec2.tasks) == 1  # it did run
    assert _finish(p, "r-a6:act:0") == "succeeded"
    tokens = [s.form["ClientToken"][0] for s in ec2.seen
              if s.ec2_action == "CreateReplaceRootVolumeTask"]
    assert len(tokens) == 2 and len(set(tokens)) == 1
    assert len(ec2.tasks) == 1  # one task, not two


def _inject_for(proxy: RecordingProxy, action: str, status: int, body: str) -> None:
    """Answer the next request for ``action`` with ``status``/``body``; it never reaches
    EC2 (others pass)."""
    proxy.answer_for.setdefault(action, []).append((status, body))


def test_throttling_is_retried_and_the_reboot_reaches_ec2_once(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    _inject_for(ec2, "RebootInstances", 503, _error("RequestLimitExceeded",
                                                    "Request limit exceeded."))
    op = p.submit("gpu01", Action.REBOOT, "r-a7:act:0")
    assert op.status == "succeeded"
    assert ec2.ec2_calls("RebootInstances", iid) == 2  # one throttled, one through


def test_a_throttled_read_is_retried_by_botocore(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    _inject_for(ec2, "DescribeInstances", 503, _error("RequestLimitExceeded"))
    assert p.submit("gpu01", Action.REBOOT, "r-a15:act:0").status == "succeeded"
    assert ec2.ec2_calls("DescribeInstances", iid) == 2


def test_throttled_past_the_last_try_sends_nothing_and_the_next_poll_sends_it(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """Bounded retries: after `attempts` throttled tries the call gives up (the controller
    leaves the attempt in flight); nothing reached EC2, so the next poll sends it."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid}, attempts=2)
    for _ in range(2):
        _inject_for(ec2, "RebootInstances", 503, _error("RequestLimitExceeded"))
    with pytest.raises(ProviderError, match="RequestLimitExceeded.*gave up after 2 tries"):
        p.submit("gpu01", Action.REBOOT, "r-a16:act:0")
    assert ec2.ec2_calls("RebootInstances", iid) == 2 and not ec2.answer_for["RebootInstances"]
    op = p.status("r-a16:act:0")
    assert op is not None and op.status == "succeeded"
    assert ec2.ec2_calls("RebootInstances", iid) == 3  # two throttled, one that ran


def test_a_reboot_whose_answer_was_lost_is_never_sent_again(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """SPEC S6: EC2 keeps no trace of a reboot; an unknown outcome ends failed, once."""
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    ec2.lose["RebootInstances"] = (500, _error("InternalError", "An internal error"))
    op = p.submit("gpu01", Action.REBOOT, "r-a8:act:0")
    assert op.status == "running" and "asking EC2" in op.detail
    done = p.status("r-a8:act:0")
    assert done is not None and done.status == "failed" and "unknown" in done.detail
    assert p.submit("gpu01", Action.REBOOT, "r-a8:act:0").status == "failed"
    assert ec2.ec2_calls("RebootInstances", iid) == 1


def test_a_lost_stop_is_sent_again_only_after_ec2_shows_it_did_not_happen(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    _inject_for(ec2, "StopInstances", 500, _error("InternalError"))
    op = p.submit("gpu01", Action.MIGRATE, "r-a9:act:0")
    assert op.status == "running" and _state(moto_server, iid) == "running"
    assert _finish(p, "r-a9:act:0") == "succeeded"
    stops = [i for i, s in enumerate(ec2.seen) if s.ec2_action == "StopInstances"]
    assert len(stops) == 2
    # between the lost stop and the second one, EC2 was asked for the instance state
    assert any(s.ec2_action == "DescribeInstances" for s in ec2.seen[stops[0] + 1:stops[1]])


def test_a_lost_stop_that_happened_is_not_sent_again(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    ec2.lose["StopInstances"] = (500, _error("InternalError"))
    assert p.submit("gpu01", Action.MIGRATE, "r-a14:act:0").status == "running"
    assert _finish(p, "r-a14:act:0") == "succeeded"
    assert ec2.ec2_calls("StopInstances", iid) == 1
    assert ec2.ec2_calls("StartInstances", iid) == 1


def test_no_capacity_to_start_keeps_it_running_and_starts_at_a_later_poll(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    iid = moto_server.instance()
    p = _provider(ec2, tmp_path, instances={"gpu01": iid})
    _inject_for(ec2, "StartInstances", 500, _error(
        "InsufficientInstanceCapacity", "We currently do not have sufficient p5.48xlarge "
        "capacity in the Availability Zone you requested"))
    p.submit("gpu01", Action.MIGRATE, "r-a10:act:0")
    op = p.status("r-a10:act:0")
    assert op is not None and op.status == "running" and "capacity" in op.detail
    assert _finish(p, "r-a10:act:0") == "succeeded"
    assert ec2.ec2_calls("StartInstances", iid) == 2


def test_unknown_instance_is_refused_and_unmapped_node_names_the_config_key(
        ec2: RecordingProxy, tmp_path: Path) -> None:
    p = _provider(ec2, tmp_path, instances={"gpu01": "i-0123456789abcdef0"})
    with pytest.raises(ProviderRefused, match="InvalidInstanceID"):
        p.submit("gpu01", Action.REBOOT, "r-a11:act:0")
    with pytest.raises(ProviderRefused, match=r"\[provider\] instances"):
        p.submit("gpu02", Action.REBOOT, "r-a12:act:0")


def test_instance_id_comes_from_slurm_instance_id_first(
        ec2: RecordingProxy, moto_server: MotoServer, tmp_path: Path) -> None:
    """Slurm 23.11+ InstanceId (scontrol show node) wins over the config map."""
    iid = moto_server.instance()
    line = (f"NodeName=gpu01 Arch=x86_64 State=IDLE InstanceId={iid} "
            "Partitions=gpu Reason=(null)")
    node = parse_scontrol_nodes(line)[0]
    assert node.instance_id == iid
    assert node_from_json({"name": "gpu01", "instance_id": iid}).instance_id == iid
    assert node_from_json({"name": "gpu01"}).instance_id == ""  # before 23.11

    class OneNode:
        def node(self, name: str) -> NodeInfo:
            return node

    p = AwsProvider(region="us-east-1", endpoint_url=ec2.url, slurm=OneNode(),  # type: ignore[arg-type]
                    instances={"gpu01": "i-0000000000000000"}, state_dir=tmp_path)
    assert p.instance_id("gpu01") == iid
    p.submit("gpu01", Action.REBOOT, "r-a13:act:0")
    assert ec2.ec2_calls("RebootInstances", iid) == 1


def test_credentials_in_the_config_file_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="provider.aws_secret_access_key: AWS credentials"):
        make_provider({"type": "aws", "aws_secret_access_key": "x"}, state_dir=tmp_path)
    with pytest.raises(ConfigError, match="provider.endpoint_url"):
        make_provider({"type": "aws", "endpoint_url": "ec2.local"}, state_dir=tmp_path)


def test_client_token_fits_ec2s_64_characters() -> None:
    assert client_token("r-abc:act:0") == "r-abc:act:0"
    long = client_token("r-" + "x" * 100)
    assert len(long) == 64 and long == client_token("r-" + "x" * 100)
