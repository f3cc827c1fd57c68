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


def _line(name: str, tail: str = "", os_text: str = "Linux 6.x #1 SMP",
          state: str = "IDLE") -> str:
    return (f"NodeName={name} Arch=x86_64 AvailableFeatures=lab NodeAddr=127.0.0.1 "
            f"NodeHostName={name} OS={os_text}  RealMemory=1000 State={state} "
            f"Partitions=gpu  BootTime=1796115384 SlurmdStartTime=1796131563 "
            f"LastBusyTime=1796131563 CfgTRES=cpu=2{tail}")


def test_a_separator_is_new_for_each_call_and_fits_both_formats() -> None:
    a, b = text.separator(), text.separator()
    assert a != b
    assert not {"%", ",", " "} & set(a) and not a[0].isdigit()
    assert all(f"{f}:0{a}" in text.sinfo_argv(a, "gpu01")[-1] for f in text.NODE_FIELDS)


class Sinfo:
    """`sinfo -N -n NAMES -O` answering ``records``, in the separator it is given."""

    def __init__(self, *records: tuple[str, ...]) -> None:
        self.records = records
        self.asked: list[str] = []

    def __call__(self, sep: str, names: str) -> str:
        self.asked.append(names)
        return "\n".join("".join(f + sep for f in r) for r in self.records) + "\n"


def _no_sinfo(sep: str, names: str) -> str:
    raise AssertionError(f"sinfo asked for {names}")


def test_lines_with_one_free_text_field_are_read_from_scontrol_alone() -> None:
    reason = 'Xid 79 Extra is {"x": 1} | %s = late'
    extra = '{"slurm_heal": {"note": "a b=c | %s"}}'
    one, two = text.nodes_from_text("\n".join([
        _line("gpu01", f" Reason={reason} [root@1796131563]"),
        _line("gpu02", f" Extra={extra}")]) + "\n", _no_sinfo)
    assert one.name == "gpu01" and one.states == {"IDLE"} and one.reason == ""  # not drained
    assert two.extra == {"slurm_heal": {"note": "a b=c | %s"}}
    assert two.partitions == ("gpu",) and two.features == ("lab",)
    assert two.address == "127.0.0.1" and two.hostname == "gpu02"
    assert one.boot_time == datetime.fromtimestamp(1796115384, tz=timezone.utc)
    drained = text.nodes_from_text(_line("gpu01", f" Reason={reason} [root@1796131563]",
                                         state="IDLE+DRAIN"), _no_sinfo)[0]
    assert drained.reason == reason and drained.reason_user == "root"
    assert drained.reason_time == datetime.fromtimestamp(1796131563, tz=timezone.utc)


def test_a_drained_node_with_extra_is_read_from_sinfo_with_its_separator() -> None:
    reason = 'heal: x Extra={"forged": 1}'
    extra = '{"slurm_heal": {"v": 1}}'
    sinfo = Sinfo(_node("gpu02", "idle+drain", reason, "root(0)", "1796131563", extra),
                  _node("gpu02", "idle+drain", reason, "root(0)", "1796131563", extra,
                        part="debug"))
    nodes = text.nodes_from_text("\n".join([
        _line("gpu01"),
        _line("gpu02", f" Reason={reason} [root@1796131563] Extra={extra}",
              state="IDLE+DRAIN")]), sinfo)
    assert sinfo.asked == ["gpu02"]
    assert [n.name for n in nodes] == ["gpu01", "gpu02"]
    got = nodes[1]
    assert got.reason == reason and got.reason_user == "root" and got.drained
    assert got.extra == {"slurm_heal": {"v": 1}} and got.partitions == ("gpu", "debug")
    assert got.boot_time == datetime.fromtimestamp(1796115384, tz=timezone.utc)


@pytest.mark.parametrize(("tail", "os_text"), [
    (' Reason=x Extra={"forged": 1} [root@1796131563]', "Linux"),  # a forged Extra
    (" Reason=x State=DOWN [root@1796131563]", "Linux"),           # a key twice
    (" Reason=x", "Linux"),                                        # no [user@time]
    ("", "Linux Partitions=forged"),                               # = in the OS text
    (" Comment=a Extra={}", "Linux"),                              # two free texts
    # 25.11+ print Topology= and Parameters= after Extra (api/node_info.c): not Extra's
    (' Extra={"slurm_heal": {}} Topology=default:blk1', "Linux"),
    (' Extra={"slurm_heal": {}} Parameters=x', "Linux"),
])
def test_a_line_that_cannot_be_split_for_certain_is_read_from_sinfo(tail: str,
                                                                   os_text: str) -> None:
    sinfo = Sinfo(_node("gpu01"))
    got = text.nodes_from_text(_line("gpu01", tail, os_text), sinfo)[0]
    assert sinfo.asked == ["gpu01"]
    assert got.partitions == ("gpu",) and got.extra_raw == "" and got.states == {"IDLE"}


@pytest.mark.parametrize(("lines", "says"), [
    (_line("gpu01", " Reason=x BootTime=1 [root@1]"), "boot times not once"),
    (_line("gpu01", " Extra={} InstanceId=i-1 InstanceType=p5"), "InstanceId"),
    (_line("gpu01", " Reason=a\nNodeName=gpu01 BootTime=1 SlurmdStartTime=1 [root@1]"),
     "twice"),
    (_line("gpu01", " Reason=a\nState=IDLE [root@1]"), "no node"),
])
def test_scontrol_text_that_could_forge_what_it_reads_is_ambiguous(lines: str,
                                                                   says: str) -> None:
    with pytest.raises(text.Ambiguous, match=says):
        text.nodes_from_text(lines, Sinfo(_node("gpu01")))


def test_too_many_nodes_to_read_through_sinfo_is_ambiguous() -> None:
    lines = "\n".join(_line(f"n{i}", " Comment=a Extra={}") for i in range(501))
    with pytest.raises(text.Ambiguous, match="501 nodes"):
        text.nodes_from_text(lines, _no_sinfo)


def test_sinfo_not_listing_a_node_it_was_asked_for_is_ambiguous() -> None:
    with pytest.raises(text.Ambiguous, match="sinfo lists 0 of 1"):
        text.nodes_from_text(_line("gpu01", " Comment=a Extra={}"), Sinfo())


@pytest.mark.parametrize(("answer", "says"), [
    ('{"nodes": true}', "does not read"),
    ("gpu01SEPidleSEP\n", "printed 2 fields, not records of 11"),
])
def test_malformed_sinfo_text_is_a_slurm_error_naming_it(answer: str, says: str) -> None:
    with pytest.raises(SlurmError, match=says) as caught:
        text.nodes_from_text(_line("gpu01", " Comment=a Extra={}"),
                             lambda sep, names: answer.replace("SEP", sep))
    assert "sinfo -N -O" in str(caught.value)


def test_a_node_sinfo_lists_that_scontrol_does_not_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="does not list"):
        text.nodes_from_text(_line("gpu01", " Comment=a Extra={}"), Sinfo(_node("gpu[01")))


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
