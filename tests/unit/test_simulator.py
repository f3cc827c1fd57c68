"""The provider simulator: its HTTP API, control endpoints, Nova quirks and the lab hook
(SPEC L2, V1, S6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from slurm_heal.providers.simulator import LabHook, SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action

DATA = Path(__file__).resolve().parent.parent / "data" / "providers"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.05) as server:
        yield server


def _create(sim: SimulatorServer, node: str, body: object, key: str | None = "k1"
            ) -> requests.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return requests.post(f"{sim.url}/v1/nodes/{node}/actions", json=body, headers=headers,
                         timeout=5)


def test_port_zero_reports_the_real_port(sim: SimulatorServer) -> None:
    assert sim.port > 0 and sim.url == f"http://127.0.0.1:{sim.port}"


def test_create_is_201_then_200_for_the_same_key(sim: SimulatorServer) -> None:
    first = _create(sim, "gpu07", {"action": "reboot"})
    second = _create(sim, "gpu07", {"action": "reboot"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["operation"]["id"] == second.json()["operation"]["id"]
    assert requests.get(f"{sim.url}/_sim/stats", timeout=5).json()["executed"] == {"k1": 1}


@pytest.mark.parametrize(("body", "key", "problem"), [
    ({"action": "reboot"}, None, "Idempotency-Key header is required"),
    ({"action": "remove"}, "k", "action must be one of"),
    ({}, "k", "action must be one of"),
])
def test_bad_creates_are_400_with_a_message(sim: SimulatorServer, body: object,
                                            key: str | None, problem: str) -> None:
    resp = _create(sim, "gpu07", body, key)
    assert resp.status_code == 400
    assert problem in resp.json()["error"]["message"]
    assert sim.stats()["executed"] == {}


def test_unknown_operation_is_404(sim: SimulatorServer) -> None:
    resp = requests.get(f"{sim.url}/v1/operations/op-nope", timeout=5)
    assert resp.status_code == 404


def test_operation_goes_pending_running_succeeded(sim: SimulatorServer) -> None:
    op = _create(sim, "gpu07", {"action": "rebuild"}).json()["operation"]
    assert op["status"] in ("pending", "running")
    assert sim.wait_idle(5)
    got = requests.get(f"{sim.url}/v1/operations/{op['id']}", timeout=5).json()["operation"]
    assert got["status"] == "succeeded"
    by_key = requests.get(f"{sim.url}/v1/operations", params={"idempotency_key": "k1"},
                          timeout=5).json()["operations"]
    assert [o["id"] for o in by_key] == [op["id"]]


def test_faults_endpoint_rejects_unknown_faults(sim: SimulatorServer) -> None:
    resp = requests.post(f"{sim.url}/_sim/faults", json={"meteor": 1}, timeout=5)
    assert resp.status_code == 400 and "unknown fault 'meteor'" in resp.text
    ok = requests.post(f"{sim.url}/_sim/faults", json={"error_5xx": 2}, timeout=5)
    assert ok.json()["faults"]["error_5xx"] == 2
    assert _create(sim, "gpu07", {"action": "reboot"}).status_code == 503
    assert _create(sim, "gpu07", {"action": "reboot"}).status_code == 503
    assert _create(sim, "gpu07", {"action": "reboot"}).status_code == 201


def test_hook_failure_fails_the_operation(sim: SimulatorServer) -> None:
    def broken(node: str, action: Action, op: object) -> str:
        raise RuntimeError("BMC unreachable")

    sim.on_action = broken
    _create(sim, "gpu07", {"action": "reboot"})
    assert sim.wait_idle(5)
    [op] = sim.operations()
    assert op["status"] == "failed" and "BMC unreachable" in op["detail"]


def test_migrate_gives_a_new_host_and_sends_the_old_one_to_validation(
        sim: SimulatorServer) -> None:
    """SPEC L2/V1: the node moves to other hardware; the vacated host is validated."""
    before = sim.host_of("gpu07")
    _create(sim, "gpu07", {"action": "migrate"})
    assert sim.host_of("gpu07") != before
    hosts = requests.get(f"{sim.url}/v1/validation", timeout=5).json()["hosts"]
    assert [(h["host"], h["node"]) for h in hosts] == [(before, "gpu07")]


def test_nova_refuses_an_action_while_the_server_is_busy(sim: SimulatorServer) -> None:
    auth = requests.post(f"{sim.url}/v3/auth/tokens", timeout=5, json={"auth": {"identity": {
        "methods": ["password"], "password": {"user": {"name": "u", "password": "p"}}}}})
    token = auth.headers["X-Subject-Token"]
    compute = auth.json()["token"]["catalog"][0]["endpoints"][0]["url"]
    hdrs = {"X-Auth-Token": token}
    [server] = requests.get(f"{compute}/servers", params={"name": "^gpu07$"}, headers=hdrs,
                            timeout=5).json()["servers"]
    url = f"{compute}/servers/{server['id']}/action"
    sim.duration = 5.0  # keep it busy
    assert requests.post(url, json={"reboot": {"type": "HARD"}}, headers=hdrs,
                         timeout=5).status_code == 202
    busy = requests.post(url, json={"reboot": {"type": "HARD"}}, headers=hdrs, timeout=5)
    assert busy.status_code == 409
    state = requests.get(f"{compute}/servers/{server['id']}", headers=hdrs,
                         timeout=5).json()["server"]
    assert state["status"] == "HARD_REBOOT"
    assert requests.get(f"{compute}/servers", headers={}, timeout=5).status_code == 401


def test_lab_hook_reboots_wipes_scratch_and_records_the_new_host(tmp_path: Path) -> None:
    """Lab mode: reboot runs `lab --dir DIR reboot NODE`; rebuild wipes scratch first;
    migrate writes the new host identity into the node's Extra."""
    log = tmp_path / "lab.log"
    os.environ["LAB_LOG"] = str(log)
    scratch = tmp_path / "scratch" / "gpu07"
    (scratch / "sub").mkdir(parents=True)
    (scratch / "ckpt.bin").write_text("x")
    (scratch / "sub" / "y").write_text("y")
    cluster = MemorySlurm([("gpu07", "gpu")], clock=lambda: datetime.now(timezone.utc))
    hook = LabHook(tmp_path / "lab", scratch_root=tmp_path / "scratch", slurm=cluster,
                   lab_command=DATA / "fake_lab.sh")
    try:
        with SimulatorServer(port=0, duration=0, on_action=hook) as sim:
            _create(sim, "gpu07", {"action": "reboot"}, "a")
            assert sim.wait_idle(5)
            assert (scratch / "ckpt.bin").exists()  # reboot keeps local data (L2)
            _create(sim, "gpu07", {"action": "rebuild"}, "b")
            assert sim.wait_idle(5)
            assert scratch.is_dir() and list(scratch.iterdir()) == []
            _create(sim, "gpu07", {"action": "migrate"}, "c")
            assert sim.wait_idle(5)
            assert [o["status"] for o in sim.operations()] == ["succeeded"] * 3
    finally:
        del os.environ["LAB_LOG"]
    assert log.read_text().splitlines() == [f"--dir {tmp_path / 'lab'} reboot gpu07"] * 3
    extra = json.loads(cluster.node("gpu07").extra_raw)
    assert extra["slurm_heal_host"] == {"host": sim.host_of("gpu07"),
                                        "previous": "host-gpu07"}


def test_simulator_command_prints_its_url_and_serves() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", "simulator", "--port",
                             "0", "--duration", "0"], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("slurm-heal simulator listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert requests.get(f"{url}/_sim/stats", timeout=5).json()["executed"] == {}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
