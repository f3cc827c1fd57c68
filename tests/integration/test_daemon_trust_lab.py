"""`slurm-heal daemon` as a process on the real Slurm lab, when what it stands on is bad
(issue 22, items 2, 8 and 9): Slurm printing garbage, the metrics port taken, a state
dir it cannot use. Never a traceback, never a crash loop: a skipped cycle, a standby, or
one clear line with the documented exit status.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.heartbeat import read as read_heartbeat
from slurm_heal.providers.simulator import SimulatorServer
from tests.lab import Lab
from tests.reliability.labrig import LabDaemon, policy_toml

pytestmark = [pytest.mark.slurm]


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.0) as server:
        yield server


def _garbage(directory: Path, command: str, answer: str, text: str = "") -> Path:
    """A directory holding ``command`` that prints ``answer`` for ``--json``, runs the
    shell lines ``text`` (the garbage of its text read, issue 26) and runs the real one
    otherwise."""
    real = shutil.which(command)
    assert real is not None, f"{command} is not installed"
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / command
    script.write_text("#!/bin/sh\n"
                      f'for a in "$@"; do [ "$a" = --json ] && {{ echo \'{answer}\'; exit 0; }}; done\n'
                      f'{text}exec {real} "$@"\n')
    script.chmod(0o755)
    return directory


# The text reads' garbage (issue 26): `squeue -h -t all -o FORMAT` answered in the
# format it was given (its separator included) with a job on the host list "gpu[";
# `scontrol show node -o` answered with a line that is no node, so the cli backend reads
# the node JSON, which is the JSON garbage.
_SQUEUE_TEXT = ('[ "$1 $2 $3 $4" = "-h -t all -o" ] && { printf \'%s\\n\' "$5" | sed -e s/%A/7/ '
                '-e s/%T/RUNNING/ -e "s/%N/gpu[/" -e "s/%[a-zA-Z]//g"; exit 0; }\n')
_SCONTROL_TEXT = '[ "$*" = "show node -o" ] && { echo State=IDLE; exit 0; }\n'


def _once(d: LabDaemon, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_heal.cli", "daemon", "--config",
                           str(d.config), *extra], env=d.env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("command", "answer", "says"), [
    ("squeue", '{"jobs": [{"job_id": 7, "nodes": "gpu[", "job_state": "RUNNING"}]}',
     "host list"),
    ("nodes", '{"nodes": true}', "not a list"),
])
def test_slurm_garbage_skips_the_cycle_and_never_kills_the_daemon(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer, command: str, answer: str,
        says: str) -> None:
    """Issue 22 item 2 (SPEC I6, O1): `--once` says it in one line, exit 3; a running
    daemon skips each cycle, logs why, keeps going and stops cleanly on SIGTERM."""
    bin_dir, text = tmp_path / "bin", _SQUEUE_TEXT if command == "squeue" else ""
    if command == "nodes":  # the node list's JSON: `sinfo --json` on 22.05, from 23.02 on
        command = "sinfo" if lab_clean.slurm == "22.05" else "scontrol"  # `scontrol --json`
        text = _SCONTROL_TEXT
        if command == "sinfo":
            _garbage(bin_dir, "scontrol", "{}", _SCONTROL_TEXT)
            text = ""
    d = LabDaemon(lab_clean, tmp_path, sim,
                  path_prefix=_garbage(bin_dir, command, answer, text))
    out = _once(d, "--once")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert says in out.stderr and "slurm-heal: error:" in out.stderr
    proc = d.start()
    beat = d.state_dir / "heartbeat"
    d.wait(lambda: (h := read_heartbeat(beat)) is not None and h.failures_since_success >= 3,
           "three skipped cycles")
    assert proc.poll() is None, d.logs()
    assert d.stop(proc) == 0
    logs = d.logs()
    assert "cycle skipped" in logs and says in logs and "Traceback" not in logs


def _metrics(d: LabDaemon, port: int) -> None:
    d.config.write_text(d.config.read_text()
                        + f'\n[metrics]\nenabled = true\naddress = "127.0.0.1"\nport = {port}\n')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_standby_and_a_once_beside_the_active_daemon_share_the_metrics_port(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """Issue 22 item 8 (SPEC O4, S6): only the leader serves metrics; a second daemon on
    the same host (the documented standby) waits, `daemon --once` from cron exits 0."""
    d = LabDaemon(lab_clean, tmp_path, sim)
    port = _free_port()
    _metrics(d, port)
    leader = d.start()
    d.wait(lambda: (d.state_dir / "heartbeat").exists(), "the leader's first cycle")
    standby = d.start()
    out = _once(d, "--once")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    d.wait(lambda: "standby" in d.logs(), "the second daemon to say it is the standby")
    assert standby.poll() is None, d.logs()
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert b"slurm_heal_" in resp.read()
    assert d.stop(leader) == 0
    # the standby takes over, metrics port and all
    log = tmp_path / f"daemon-{d.procs.index(standby):03d}.log"
    d.wait(lambda: "metrics on" in log.read_text(), "the standby to lead and serve metrics",
           timeout=60)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert b"slurm_heal_" in resp.read()
    assert d.stop(standby) == 0
    assert "Traceback" not in d.logs()


def test_a_standby_serves_metrics_with_leader_0_over_tls_and_basic_auth(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """Issue 38 (SPEC O4): a standby on a port of its own serves /metrics with
    slurm_heal_leader 0 (its target is up; "no leader" is an alert of its own), here over
    HTTPS with a password from a Prometheus web config file; when the leader goes, the same
    server says 1."""
    import base64
    import ssl
    import urllib.request

    import bcrypt

    from tests.emulators import self_signed

    def leader_value(url: str, ctx: ssl.SSLContext | None = None,
                     auth: str | None = None) -> float:
        req = urllib.request.Request(url)
        if auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            line = next(ln for ln in resp.read().decode().splitlines()
                        if ln.startswith("slurm_heal_leader "))
        return float(line.split()[1])

    d = LabDaemon(lab_clean, tmp_path, sim)
    first, second = _free_port(), _free_port()
    plain = d.config.read_text()
    _metrics(d, first)
    leader = d.start()
    d.wait(lambda: (d.state_dir / "heartbeat").exists(), "the leader's first cycle")
    cert, key = self_signed(tmp_path)
    hashed = bcrypt.hashpw(b"scrape", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n"
                                      f"  key_file: {key}\nbasic_auth_users:\n"
                                      f"  prometheus: {hashed}\n")
    d.config.write_text(plain + f'\n[metrics]\nenabled = true\nport = {second}\n'
                                'web_config = "web.yml"\n')
    standby = d.start()
    log = tmp_path / f"daemon-{d.procs.index(standby):03d}.log"
    d.wait(lambda: "metrics on" in log.read_text(), "the standby to serve metrics")
    assert "standby: slurm_heal_leader 0" in log.read_text()
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{second}/metrics"
    assert leader_value(url, ctx, "prometheus:scrape") == 0
    assert leader_value(f"http://127.0.0.1:{first}/metrics") == 1
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as refused:
        leader_value(url, ctx)
    assert refused.value.code == 401
    assert d.stop(leader) == 0
    d.wait(lambda: "slurm_heal_leader 1 from now on" in log.read_text(),
           "the standby to lead", timeout=60)
    assert leader_value(url, ctx, "prometheus:scrape") == 1
    assert d.stop(standby) == 0
    assert "Traceback" not in d.logs()


def test_a_metrics_port_taken_by_another_program_leaves_the_controller_running(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """Issue 34 item 4 (SPEC O1, S6; was issue 22 item 8's exit 2): another program holds
    the metrics port when this controller leads (as when a daemon takes over). It still
    cycles; the problem is logged once with the port's key, shown by
    `status` from the heartbeat, and tried again before each cycle until the port is
    free, when metrics are served and the problem goes."""
    import json
    import urllib.request

    d = LabDaemon(lab_clean, tmp_path, sim)
    port = _free_port()
    _metrics(d, port)
    beat = d.state_dir / "heartbeat"
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", port))  # another program holds the port: the daemon leads
        taken.listen()                   # (no other controller) and cannot bind it
        daemon = d.start()
        log = tmp_path / f"daemon-{d.procs.index(daemon):03d}.log"
        d.wait(lambda: (h := read_heartbeat(beat)) is not None and h.pid == daemon.pid
               and h.problems and h.cycles >= 3, "three cycles of the new leader")
        assert daemon.poll() is None, d.logs()
        h = read_heartbeat(beat)
        assert h is not None and not h.failing and "metrics.port" in h.problems[0]
        assert log.read_text().count("cannot be served") == 1  # logged once, not per try
        out = subprocess.run([sys.executable, "-m", "slurm_heal.cli", "status", "--json"],
                             env=dict(d.env, SLURM_HEAL_CONFIG=str(d.config)),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode in (0, 1), out.stdout + out.stderr
        said = json.loads(out.stdout)
        assert any(f"{port}" in p for p in said["controller"]["problems"]), said["controller"]
    finally:
        taken.close()
    d.wait(lambda: "metrics served again" in log.read_text(), "the retry to bind", timeout=60)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert b"slurm_heal_" in resp.read()
    d.wait(lambda: (h := read_heartbeat(beat)) is not None and not h.problems,
           "the problem to leave the heartbeat")
    assert d.stop(daemon) == 0
    assert "Traceback" not in d.logs()


def test_a_once_with_the_metrics_port_taken_still_runs_its_cycle(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer) -> None:
    """Issue 34 item 4: `daemon --once` from cron, the port held by another program: the
    cycle runs (exit 0, a heartbeat of success) and the problem is one clear line."""
    d = LabDaemon(lab_clean, tmp_path, sim)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        _metrics(d, taken.getsockname()[1])
        out = _once(d, "--once")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "cannot be served" in out.stderr and "metrics.port" in out.stderr
    h = read_heartbeat(d.state_dir / "heartbeat")
    assert h is not None and h.last_success is not None and not h.failing and h.problems


@pytest.mark.parametrize("where", ["a file", "under a file", "in /proc"])
def test_a_state_dir_it_cannot_use_is_exit_5_for_the_daemon_and_policy_check(
        lab_clean: Lab, tmp_path: Path, sim: SimulatorServer, where: str) -> None:
    """Issue 22 item 9: a state_dir that is a file, or cannot be created (under a file,
    in /proc where not even root writes): the daemon and `policy check` exit 5 with one
    line naming it, never a traceback nor "OK"."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory\n")
    bad = {"a file": blocker, "under a file": blocker / "state",
           "in /proc": Path("/proc/slurm-heal-state")}[where]
    d = LabDaemon(lab_clean, tmp_path, sim)
    d.config.write_text(policy_toml(bad, lab_clean.conf, sim.url))
    for argv in (["daemon", "--config", str(d.config), "--once"],
                 ["policy", "check", str(d.config), "--no-slurm"]):
        out = subprocess.run([sys.executable, "-m", "slurm_heal.cli", *argv], env=d.env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 5, (argv, out.stdout + out.stderr)
        assert "Traceback" not in out.stderr
        assert str(bad) in out.stderr and "state_dir" in out.stderr
