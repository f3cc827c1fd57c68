"""The cli backend's parsers on real Slurm JSON (tests/data/real/slurm, origins in
tests/data/real/SOURCES.md): 21.08 and 23.02 from a Slurm exporter's test data, 22.05.8
and 25.11.7 and 26.05.3 captured from this project's lab (real slurmctld/slurmd). SPEC I3, I6: every
version's answer is read, or refused with a SlurmError; never an empty cluster."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import SlurmError, SlurmUnreachable
from slurm_heal.slurm import cli
from slurm_heal.types import NodeInfo

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "slurm"


def text(name: str) -> str:
    return (REAL / name).read_text()


def by_name(nodes: tuple[NodeInfo, ...]) -> dict[str, NodeInfo]:
    return {n.name: n for n in nodes}


def test_i6_sinfo_json_of_21_08_is_read_node_by_node() -> None:
    """SPEC I6 on a real 21.08.5 `sinfo --json` (OpenAPI v0.0.37): the node list has
    the 22.05 shape (lower-case base state, ``state_flags``), so all four nodes are read
    with their state, partitions and boot time."""
    nodes = by_name(cli.parse_sinfo_json(text("sinfo-json-21.08.5-rivos.json")))
    assert {name: sorted(n.states) for name, n in nodes.items()} == {
        "cs2.example.company.com": ["MIXED"], "cs3.example.company.com": ["IDLE"],
        "cs4.example.company.com": ["ALLOCATED"], "cs5.example.company.com": ["DOWN"]}
    cs2 = nodes["cs2.example.company.com"]
    assert cs2.partitions == ("hw",) and cs2.reason == ""
    assert cs2.boot_time == datetime.fromtimestamp(1671873827, timezone.utc)
    assert cs2.slurmd_start_time == datetime.fromtimestamp(1685737510, timezone.utc)


def test_i6_squeue_json_of_21_08_reads_plain_and_set_number_time_limits() -> None:
    """SPEC I6 on a real 21.08.5 `squeue --json`: one job's ``time_limit`` is a bare
    number (30240 min), the other's a ``{"set", "infinite", "number"}`` object (1439);
    both are read, and the pending job has no nodes and no end."""
    jobs = {j.job_id: j for j in cli.parse_squeue_json(text("squeue-json-21.08.5-rivos.json"))}
    running, pending = jobs[26515966], jobs[58948420]
    assert (running.state, running.nodes, running.user) == ("RUNNING", ("cs75",), "bkd")
    assert running.time_limit_minutes == 30240
    assert running.end_time == datetime.fromtimestamp(1686633833, timezone.utc)
    assert (pending.state, pending.nodes, pending.time_limit_minutes) == ("PENDING", (), 1439)
    assert pending.start_time is None and pending.end_time is None


@pytest.mark.parametrize("name", ["sinfo-N-json-23.02.5-rivos.json",
                                  "lab-sinfo-json-25.11.json", "lab-sinfo-json-26.05.json"])
def test_i6_a_23_02_plus_sinfo_json_is_refused_not_an_empty_cluster(name: str) -> None:
    """SPEC I6 on real `sinfo --json` of 23.02.5 (data_parser v0.0.39, an exporter's
    fixture) and 25.11.7 (v0.0.44, the lab): from 23.02 `sinfo --json` prints
    partition/node groups (``"sinfo": [...]``), not nodes. The cli backend asks
    `scontrol --json show node` there; fed this document, the parser must say it has
    no node list, not return no nodes."""
    with pytest.raises(SlurmError, match="nodes"):
        cli.parse_sinfo_json(text(name))


def test_i6_22_05_lab_sinfo_json_and_scontrol_o_agree() -> None:
    """SPEC I3, I6 on the 22.05.8 lab (one job running on gpu01, gpu02 drained with a
    reason, gpu03 with a non-JSON Extra): `sinfo --json` and `scontrol show node -o` read
    the same states, reasons and Extra."""
    js = by_name(cli.parse_sinfo_json(text("lab-sinfo-json-22.05.json")))
    line = by_name(cli.parse_scontrol_nodes(text("lab-scontrol-show-node-o-22.05.txt")))
    assert sorted(js) == sorted(line) == ["gpu01", "gpu02", "gpu03"]
    for name in js:
        assert js[name].states == line[name].states, name
        assert js[name].reason == line[name].reason, name
        assert js[name].extra_raw == line[name].extra_raw, name
    assert js["gpu01"].states == frozenset({"MIXED"})
    assert js["gpu02"].states == frozenset({"IDLE", "DRAIN"})
    assert js["gpu02"].reason == "Xid 79: GPU fallen off the bus"
    assert js["gpu02"].reason_user == "root" and js["gpu02"].reason_time is not None
    assert js["gpu03"].extra_raw == "slurm_heal_probe=1"
    assert js["gpu01"].partitions == ("gpu",) and js["gpu01"].features == ("lab",)


@pytest.mark.parametrize("version", ["25.11", "26.05"])
def test_i6_25_11_lab_scontrol_json_and_scontrol_o_agree(version: str) -> None:
    """SPEC I3, I6 on the 25.11.7 and 26.05.3 labs (same set-up): `scontrol --json show
    node` (data_parser v0.0.44 / v0.0.45: state lists, string version numbers) reads like
    the -o line."""
    js = by_name(cli.parse_sinfo_json(text(f"lab-scontrol-json-show-node-{version}.json"),
                                      what="scontrol --json show node"))
    line = by_name(cli.parse_scontrol_nodes(text(f"lab-scontrol-show-node-o-{version}.txt")))
    assert sorted(js) == sorted(line) == ["gpu01", "gpu02", "gpu03"]
    for name in js:
        assert js[name].states == line[name].states, name
        assert js[name].reason == line[name].reason, name
        assert js[name].extra_raw == line[name].extra_raw, name
    gpu02 = js["gpu02"]
    assert gpu02.states == frozenset({"IDLE", "DRAIN"})
    assert (gpu02.reason, gpu02.reason_user) == ("Xid 79: GPU fallen off the bus", "root")
    assert gpu02.reason_time is not None
    # 25.11 names a user where no reason is set; that is no reason.
    assert (js["gpu01"].reason, js["gpu01"].reason_user) == ("", "")
    assert js["gpu03"].extra_raw == "slurm_heal_probe=1"
    assert js["gpu01"].address == "127.0.0.1" and js["gpu01"].hostname == "gpu01"


@pytest.mark.parametrize("name", ["lab-squeue-json-22.05.json", "lab-squeue-json-25.11.json",
                                  "lab-squeue-json-26.05.json"])
def test_i6_lab_squeue_json_reads_the_running_and_the_held_job(name: str) -> None:
    """SPEC I6 on the labs' real `squeue --json` (22.05.8: v0.0.38; 25.11.7: v0.0.44,
    ``job_state`` a list, times as set/number objects): the running job on gpu01 with
    its 30-minute limit and an end 30 minutes after its start; the held one pending."""
    jobs = {j.name: j for j in cli.parse_squeue_json(text(name))}
    run, held = jobs["capture"], jobs["pending"]
    assert (run.state, run.nodes, run.user, run.time_limit_minutes) == (
        "RUNNING", ("gpu01",), "root", 30)
    assert run.start_time is not None and run.end_time is not None
    assert (run.end_time - run.start_time).total_seconds() == 30 * 60
    assert (held.state, held.nodes, held.start_time) == ("PENDING", (), None)


# slurmrestd's /node/<name> and /job/<id> print the node and job objects of the
# data_parser plugins that `scontrol --json show node` and `squeue --json` print.
DRAINED = {
    "slurmrestd-node-drain-23.11-slurmweb.json": ("cn1", 1746621136, 1741793226),
    "slurmrestd-node-drain-24.05-v0.0.41-slurmweb.json": ("cn146", 1747762139, 1741793226),
    "slurmrestd-node-drain-24.11-v0.0.42-slurmweb.json": ("cn4", 1762942786, 1758266697),
    "slurmrestd-node-drain-25.05-v0.0.43-slurmweb.json": ("cn2", 1762942829, 1758266697),
}


@pytest.mark.parametrize("name", sorted(DRAINED))
def test_i6_a_drained_node_of_23_11_to_25_05_is_read(name: str) -> None:
    """SPEC I6 on real data_parser output of Slurm 23.11.10 (v0.0.40), 24.05.3
    (v0.0.41), 24.11.5 (v0.0.42) and 25.05.4 (v0.0.43), the versions between the
    labs' 22.05 and 25.11: a node drained by root for "ECC memory error", its times
    as ``{"set", "infinite", "number"}`` objects."""
    node_name, reason_at, booted = DRAINED[name]
    (node,) = cli.parse_sinfo_json(text(name), what="scontrol --json show node")
    assert node.name == node_name
    assert node.states == frozenset({"IDLE", "DRAIN"})
    assert (node.reason, node.reason_user) == ("ECC memory error", "root")
    assert node.reason_time == datetime.fromtimestamp(reason_at, timezone.utc)
    assert node.boot_time == datetime.fromtimestamp(booted, timezone.utc)


@pytest.mark.parametrize(("name", "job_id", "node", "start"), [
    ("slurmrestd-job-running-23.11-slurmweb.json", 779, "cn1", 1747045583),
    ("slurmrestd-job-running-24.05-v0.0.41-slurmweb.json", 649722, "cn001", 1747754478),
    ("slurmrestd-job-running-24.11-v0.0.42-slurmweb.json", 6368, "cn3", 1762788801),
    ("slurmrestd-job-running-25.05-v0.0.43-slurmweb.json", 4739, "cn1", 1762789062),
])
def test_i6_a_running_job_of_23_11_to_25_05_is_read(name: str, job_id: int, node: str,
                                                      start: int) -> None:
    """SPEC I6 on real job objects of 23.11.10 to 25.05.4: ``job_state`` a list, the
    2-minute limit and the times as set/number objects."""
    (job,) = cli.parse_squeue_json(text(name))
    assert (job.job_id, job.state, job.nodes, job.time_limit_minutes) == (
        job_id, "RUNNING", (node,), 2)
    assert job.start_time == datetime.fromtimestamp(start, timezone.utc)
    assert job.end_time == datetime.fromtimestamp(start + 120, timezone.utc)


def test_i6_22_05_sinfo_json_with_the_controller_down_is_unreachable() -> None:
    """SPEC I6 on the 22.05.8 lab with slurmctld stopped: `sinfo --json` exits 0 with
    nothing on stderr and ``errors: [{"error": "Unspecified error", "errno": -1}]`` and
    no nodes: the controller did not answer, never an empty cluster."""
    with pytest.raises(SlurmUnreachable, match="no Slurm controller answered"):
        cli.parse_sinfo_json(text("lab-sinfo-json-ctld-down-22.05.json"), ["sinfo", "--json"])


def test_i6_22_05_squeue_json_with_the_controller_down_is_unreachable() -> None:
    """SPEC I6 on the same stopped 22.05.8 controller: `squeue --json` exits 0, empty
    stderr, ``errors: [{"description": "Failed while looking for jobs", "error_number":
    -1, ...}]``: the controller did not answer."""
    with pytest.raises(SlurmUnreachable):
        cli.parse_squeue_json(text("lab-squeue-json-ctld-down-22.05.json"), ["squeue", "--json"])


@pytest.mark.parametrize("version", ["25.11", "26.05"])
def test_i6_25_11_scontrol_json_of_an_unknown_node_is_no_node_and_no_error(version: str) -> None:
    """The 25.11.7 lab's `scontrol --json show node nosuch`: exit 0, ``nodes: []``, no
    errors, a warning "No nodes to dump". The parser reads no node (the backend turns
    that into NotFound for `node()`, and cross-checks `sinfo -h -o %N` for `nodes()`)."""
    assert cli.parse_sinfo_json(
        text(f"lab-scontrol-json-show-node-nosuch-{version}.json")) == ()


# issue 35 "keep looking": more of Slurm-web's real slurmrestd captures (its dev
# clusters, 24.05.3 to 25.11.0, data_parser v0.0.41 to v0.0.44), read by the parsers
# `scontrol --json show node` and `squeue --json` output go through.
DOWN = {
    "slurmrestd-node-down-24.05-0.0.41-slurmweb.json": "cn026",
    "slurmrestd-node-down-24.11-0.0.42-slurmweb.json": "cn1",
    "slurmrestd-node-down-25.05-0.0.43-slurmweb.json": "cn1",
    "slurmrestd-node-down-25.11-0.0.43-slurmweb.json": "cn4",
    "slurmrestd-node-down-25.11-0.0.44-slurmweb.json": "cn3",
}


@pytest.mark.parametrize("name", sorted(DOWN))
def test_i6_a_down_node_of_24_05_to_25_11_is_read_with_its_reason(name: str) -> None:
    """SPEC I6, D5 on real node objects of 24.05.3 to 25.11.0: a node set DOWN by
    root for "CPU dead" reads as DOWN with its reason and who set it."""
    (node,) = cli.parse_sinfo_json(text(name), what="scontrol --json show node")
    assert node.name == DOWN[name]
    assert node.states == frozenset({"DOWN"})
    assert (node.reason, node.reason_user) == ("CPU dead", "root")


@pytest.mark.parametrize(("name", "states"), [
    ("slurmrestd-nodes-24.11-0.0.42-slurmweb.json",
     {"cn1": {"IDLE"}, "cn3": {"DOWN"}, "cn4": {"DRAIN", "IDLE"}}),
    ("slurmrestd-nodes-25.05-0.0.43-slurmweb.json",
     {"cn3": {"DRAIN", "IDLE"}, "cn4": {"DOWN"}}),
    ("slurmrestd-nodes-25.11-0.0.43-slurmweb.json",
     {"cn1": {"DOWN"}, "cn4": {"DRAIN", "IDLE"}}),
    ("slurmrestd-nodes-25.11-0.0.44-slurmweb.json",
     {"cn1": {"DRAIN", "IDLE"}, "cn2": {"DOWN"}, "cn3": {"ALLOCATED"}, "cn4": {"MIXED"},
      "gpu1": {"IDLE"}}),
])
def test_i6_the_whole_node_list_of_24_11_to_25_11_is_read(
        name: str, states: dict[str, set[str]]) -> None:
    """SPEC I6 on real ``/nodes`` answers (the ``nodes`` list ``scontrol --json show
    node`` prints): every node, its states and partitions; 25.11's v0.0.44 included."""
    nodes = by_name(cli.parse_sinfo_json(text(name), what="scontrol --json show node"))
    for node, want in states.items():
        assert nodes[node].states == frozenset(want), node
    assert all(n.partitions for n in nodes.values())
    if "25.11-0.0.44" in name:
        assert len(nodes) == 8 and nodes["gpu1"].partitions == ("gpu",)
        assert (nodes["cn1"].reason, nodes["cn1"].reason_user) == ("ECC memory error", "slurm")


@pytest.mark.parametrize(("name", "node", "states"), [
    ("slurmrestd-node-draining-25.11-0.0.44-slurmweb.json", "cn1", {"DRAIN", "MIXED"}),
    ("slurmrestd-node-planned-25.11-0.0.43-slurmweb.json", "gpu1",
     {"COMPLETING", "IDLE", "PLANNED"}),
    ("slurmrestd-node-planned-25.11-0.0.44-slurmweb.json", "gpu2", {"IDLE", "PLANNED"}),
    ("slurmrestd-node-with-gpus-mixed-25.11-0.0.43-slurmweb.json", "gpu3", {"MIXED"}),
    ("slurmrestd-node-with-gpus-mixed-25.11-0.0.44-slurmweb.json", "gpu3", {"MIXED"}),
])
def test_i6_25_11_node_states_draining_planned_and_mixed_are_read(
        name: str, node: str, states: set[str]) -> None:
    """SPEC I6 on real 25.11.0 node objects: a draining node (DRAIN with jobs still on
    it: MIXED), PLANNED nodes (the backfill's reservation), a GPU node partly in use."""
    (got,) = cli.parse_sinfo_json(text(name), what="scontrol --json show node")
    assert (got.name, got.states) == (node, frozenset(states))


@pytest.mark.parametrize(("name", "job_id", "state", "nodes"), [
    ("slurmrestd-job-failed-25.11-0.0.43-slurmweb.json", 5758, "FAILED", ("cn1",)),
    ("slurmrestd-job-failed-25.11-0.0.44-slurmweb.json", 5739, "FAILED", ("cn1",)),
    ("slurmrestd-job-pending-25.11-0.0.43-slurmweb.json", 5769, "PENDING", ()),
    ("slurmrestd-job-pending-25.11-0.0.44-slurmweb.json", 5750, "PENDING", ()),
])
def test_i6_25_11_failed_and_pending_jobs_are_read(name: str, job_id: int, state: str,
                                                   nodes: tuple[str, ...]) -> None:
    """SPEC I6 on real 25.11.0 job objects: a failed job on cn1, a pending one on no
    node (the job objects ``squeue --json`` prints), a 1-minute limit."""
    (job,) = cli.parse_squeue_json(text(name))
    assert (job.job_id, job.state, job.nodes, job.time_limit_minutes) == (
        job_id, state, nodes, 1)
