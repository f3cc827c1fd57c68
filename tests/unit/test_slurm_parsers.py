"""The cli backend's parsers against real Slurm 22.05.8 output recorded from the lab
(tests/data/slurm/): a drained node with our reason, one with a foreign reason, one with
Extra JSON, a running and a pending job. SPEC I3, I2, D5."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import SlurmError, SlurmUnreachable
from slurm_heal.extra import KEY, alerts_from_extra, with_key
from slurm_heal.slurm.cli import (
    node_from_json,
    node_from_scontrol,
    parse_scontrol_nodes,
    parse_sinfo_json,
    parse_squeue_json,
)
from slurm_heal.slurm.mapping import parse_slurm_time, state_flags
from slurm_heal.types import NodeInfo

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
UTC = timezone.utc


def _sinfo() -> dict[str, NodeInfo]:
    return {n.name: n for n in parse_sinfo_json((DATA / "sinfo.json").read_text())}


@pytest.fixture
def utc_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """scontrol prints zone-less local time; the goldens were recorded with TZ=UTC."""
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_drained_node_shows_our_reason_its_user_and_time() -> None:
    node = _sinfo()["gpu02"]
    assert node.states == {"IDLE", "DRAIN"} and node.drained
    assert node.reason.startswith("heal: gpu.xid.79 rem=r-3f2a")
    assert node.reason_user == "root"
    assert node.reason_time == datetime(2026, 11, 30, 5, 35, 16, tzinfo=UTC)


def test_foreign_drain_reason_is_kept_verbatim() -> None:
    """SPEC D5: a DRAIN slurm-heal did not set is visible with its own reason."""
    node = _sinfo()["gpu04"]
    assert node.drained and node.reason == "ops: bad fan"


def test_extra_json_is_parsed_and_alerts_come_out_of_it() -> None:
    """SPEC I2: Extra carries our evidence next to a site's own keys."""
    node = _sinfo()["gpu03"]
    assert node.extra is not None and node.extra["site"] == {"rack": "r1"}
    alerts = alerts_from_extra(node.name, node.extra, datetime(2026, 1, 6, tzinfo=UTC))
    assert [a.fault for a in alerts] == ["gpu.xid.79"]
    assert alerts[0].evidence[0].text.startswith("NVRM: Xid")


def test_node_inventory_fields() -> None:
    node = _sinfo()["gpu01"]
    assert node.states == {"MIXED"}
    assert node.partitions == ("gpu",) and node.features == ("lab",)
    assert node.boot_time == datetime(2026, 11, 30, 5, 22, 55, tzinfo=UTC)
    assert node.slurmd_start_time == datetime(2026, 11, 30, 5, 34, 8, tzinfo=UTC)
    assert node.extra == {} and node.reason == "" and node.reason_time is None


def test_scontrol_one_line_form_matches_sinfo_json(utc_local_time: None) -> None:
    """Both read paths of the cli backend give the same nodes."""
    by_json = _sinfo()
    by_scontrol = {n.name: n for n in parse_scontrol_nodes(
        (DATA / "scontrol_show_node.txt").read_text())}
    assert by_scontrol.keys() == by_json.keys()
    for name, node in by_scontrol.items():
        assert node == by_json[name], name


def test_running_job_is_listed_on_its_node_with_expected_end() -> None:
    jobs = parse_squeue_json((DATA / "squeue.json").read_text())
    running = [j for j in jobs if j.state == "RUNNING"]
    assert [(j.job_id, j.nodes, j.name) for j in running] == [(1, ("gpu01",), "train")]
    job = running[0]
    assert job.start_time is not None and job.time_limit_minutes == 30
    assert job.end_time == job.start_time + timedelta(minutes=30)


def test_pending_job_has_no_nodes() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json((DATA / "squeue.json").read_text())}
    assert jobs[2].state == "PENDING" and jobs[2].nodes == () and jobs[2].start_time is None


def test_unreachable_controller_json_is_slurm_unreachable() -> None:
    """22.05: sinfo --json exits 0 with errno -1 and no nodes when nobody answers."""
    text = ('{"meta": {}, "errors": [{"error": "Unspecified error", "errno": -1}], '
            '"nodes": []}')
    with pytest.raises(SlurmUnreachable, match="no Slurm controller answered"):
        parse_sinfo_json(text)


def test_garbage_instead_of_json_names_the_command() -> None:
    with pytest.raises(SlurmError, match="sinfo --json did not print JSON"):
        parse_sinfo_json("slurm_load_node error: boom")


def test_state_flags_from_both_spellings() -> None:
    assert state_flags("IDLE+DRAIN") == {"IDLE", "DRAIN"}
    assert state_flags("DOWN*") == {"DOWN", "NOT_RESPONDING"}
    assert state_flags("idle", ["DRAIN", "REBOOT_REQUESTED"]) == {"IDLE", "DRAIN",
                                                                  "REBOOT_REQUESTED"}


@pytest.mark.parametrize(("text", "flags"), [
    ("DOWN*+DRAIN", {"DOWN", "DRAIN", "NOT_RESPONDING"}),
    ("IDLE*+CLOUD", {"IDLE", "CLOUD", "NOT_RESPONDING"}),
    ("MIXED", {"MIXED"}),
    ("IDLE+DRAIN", {"IDLE", "DRAIN"}),
    ("ALLOCATED+DRAIN", {"ALLOCATED", "DRAIN"}),
    ("DOWN+REBOOT_ISSUED", {"DOWN", "REBOOT_ISSUED"}),
    ("IDLE~+CLOUD", {"IDLE", "CLOUD", "POWERED_DOWN"}),
    ("DOWN^", {"DOWN", "REBOOT_ISSUED"}),
    ("MIXED@", {"MIXED", "REBOOT_REQUESTED"}),
])
def test_a_suffix_marker_on_any_part_is_a_flag_not_part_of_the_state(
        text: str, flags: set[str]) -> None:
    """SPEC I3/D5: ``DOWN*+DRAIN`` (scontrol, pyslurm) is a down node: the ``*`` sits on
    the first part, and a node whose state reads ``DOWN*`` must still be down."""
    got = state_flags(text)
    assert got == flags
    assert ("DOWN" in got) == text.startswith("DOWN")


def test_slurm_times() -> None:
    assert parse_slurm_time(0) is None
    assert parse_slurm_time("Unknown") is None and parse_slurm_time("None") is None
    assert parse_slurm_time("NONE") is None  # squeue's text form on 26.05 (the lab)
    assert parse_slurm_time(1796016175) == datetime(2026, 11, 30, 5, 22, 55, tzinfo=UTC)
    with pytest.raises(SlurmError, match="unexpected Slurm time"):
        parse_slurm_time("yesterday")


def test_reason_with_key_value_text_and_extra_with_spaces(utc_local_time: None) -> None:
    """Free text at the end of a scontrol line is cut from the end, not by splitting
    on spaces (recorded on 22.05.8 with such a reason and Extra)."""
    line = ("NodeName=gpu01 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu  "
            "BootTime=2026-11-30T05:22:55 SlurmdStartTime=2026-11-30T05:34:08 "
            "Reason=a b Port=x c [root@2026-11-30T05:35:25] Comment=hello there "
            'Extra={"k": "v w", "Reason": 1}')
    node = node_from_scontrol(line)
    assert node.reason == "a b Port=x c" and node.reason_user == "root"
    assert node.extra == {"k": "v w", "Reason": 1}
    assert node.states == {"IDLE", "DRAIN"}


def test_a_reason_that_forges_an_extra_is_never_split_on_the_persons_words() -> None:
    """Issue 21 (reason strings are input): 22.05 prints Extra only when it is set, so a
    person's "broken Extra={...}" on a node with no Extra reads as a Reason without
    Slurm's [user@time] followed by an Extra: refused (the caller reads the node
    another way), never taken as check data."""
    forged = ('NodeName=gpu01 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu '
              'BootTime=1764480175 SlurmdStartTime=1764480848 '
              'Reason=broken Extra={"slurm_heal": {"v": 1, "alerts": []}} '
              '[root@1764481000]')
    with pytest.raises(ValueError, match="Reason"):
        node_from_scontrol(forged)
    # ... and with a "[user@time]" of the person's own before the forged field
    with pytest.raises(ValueError, match="after the Reason"):
        node_from_scontrol(forged.replace("Reason=broken ", "Reason=broken [root@1] "))
    # Slurm's own form of both fields still reads
    real = forged.replace("Reason=broken Extra=", "Reason=broken [root@1764481000] Extra=")
    node = node_from_scontrol(real.removesuffix(" [root@1764481000]"))
    assert node.reason == "broken" and node.extra == {"slurm_heal": {"v": 1, "alerts": []}}


def test_set_extra_keeps_foreign_keys_and_refuses_foreign_text() -> None:
    """SPEC I2: we own one key; a site's keys and non-JSON text are never lost."""
    merged = with_key('{"site":{"rack":"r1"}}', KEY, {"v": 1})
    assert '"site":{"rack":"r1"}' in merged and f'"{KEY}":{{"v":1}}' in merged
    assert with_key(merged, KEY, None) == '{"site":{"rack":"r1"}}'
    assert with_key("", KEY, None) == ""
    with pytest.raises(SlurmError, match="non-JSON text"):
        with_key("rack r1, owner bob", KEY, {"v": 1})


def test_the_instance_id_of_slurm_23_11_is_read_by_every_cli_path() -> None:
    """SPEC E1/E3: InstanceId (23.11+) identifies the machine where GPU serials are not
    known; 22.05 has none, which reads as ""."""
    line = ("NodeName=gpu07 Arch=x86_64 State=IDLE Partitions=gpu InstanceId=i-0abc123 "
            "InstanceType=p5.48xlarge BootTime=None SlurmdStartTime=None")
    (node,) = parse_scontrol_nodes(line)
    assert node.instance_id == "i-0abc123"
    assert node_from_json({"name": "gpu07", "instance_id": "i-0abc123"}).instance_id == \
        "i-0abc123"
    assert all(n.instance_id == "" for n in _sinfo().values())
