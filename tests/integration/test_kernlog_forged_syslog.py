"""Issue 34 item 1 (SPEC D1, P1), black-box: an unprivileged user's `logger` call with a
fault's text, written by a real rsyslogd into a real syslog file, is no kernel event for
the node check reading that file (`[kernel_log] source = "file"`, as docs/checks.md
documents for /var/log/messages and /var/log/syslog).

rsyslogd runs in the foreground with a private configuration: its own socket (imuxsock)
and its own file, in rsyslog's traditional file format (what Debian's and RHEL's
/var/log/syslog and /var/log/messages hold). `logger` runs as `nobody`. The kernel's own
line is appended in the same format beside it, and that one must still drain. Needs
root (to run `logger` as another user) and Debian's rsyslog (`contrib/lab/lab install`
installs it); with CI=true a missing rsyslogd fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.fixture
def rsyslog(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    rsyslogd = shutil.which("rsyslogd") or ("/usr/sbin/rsyslogd"
                                             if Path("/usr/sbin/rsyslogd").exists() else None)
    if rsyslogd is None:
        message = "needs Debian's rsyslog: `contrib/lab/lab install` (apt-get install rsyslog)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and this test {message}", pytrace=False)
        pytest.skip(message)
    if os.geteuid() != 0:
        pytest.skip("needs root: `logger` runs as the unprivileged user nobody")
    # nobody must reach the socket: pytest's own directory is root's alone (0700)
    public = Path(tempfile.mkdtemp(prefix="slurm-heal-syslog-"))
    public.chmod(0o755)
    sock, log = public / "log.sock", tmp_path / "messages"
    conf = tmp_path / "rsyslog.conf"
    conf.write_text(f'global(workDirectory="{tmp_path}")\n'
                    'module(load="imuxsock" SysSock.Use="off")\n'
                    f'input(type="imuxsock" Socket="{sock}")\n'
                    f'*.* action(type="omfile" file="{log}" '
                    'template="RSYSLOG_TraditionalFileFormat")\n')
    proc = subprocess.Popen([rsyslogd, "-n", "-f", str(conf), "-i", str(tmp_path / "pid")],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "err").open("wb"),
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                (tmp_path / "err").read_text())
            time.sleep(0.05)
        sock.chmod(0o666)
        yield sock, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(public, ignore_errors=True)


def _wait_for(path: Path, text: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = path.read_text(errors="replace") if path.exists() else ""
        if text in body:
            return body
        time.sleep(0.05)
    raise AssertionError(f"rsyslogd never wrote {text!r} into {path}")


def _check(tmp: Path, log: Path) -> tuple[int, list[dict[str, object]]]:
    conf = tmp / "check.toml"
    conf.write_text(f'[check]\nstate_dir = "{tmp / "node"}"\n[services]\nenabled = false\n'
                    '[mounts]\nrw = []\n[nvidia]\nenabled = false\n[kernel_log]\n'
                    f'source = "file"\npath = "{log}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_HEAL_ROOT")}
    out = subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--json", "--dry-run",
                          "--node", "gpu07", "--config", str(conf)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout or "[]")


def test_an_unprivileged_loggers_xid_in_a_syslog_file_is_no_kernel_event(
        rsyslog: tuple[Path, Path], tmp_path: Path) -> None:
    """aacb2a0: a critical gpu.xid.79 (drain, then migrate by the catalog). Now nothing,
    and the state counts the program's line; the kernel's line after it still drains."""
    sock, log = rsyslog
    subprocess.run(["runuser", "-u", "nobody", "--", "logger", "--socket-errors=on",
                    "-u", str(sock), XID], check=True, timeout=30)
    body = _wait_for(log, "NVRM: Xid")
    assert " nobody: NVRM: Xid" in body, body  # the tag logger gives a user's message
    code, findings = _check(tmp_path, log)
    assert [f for f in findings if str(f["fault"]).startswith("gpu.")] == [], findings
    assert code == 0, findings
    state = json.loads(next((tmp_path / "node").glob("*.json")).read_text())
    assert state["kernel_foreign"]["count"] == 1 and "nobody" in state["kernel_foreign"]["last"]
    stamp = body.split(" nobody:", 1)[0].rsplit(" ", 1)[0]  # "Mon DD HH:MM:SS" of rsyslog
    host = body.split(" nobody:", 1)[0].rsplit(" ", 1)[1]
    with log.open("a") as fh:  # the kernel's own line, as rsyslog's imklog writes it
        fh.write(f"{stamp} {host} kernel: [ 1234.567890] {XID}\n")
    code, findings = _check(tmp_path, log)
    assert code == 1 and [f["fault"] for f in findings] == ["gpu.xid.79"], findings
