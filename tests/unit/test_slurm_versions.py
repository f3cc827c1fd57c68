"""The cli backend reads every Slurm's JSON, or says it cannot (SPEC I3, I6).

Golden files in tests/data/slurm/ were captured from the real labs: 22.05.8 (`sinfo.json`,
`squeue.json`: OpenAPI v0.0.38) and 25.11.7 (`25.11/`: `scontrol --json show node`,
`squeue --json`, slurmrestd's `/nodes`, data_parser v0.0.44). The backend is run as it runs
in production, as processes: small stand-in `sinfo`/`scontrol`/`squeue` scripts on PATH
print those captures (or a broken answer) and the version a test picks.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import SlurmError, SlurmUnreachable
from slurm_heal.slurm.cli import (
    CliSlurm,
    dialect_for,
    parse_sinfo_json,
    parse_slurm_version,
    parse_squeue_json,
)
from slurm_heal.slurm.mapping import parse_slurm_time

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
NEW = DATA / "25.11"


def _commands(tmp_path: Path, version: str, nodes_json: str, listed: str = "gpu[01-04]",
              jobs_json: str = '{"jobs": [], "errors": []}') -> Path:
    """Stand-in Slurm commands printing fixed answers; returns their directory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "nodes.json").write_text(nodes_json)
    (tmp_path / "jobs.json").write_text(jobs_json)
    scripts = {
        "sinfo": f"""case "$*" in
  --version) echo "slurm {version}";;
  "-h -o %N") echo "{listed}";;
  --json) cat {tmp_path}/nodes.json;;
  *) echo "unexpected sinfo $*" >&2; exit 2;;
esac""",
        "scontrol": f"""case "$*" in
  "--json show node"*) cat {tmp_path}/nodes.json;;
  "show node -o") ;;  # no text answer: the JSON is read (issue 26)
  *) echo "unexpected scontrol $*" >&2; exit 2;;
esac""",
        "squeue": f"cat {tmp_path}/jobs.json",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    def put(version: str, nodes_json: str, **kw: str) -> CliSlurm:
        bin_dir = _commands(tmp_path, version, nodes_json, **kw)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
        return CliSlurm(retries=0)
    return put


def test_slurm_versions_pick_their_dialect() -> None:
    assert parse_slurm_version("slurm 22.05.8\n") == (22, 5)
    assert parse_slurm_version("slurm 25.11.7") == (25, 11)
    assert dialect_for((22, 5)) == "v0.0.38"
    assert dialect_for((23, 2)) == dialect_for((25, 11)) == "data_parser"
    assert dialect_for((26, 5)) == "data_parser"  # newer: the newest we know
    with pytest.raises(SlurmError, match="cannot read a Slurm version"):
        parse_slurm_version("sinfo: command not understood")


def test_time_objects_of_newer_slurm_read_like_epoch_seconds() -> None:
    when = datetime(2026, 1, 5, tzinfo=timezone.utc)
    epoch = int(when.timestamp())
    assert parse_slurm_time({"set": True, "infinite": False, "number": epoch}) == when
    assert parse_slurm_time({"set": False, "infinite": False, "number": 0}) is None
    assert parse_slurm_time({"set": True, "infinite": True, "number": 0}) is None
    assert parse_slurm_time(epoch) == when


def test_25_11_capture_lists_every_node_with_state_lists_read_as_flags() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((NEW / "scontrol_show_node.json").read_text())}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    drained = nodes["gpu02"]
    assert drained.states == {"IDLE", "DRAIN"} and drained.drained
    assert drained.reason == "heal: gpu.xid.79 rem=r-3f2a by=controller cordoned"
    assert drained.reason_user == "root" and drained.reason_time is not None
    assert nodes["gpu01"].states == {"MIXED"}
    assert nodes["gpu03"].extra == {"site": {"rack": "r1"}}
    for n in nodes.values():
        assert n.boot_time is not None and n.partitions == ("gpu",) and n.features == ("lab",)


def test_25_11_rest_capture_reads_like_the_scontrol_one() -> None:
    rest = parse_sinfo_json((NEW / "rest_nodes.json").read_text(), what="slurmrestd")
    cli = parse_sinfo_json((NEW / "scontrol_show_node.json").read_text())
    assert [n.name for n in rest] == [n.name for n in cli]
    assert {n.name: n.states for n in rest} == {n.name: n.states for n in cli}


def test_25_11_job_capture_has_a_running_job_with_its_limit_and_end() -> None:
    jobs = parse_squeue_json((NEW / "squeue.json").read_text())
    running = [j for j in jobs if j.state == "RUNNING"]
    assert len(running) == 1
    job = running[0]
    assert job.nodes == ("gpu01",) and job.user == "root" and job.time_limit_minutes == 10
    assert job.job_id > 0 and job.name == "wrap"
    assert job.start_time is not None and job.end_time is not None
    assert (job.end_time - job.start_time).total_seconds() == 600


def test_the_25_11_commands_list_every_node(on_path) -> None:  # type: ignore[no-untyped-def]
    client = on_path("25.11.7", (NEW / "scontrol_show_node.json").read_text())
    assert [n.name for n in client.nodes()] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert client.node("gpu02").drained
    assert client.version == (25, 11)


def test_the_22_05_commands_still_read_sinfo_json(on_path) -> None:  # type: ignore[no-untyped-def]
    client = on_path("22.05.8", (DATA / "sinfo.json").read_text())
    assert len(client.nodes()) == 4


def test_an_unknown_newer_slurm_is_read_with_the_newest_parser_and_a_warning(
        on_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    client = on_path("26.11.1", (NEW / "scontrol_show_node.json").read_text())
    with caplog.at_level(logging.WARNING, logger="slurm_heal.slurm"):
        assert len(client.nodes()) == 4
        client.nodes()
    warnings = [r.getMessage() for r in caplog.records if "26.11" in r.getMessage()]
    assert len(warnings) == 1 and "(26.05)" in warnings[0]  # asked once, warned once


def test_slurm_26_05_is_a_known_version_read_without_a_warning(
        on_path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """SPEC I6: 26.05 runs live in the matrix, so it is no longer "newer than known"."""
    client = on_path("26.05.3", (NEW / "scontrol_show_node.json").read_text())
    with caplog.at_level(logging.WARNING, logger="slurm_heal.slurm"):
        assert len(client.nodes()) == 4
    assert client.dialect == "data_parser"
    assert not [r for r in caplog.records if "newer than" in r.getMessage()]


def test_zero_nodes_where_slurm_lists_nodes_is_an_error_not_an_empty_cluster(
        on_path) -> None:  # type: ignore[no-untyped-def]
    """The 25.11 bug: `status` printed no nodes and exited 0."""
    client = on_path("26.05.1", json.dumps({"nodes_in_a_new_shape": [], "errors": []}))
    with pytest.raises(SlurmError, match="gave no nodes but Slurm 26.5 lists 4"):
        client.nodes()


def test_a_cluster_with_no_nodes_is_empty(on_path) -> None:  # type: ignore[no-untyped-def]
    client = on_path("25.11.7", json.dumps({"nodes": [], "errors": []}), listed="")
    assert client.nodes() == ()


def test_an_errors_array_is_an_error(on_path) -> None:  # type: ignore[no-untyped-def]
    broken = json.dumps({"nodes": [], "errors": [{"description": "Unable to query nodes",
                                                  "error": "Unable to contact slurm controller",
                                                  "error_number": 1007}]})
    client = on_path("25.11.7", broken)
    with pytest.raises(SlurmUnreachable, match="Unable to query nodes"):
        client.nodes()
    listed = json.loads((NEW / "scontrol_show_node.json").read_text())
    listed["errors"] = [{"description": "partial answer", "error_number": 2}]
    with pytest.raises(SlurmError, match="partial answer"):
        parse_sinfo_json(json.dumps(listed))


def test_a_reason_25_11_keeps_on_a_resumed_node_is_not_reported() -> None:
    """Seen on 25.11.7: after `state=resume` the node is IDLE and still shows its old
    reason; 22.05 clears it. A reason counts only where Slurm reports it (`sinfo -R`:
    down, drained, failing), so a resumed node never looks cordoned by us."""
    data = json.loads((NEW / "scontrol_show_node.json").read_text())
    drained = next(n for n in data["nodes"] if n["name"] == "gpu02")
    drained["state"] = ["IDLE"]
    node = next(n for n in parse_sinfo_json(json.dumps(data)) if n.name == "gpu02")
    assert (node.reason, node.reason_user, node.reason_time) == ("", "", None)
