"""The Slurm backends map the same cluster to the same NodeInfo/JobInfo (SPEC I3).

tests/data/slurm/25.11/ and tests/data/pyslurm/25.11/ were captured from the real 25.11.7
lab in one moment (one drained node, one with Extra, one running a job): `scontrol
--json`, `squeue --json`, slurmrestd's `/nodes`, and pyslurm 25.11.2's `Nodes.load()` /
`Jobs.load()` objects (the fields we read). tests/data/pyslurm/*.json (older) are shaped
like pyslurm's objects for the 22.05 capture in tests/data/slurm/. The live contract
tests run every backend on the lab itself.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from slurm_heal.errors import ConfigError, SlurmError
from slurm_heal.slurm import make_client
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.cli import CliSlurm, parse_sinfo_json, parse_squeue_json
from slurm_heal.slurm.pyslurm_backend import (
    PyslurmSlurm,
    config_source,
    job_from_pyslurm,
    node_from_pyslurm,
)

DATA = Path(__file__).resolve().parent.parent / "data"


def _pyslurm_nodes() -> dict[str, Any]:
    return json.loads((DATA / "pyslurm" / "nodes.json").read_text())


def _pyslurm_jobs() -> dict[str, Any]:
    return json.loads((DATA / "pyslurm" / "jobs.json").read_text())


def test_both_backends_map_equivalent_nodes_to_equal_nodeinfo() -> None:
    cli = {n.name: n for n in parse_sinfo_json((DATA / "slurm" / "sinfo.json").read_text())}
    py = {name: node_from_pyslurm(raw) for name, raw in _pyslurm_nodes().items()}
    assert py == cli


def test_both_backends_map_equivalent_jobs_to_equal_jobinfo() -> None:
    cli = parse_squeue_json((DATA / "slurm" / "squeue.json").read_text())
    py = tuple(job_from_pyslurm(raw) for raw in _pyslurm_jobs().values())
    assert py == cli


def test_25_11_captures_of_every_backend_map_to_equal_nodeinfo_and_jobinfo() -> None:
    new, py = DATA / "slurm" / "25.11", DATA / "pyslurm" / "25.11"
    cli = {n.name: n for n in parse_sinfo_json((new / "scontrol_show_node.json").read_text())}
    rest = {n.name: n for n in parse_sinfo_json((new / "rest_nodes.json").read_text())}
    pys = {name: node_from_pyslurm(raw)
           for name, raw in json.loads((py / "nodes.json").read_text()).items()}
    assert pys == cli == rest
    assert cli["gpu02"].drained and cli["gpu03"].extra == {"site": {"rack": "r1"}}
    jobs = parse_squeue_json((new / "squeue.json").read_text())
    pjobs = tuple(job_from_pyslurm(raw)
                  for raw in json.loads((py / "jobs.json").read_text()).values())
    assert pjobs == jobs and jobs[0].nodes == ("gpu01",)


def test_pyslurm_objects_with_attributes_map_like_their_dicts() -> None:
    raw = _pyslurm_nodes()["gpu02"]
    assert node_from_pyslurm(SimpleNamespace(**raw)) == node_from_pyslurm(raw)


class _FakePyslurm:
    """Stand-in for the pyslurm module: serves recorded data, records modify() calls."""

    __version__ = "25.11.0"

    def __init__(self) -> None:
        self.modified: list[tuple[str, dict[str, Any]]] = []
        fake = self

        class Node:
            def __init__(self, name: str | None = None, **changes: Any) -> None:
                self.name, self.changes = name, changes

            def modify(self, changes: Node) -> None:
                fake.modified.append((str(self.name), changes.changes))

        self.signalled: list[tuple[int, str, dict[str, Any]]] = []

        class Job:
            """pyslurm 25.11: ``Job.send_signal(signal, steps="children", hurry=False)``."""

            def __init__(self, job_id: int) -> None:
                self.job_id = job_id

            def send_signal(self, signal: str, steps: str = "children",
                            hurry: bool = False) -> None:
                fake.signalled.append((self.job_id, signal, {"steps": steps, "hurry": hurry}))

        self.Node = Node
        self.Job = Job
        self.Nodes = SimpleNamespace(load=_pyslurm_nodes)
        self.Jobs = SimpleNamespace(load=_pyslurm_jobs)


def test_pyslurm_backend_drains_and_merges_extra_through_node_modify() -> None:
    fake = _FakePyslurm()
    client = PyslurmSlurm(module=fake)
    assert isinstance(client, SlurmClient)
    client.drain("gpu01", "heal: gpu.xid.79")
    client.set_extra("gpu03", "slurm_heal", None)
    client.resume("gpu01")  # MIXED, not drained: nothing to do
    assert fake.modified[0] == ("gpu01", {"state": "DRAIN", "reason": "heal: gpu.xid.79"})
    name, changes = fake.modified[1]
    assert name == "gpu03" and json.loads(changes["extra"]) == {"site": {"rack": "r1"}}
    assert len(fake.modified) == 2
    assert [j.job_id for j in client.jobs("gpu01")] == [1]


def test_pyslurm_backend_signals_every_step_and_the_batch_shell() -> None:
    """SPEC P3 (signal before requeue so jobs can checkpoint), SPEC I3 (both backends
    behave the same): like `scancel --full`, the signal reaches the batch shell too."""
    fake = _FakePyslurm()
    PyslurmSlurm(module=fake).signal_jobs("gpu01", "SIGUSR1")
    # pyslurm 25.11.2 refuses "USR1" ("Invalid Signal", seen live); it takes "SIGUSR1".
    assert fake.signalled == [(1, "SIGUSR1", {"steps": "all", "hurry": False})]


def test_unknown_backend_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="auto, cli, pyslurm, rest"):
        make_client("slurmrestd")


def test_auto_picks_cli_where_pyslurm_is_not_installed() -> None:
    if importlib.util.find_spec("pyslurm") is not None:
        pytest.skip("pyslurm is installed here (the lab tests cover auto with it)")
    assert isinstance(make_client("auto"), CliSlurm)
    with pytest.raises(SlurmError, match="import pyslurm failed"):
        make_client("pyslurm", slurm_conf=str(DATA / "slurm" / "sinfo.json"))


def test_pyslurm_backend_names_a_missing_configuration_before_libslurm_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libslurm fatal()s (ends the process) without a configuration: we check first."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    with pytest.raises(SlurmError, match="slurm.conf not found: .*nowhere.conf"):
        make_client("pyslurm", slurm_conf=str(tmp_path / "nowhere.conf"))
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    with pytest.raises(SlurmError, match="gone.conf .from SLURM_CONF"):
        config_source(None)


def test_status_through_pyslurm_without_a_configuration_is_our_one_line_error(
        tmp_path: Path) -> None:
    """Seen with pyslurm installed: libslurm's `fatal: Could not establish a
    configuration source` ended the whole process (exit 1). The check comes first."""
    import subprocess
    import sys

    missing = tmp_path / "no-such" / "slurm.conf"
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "status", "--backend",
                           "pyslurm", "--slurm-conf", str(missing)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 3, lines
    assert len(lines) == 1 and f"slurm.conf not found: {missing}" in lines[0]
    assert "fatal" not in lines[0]
