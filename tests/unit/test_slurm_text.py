"""The text forms of the cli backend's whole-cluster reads (issue 26, SPEC I3, I6): pure
parsing. The answers here are written by hand in the shape Slurm 22.05.8 / 25.11.7 print
(the live comparison with the JSON is tests/contract/test_slurm_text_reads.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from slurm_heal.errors import SlurmError
from slurm_heal.slurm import text

SEP = text.separator()


def _sinfo(*records: tuple[str, ...]) -> str:
    return "\n".join("".join(f + SEP for f in r) for r in records) + "\n"


def _node(name: str, state: str = "idle", reason: str = "none", user: str = "Unknown",
          when: str = "Unknown", extra: str = "(null)", comment: str = "(null)",
          part: str = "gpu", feats: str = "lab") -> tuple[str, ...]:
    return (name, state, reason, user, when, extra, comment, part, feats, "127.0.0.1", name)


def _line(name: str, tail: str = "", os_text: str = "Linux 6.x #1 SMP") -> str:
    return (f"NodeName={name} Arch=x86_64 OS={os_text}  RealMemory=1000 State=IDLE "
            f"Partitions=gpu  BootTime=1796115384 SlurmdStartTime=1796131563 "
            f"LastBusyTime=1796131563 CfgTRES=cpu=2{tail}")


def test_a_separator_is_new_for_each_call_and_fits_both_formats() -> None:
    a, b = text.separator(), text.separator()
    assert a != b
    assert not {"%", ",", " "} & set(a) and not a[0].isdigit()
    assert all(f"{f}:0{a}" in text.sinfo_argv(a)[-1] for f in text.NODE_FIELDS)


def test_nodes_read_free_text_with_spaces_equals_and_json_as_it_is() -> None:
    reason = 'Xid 79 Extra={"x": 1} BootTime is late | %s'
    extra = '{"slurm_heal": {"note": "a b=c Reason=d"}}'
    answer = _sinfo(_node("gpu01", "idle+drain", reason, "root(0)", "1796131563"),
                    _node("gpu02", extra=extra), _node("gpu02", part="debug"))
    nodes = text.nodes_from_text(answer, SEP, "\n".join([
        _line("gpu01", f" Reason={reason} [root@1796131563]"),
        _line("gpu02", f" Extra={extra} InstanceId=i-0abc InstanceType=p5")]) + "\n")
    one, two = nodes
    assert one.name == "gpu01" and one.states == {"IDLE", "DRAIN"}
    assert one.reason == reason and one.reason_user == "root"
    assert one.reason_time == datetime.fromtimestamp(1796131563, tz=timezone.utc)
    assert one.boot_time == datetime.fromtimestamp(1796115384, tz=timezone.utc)
    assert two.extra == {"slurm_heal": {"note": "a b=c Reason=d"}} and two.reason == ""
    assert two.partitions == ("gpu", "debug") and two.instance_id == "i-0abc"
    assert two.features == ("lab",) and two.address == "127.0.0.1"


def test_nodes_come_in_scontrols_order_once_each() -> None:
    answer = _sinfo(_node("gpu02"), _node("gpu01"))
    nodes = text.nodes_from_text(answer, SEP, _line("gpu01") + "\n" + _line("gpu02"))
    assert [n.name for n in nodes] == ["gpu01", "gpu02"]


@pytest.mark.parametrize(("reason", "os_text", "tail"), [
    ("x BootTime=1", "Linux", ""),                           # free text naming a key
    ("x SlurmdStartTime=1", "Linux", ""),
    ("x InstanceId=forged", "Linux", ""),                    # InstanceId is printed late
    ("none", "Linux InstanceId=forged", ""),                 # OS forging an InstanceId
    ("none", "Linux BootTime=1", ""),                        # a key twice
    ("none", "Linux", "\nNodeName=gpu01 BootTime=1 SlurmdStartTime=1"),  # a forged line
    ("none", "Linux", "\nNodeName=gpu09 BootTime=1 SlurmdStartTime=1"),  # a node sinfo lacks
    ("none", "Linux", "\nState=IDLE"),                       # a line that is no node
])
def test_scontrol_text_that_could_be_forged_is_ambiguous(reason: str, os_text: str,
                                                         tail: str) -> None:
    answer = _sinfo(_node("gpu01", "idle+drain", reason, "root(0)", "1796131563"))
    shown = f" Reason={reason} [root@1796131563]" if reason != "none" else ""
    with pytest.raises(text.Ambiguous):
        text.nodes_from_text(answer, SEP, _line("gpu01", shown + tail, os_text))


def test_a_node_sinfo_lists_and_scontrol_does_not_is_ambiguous() -> None:
    with pytest.raises(text.Ambiguous, match="sinfo lists 2 nodes, scontrol 1"):
        text.nodes_from_text(_sinfo(_node("gpu01"), _node("gpu02")), SEP, _line("gpu01"))


@pytest.mark.parametrize(("answer", "says"), [
    ('{"nodes": true}', "does not read"),
    ("gpu01" + SEP + "idle" + SEP + "\n", "printed 2 fields, not records of 11"),
])
def test_malformed_sinfo_text_is_a_slurm_error_naming_it(answer: str, says: str) -> None:
    with pytest.raises(SlurmError, match=says) as caught:
        text.nodes_from_text(answer, SEP, _line("gpu01"))
    assert "sinfo -N -O" in str(caught.value)


def test_a_node_name_that_is_no_name_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="node name"):
        text.nodes_from_text(_sinfo(_node("gpu[01")), SEP, _line("gpu[01"))


@pytest.mark.parametrize(("limit", "minutes"), [
    ("1:30:00", 90), ("30:00", 30), ("45", 45), ("2-00:00:00", 2880), ("1-02:03:00", 1563),
    ("2-12", 3600), ("UNLIMITED", None), ("NOT_SET", None), ("", None)])
def test_time_limits_read_as_minutes(limit: str, minutes: int | None) -> None:
    assert text.limit_minutes(limit) == minutes


def test_a_time_limit_that_does_not_read_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="time limit"):
        text.limit_minutes("an hour")


def test_jobs_read_a_name_with_spaces_and_separators_of_another_call() -> None:
    name = 'train x=1 | %j {"a": 1}\nsecond line'
    answer = _sinfo(("17", "alice", "RUNNING", "gpu[01-02]", "1796131589", "1796136989",
                     "1:30:00", name),
                    ("18", "1001", "PENDING", "", "N/A", "N/A", "UNLIMITED", "p"))
    running, pending = text.jobs_from_text(answer, SEP)
    assert running.job_id == 17 and running.user == "alice" and running.name == name
    assert running.nodes == ("gpu01", "gpu02") and running.time_limit_minutes == 90
    assert running.end_time == datetime.fromtimestamp(1796136989, tz=timezone.utc)
    assert pending.nodes == () and pending.start_time is None and pending.user == "1001"
    assert pending.time_limit_minutes is None


@pytest.mark.parametrize(("answer", "says"), [
    ("x7" + SEP * 8 + "\n", "squeue -o printed a job id that is no number"),
    ("7" + SEP + "a" + SEP + "RUNNING" + SEP + "gpu[" + SEP * 5 + "\n",
     r"host list slurm-heal cannot read: 'gpu\['"),
    ("Unable to contact\n", "squeue -o printed text slurm-heal does not read"),
])
def test_malformed_squeue_text_is_a_slurm_error_naming_it(answer: str, says: str) -> None:
    with pytest.raises(SlurmError, match=says):
        text.jobs_from_text(answer, SEP)
