"""systemd conventions (issue 38): the controller's one unit is ``Type=notify`` with a
watchdog fed by the heartbeat, and `systemd-analyze verify` takes both units as they are
shipped and as `install-controller` writes the controller's.

The notify messages are read from a datagram socket the test binds, as systemd does; the
loop is the real `run_forever` and `Controller` over the in-process `MemorySlurm`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_heal import sdnotify
from slurm_heal.cli import cli
from slurm_heal.controller import LeaderLock, run_forever
from tests.unit.test_liveness import T0, BlindSlurm, _controller

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "contrib" / "systemd"


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A socket bound where $NOTIFY_SOCKET says, in the abstract namespace (a path under
    pytest's tmp_path may pass the 108 bytes a socket's path may have)."""
    name = f"slurm-heal-test-{os.getpid()}-{id(tmp_path)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    yield sock
    sock.close()


def _messages(sock: socket.socket) -> list[list[str]]:
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode().split("\n"))
    except BlockingIOError:
        pass
    finally:
        sock.settimeout(5)
    return out


def test_the_loop_says_ready_then_feeds_the_watchdog_with_each_heartbeat(
        tmp_path: Path, notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "600000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    slurm = BlindSlurm([("gpu01", "a")], clock=lambda: T0)
    ctl = _controller(tmp_path, slurm)
    run_forever(ctl, 0.001, tmp_path / "state" / "heartbeat", max_cycles=2)
    got = _messages(notify_socket)
    assert got[0] == ["READY=1", f"STATUS=started (pid {os.getpid()})"]
    beats = [m for m in got if m[0] == "WATCHDOG=1" and len(m) == 2]
    assert [m[1] for m in beats] == ["STATUS=leading, cycle 1 ok", "STATUS=leading, cycle 2 ok"]
    # a blind cycle still feeds the watchdog (the process is alive; a restart would not
    # make Slurm answer) and says what failed, as the heartbeat does
    slurm.down = True
    run_forever(ctl, 0.001, tmp_path / "state" / "heartbeat", max_cycles=1)
    last = _messages(notify_socket)[-1]
    assert last[0] == "WATCHDOG=1"
    assert last[1].startswith("STATUS=leading, cycle 1: 1 failed in a row: Slurm unavailable")


def test_without_a_watchdog_the_status_is_still_said_and_no_watchdog_message_sent(
        tmp_path: Path, notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    run_forever(_controller(tmp_path, BlindSlurm([("gpu01", "a")], clock=lambda: T0)), 0.001,
                tmp_path / "heartbeat", max_cycles=1)
    got = _messages(notify_socket)
    assert got[0][0] == "READY=1" and got[1] == ["STATUS=leading, cycle 1 ok"]
    assert not any("WATCHDOG=1" in m for m in got)


def test_a_standby_feeds_the_watchdog_while_it_waits_and_says_so(
        tmp_path: Path, notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby runs no cycles for as long as the leader lives; its loop is alive all the
    same, so WATCHDOG=1 goes out every half period (here 0.1 s) while it waits."""
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    ctl = _controller(tmp_path, BlindSlurm([("gpu01", "a")], clock=lambda: T0))
    held = LeaderLock(tmp_path / "state")
    assert held.try_acquire()
    loop = threading.Thread(target=run_forever, args=(ctl, 30.0, tmp_path / "heartbeat"),
                            kwargs={"leader": LeaderLock(tmp_path / "state")})
    loop.start()
    try:
        seen: list[list[str]] = []
        while sum(m == ["WATCHDOG=1"] for m in seen) < 3:
            seen.append(notify_socket.recv(4096).decode().split("\n"))
    finally:
        ctl.stop.set()
        loop.join(10)
        held.release()
    assert seen[0][0] == "READY=1"
    assert seen[1] == [f"STATUS=standby: another controller holds {held.path}"]
    assert not (tmp_path / "heartbeat").exists()  # no cycle ran


def test_sigterm_says_stopping(tmp_path: Path, notify_socket: socket.socket) -> None:
    ctl = _controller(tmp_path, BlindSlurm([("gpu01", "a")], clock=lambda: T0))
    ctl.observers.append(lambda _facts: os.kill(os.getpid(), signal.SIGTERM))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        cycles = run_forever(ctl, 30.0, tmp_path / "heartbeat")
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert cycles == 1
    got = _messages(notify_socket)
    assert ["STOPPING=1", "STATUS=stopping after the current step"] in got


def test_notify_outside_systemd_or_to_a_socket_gone_does_nothing(tmp_path: Path) -> None:
    assert not sdnotify.notify("READY=1", env={})
    assert not sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert not sdnotify.notify("READY=1", env={"NOTIFY_SOCKET": "vsock:2:1234"})
    # a newline in a value would start a field of its own: sent as a space
    path = tmp_path / "n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        assert sdnotify.notify("STATUS=a\nREADY=1", env={"NOTIFY_SOCKET": str(path)})
        assert sock.recv(100) == b"STATUS=a READY=1"


def test_the_watchdog_period_is_this_process_s() -> None:
    pid = str(os.getpid())
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "300000000", "WATCHDOG_PID": pid}) == 300
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "300000000"}) == 300
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "300000000", "WATCHDOG_PID": "1"}) is None
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "x"}) is None
    assert sdnotify.watchdog_seconds({}) is None


def test_the_controller_unit_is_one_notify_unit_with_a_watchdog_and_munge_first() -> None:
    keys: dict[str, list[str]] = {}
    for line in (UNITS / "slurm-heal.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            keys.setdefault(k, []).append(v)
    assert keys["Type"] == ["notify"] and keys["NotifyAccess"] == ["main"]
    watchdog = int(keys["WatchdogSec"][0])
    assert watchdog >= 2 * 60  # well past a cycle (seconds) and the 30 s interval
    assert "munge.service" in keys["After"][0].split()
    assert keys["EnvironmentFile"] == ["-/etc/default/slurm-heal"]
    assert keys["Documentation"][0].startswith("https://")
    assert keys["KillSignal"] == ["SIGTERM"] and int(keys["TimeoutStopSec"][0]) >= 60


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    return subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)


def _here(unit: Path, tmp_path: Path) -> Path:
    """The unit with its program at this installation's slurm-heal (verify checks that
    ExecStart's program exists)."""
    program = Path(sys.executable).with_name("slurm-heal")
    if not os.access(program, os.X_OK):
        pytest.skip(f"no slurm-heal program beside {sys.executable} (pip install -e .)")
    out = tmp_path / unit.name
    out.write_text(unit.read_text().replace("/opt/slurm-heal/bin/slurm-heal", str(program)))
    return out


@pytest.mark.parametrize("name", ["slurm-heal.service", "slurm-heal-agent.service"])
def test_systemd_analyze_verify_takes_the_shipped_units(name: str, tmp_path: Path) -> None:
    done = _verify(_here(UNITS / name, tmp_path))
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_systemd_analyze_verify_refuses_a_misspelled_key(tmp_path: Path) -> None:
    """The check above can fail: systemd-analyze says what it ignores."""
    unit = _here(UNITS / "slurm-heal.service", tmp_path)
    unit.write_text(unit.read_text().replace("Type=notify", "Type=notiffy"))
    assert "Failed to parse service type" in _verify(unit).stderr


def test_systemd_analyze_verify_takes_the_unit_install_controller_writes(
        tmp_path: Path) -> None:
    slurm_conf = tmp_path / "slurm.conf"
    slurm_conf.write_text("ClusterName=test\nSlurmctldHost=head\n")
    prefix, config = tmp_path / "opt", tmp_path / "heal.toml"
    done = CliRunner().invoke(cli, ["install-controller", "--prefix", str(prefix), "--no-venv",
                                    "--slurm-conf", str(slurm_conf), "--config", str(config)])
    assert done.exit_code == 0, done.output
    unit = prefix / "share" / "slurm-heal" / "slurm-heal.service"
    text = unit.read_text()
    # one unit: the package's, with this install's program and slurm.conf
    assert "Type=notify" in text and "WatchdogSec=" in text and "munge.service" in text
    assert f"Environment=SLURM_CONF={slurm_conf}" in text
    assert "/opt/slurm-heal/bin/slurm-heal" not in text
    checked = _verify(unit)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr
