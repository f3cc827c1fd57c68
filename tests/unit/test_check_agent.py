"""`slurm-heal agent` follows the kernel log (SPEC D1, I1): a record appended to the
replayed /dev/kmsg is marked without waiting for the next full check, and SIGTERM stops
the agent cleanly. Waits are generous bounds, not timing asserts."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.checks import agent, config, runner

XID79 = b"2,601,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
NOISE = b"6,600,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "root"
    (r / "dev").mkdir(parents=True)
    (r / "proc/sys/kernel/random").mkdir(parents=True)
    (r / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (r / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    (r / "dev/kmsg").write_bytes(NOISE)
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(r))
    return r


def _append(root: Path, data: bytes) -> None:
    with (root / "dev/kmsg").open("ab") as fh:
        fh.write(data)


def test_agent_marks_a_new_xid_79_without_waiting_for_the_full_check(root: Path) -> None:
    seen: list[runner.CheckResult] = []
    got = threading.Event()
    stop = threading.Event()

    def emit(result: runner.CheckResult) -> None:
        seen.append(result)
        if any(f.fault == "gpu.xid.79" for f in result.findings):
            got.set()

    t = threading.Thread(target=agent.run_agent, daemon=True, kwargs=dict(
        cfg=config.CheckConfig(), node_name="gpu01", interval=3600.0, dry_run=True,
        emit=emit, stop=stop))
    t.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:  # the first full check
        time.sleep(0.05)
    assert seen and seen[0].findings == []
    _append(root, XID79)
    assert got.wait(15), "the agent did not see the Xid 79 record"
    stop.set()
    t.join(10)
    assert not t.is_alive()


def _readline(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output from the agent"
    line = proc.stdout.readline()
    assert line, "the agent exited"
    result: dict[str, Any] = json.loads(line)
    return result


def test_agent_command_reports_the_fault_and_stops_on_sigterm(root: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path / "nobin") + ":" + os.environ.get("PATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_heal.cli", "agent", "--dry-run", "--json",
         "--interval", "3600", "--node", "gpu01"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        first = _readline(proc, 30)
        assert first["findings"] == [] and first["node"] == "gpu01"
        _append(root, XID79)
        second = _readline(proc, 15)
        assert [f["fault"] for f in second["findings"]] == ["gpu.xid.79"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
