"""The exec provider: operator scripts per action (SPEC L2, S6; house style 6)."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderRefused
from slurm_heal.providers.script import ExecProvider
from slurm_heal.types import Action

DATA = Path(__file__).resolve().parent.parent / "data" / "providers"


def test_script_gets_node_action_and_key_and_success_is_recorded(tmp_path: Path) -> None:
    p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-1:act:0")
    assert op.status == "succeeded"
    assert "ran gpu07 reboot r-1:act:0" in op.detail
    assert "node=gpu07 action=reboot key=r-1:act:0" in op.detail
    assert p.status("r-1:act:0") == op


def test_nonzero_exit_is_a_failed_operation_with_the_output(tmp_path: Path) -> None:
    p = ExecProvider({Action.REBUILD: DATA / "fail.sh"}, state_dir=tmp_path)
    op = p.submit("gpu07", Action.REBUILD, "r-2:act:0")
    assert op.status == "failed"
    assert "exited 3" in op.detail and "BMC did not answer for gpu07" in op.detail


def test_same_key_twice_runs_the_script_once_even_after_a_restart(tmp_path: Path) -> None:
    """SPEC S6: the key record lives in the state dir, so a new provider (a restarted
    controller) does not run the script again."""
    runs = tmp_path / "runs"
    env = {"RUNS_FILE": str(runs)}
    first = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path, env=env)
    op1 = first.submit("gpu07", Action.REBOOT, "r-3:act:0")
    restarted = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path, env=env)
    op2 = restarted.submit("gpu07", Action.REBOOT, "r-3:act:0")
    assert op1 == op2
    assert runs.read_text().split() == ["r-3:act:0"]


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    child_pid_file = tmp_path / "child.pid"
    p = ExecProvider({Action.REBOOT: DATA / "hang.sh"}, state_dir=tmp_path, timeout=0.5,
                     env={"CHILD_PID_FILE": str(child_pid_file)})
    op = p.submit("gpu07", Action.REBOOT, "r-4:act:0")
    assert op.status == "failed" and "ran past 0.5s and was killed" in op.detail
    child = int(child_pid_file.read_text())
    for _ in range(50):  # the kill is sent; give the kernel a moment
        if not _alive(child):
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the script's child {child} survived the timeout")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_an_interrupted_run_is_reported_failed_not_rerun(tmp_path: Path) -> None:
    """A record left 'running' by a dead controller on this host is never re-run (S6)."""
    runs = tmp_path / "runs"
    p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path,
                     env={"RUNS_FILE": str(runs)})
    with p.records.locked() as records:
        records["r-5:act:0"] = {"id": "exec-x", "node": "gpu07", "action": "reboot",
                                "status": "running", "detail": "started", "pid": 2 ** 22 + 1,
                                "hostname": socket.gethostname(),
                                "submitted": datetime.now(timezone.utc).isoformat()}
    op = p.submit("gpu07", Action.REBOOT, "r-5:act:0")
    assert op.status == "failed" and "interrupted" in op.detail
    assert not runs.exists()


def _other_hosts_run(p: ExecProvider, key: str, submitted: datetime) -> None:
    with p.records.locked() as records:
        records[key] = {"id": "exec-y", "node": "gpu07", "action": "reboot",
                        "status": "running", "detail": "reboot.sh started", "pid": os.getpid(),
                        "hostname": "ctl-b.invalid", "submitted": submitted.isoformat()}


def test_another_hosts_run_within_the_script_timeout_is_still_running(tmp_path: Path) -> None:
    """SPEC S6 with two controller replicas sharing the state dir: the second cannot see
    the first host's process, so the first host's run is running, not interrupted, and
    is never started a second time."""
    runs = tmp_path / "runs"
    p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path, timeout=600,
                     env={"RUNS_FILE": str(runs)})
    _other_hosts_run(p, "r-6:act:0", datetime.now(timezone.utc) - timedelta(seconds=5))
    op = p.status("r-6:act:0")
    assert op is not None and op.status == "running"
    assert p.submit("gpu07", Action.REBOOT, "r-6:act:0").status == "running"
    assert not runs.exists()


def test_another_hosts_run_past_the_script_timeout_is_failed_as_lost(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path, timeout=600,
                     env={"RUNS_FILE": str(runs)})
    _other_hosts_run(p, "r-7:act:0", datetime.now(timezone.utc) - timedelta(hours=1))
    op = p.status("r-7:act:0")
    assert op is not None and op.status == "failed"
    assert "interrupted or lost; check the node" in op.detail and "ctl-b.invalid" in op.detail
    assert p.submit("gpu07", Action.REBOOT, "r-7:act:0").status == "failed"
    assert not runs.exists()


def test_action_without_a_script_is_refused(tmp_path: Path) -> None:
    p = ExecProvider({Action.REBOOT: DATA / "ok.sh"}, state_dir=tmp_path)
    assert not p.supports(Action.MIGRATE)
    with pytest.raises(ProviderRefused, match="no script configured for 'migrate'"):
        p.submit("gpu07", Action.MIGRATE, "r-6:act:0")
    assert p.status("r-6:act:0") is None


def test_missing_script_fails_with_its_path(tmp_path: Path) -> None:
    p = ExecProvider({Action.REBOOT: tmp_path / "gone.sh"}, state_dir=tmp_path)
    op = p.submit("gpu07", Action.REBOOT, "r-7:act:0")
    assert op.status == "failed" and "cannot run" in op.detail and "gone.sh" in op.detail
