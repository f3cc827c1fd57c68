"""The test suite's handle on a private Slurm lab (contrib/lab/lab) on 127.0.0.1.

`tests/conftest.py` starts one lab per test session in a temporary directory on free
ports, so the suite never touches a lab the user started. Tests use it through the
`lab` fixture:

    def test_something(lab: Lab) -> None:
        lab.run(["scontrol", "update", f"nodename={lab.nodes[0]}", "state=drain", "reason=x"])
        lab.wait_for(lambda: "DRAIN" in lab.state(lab.nodes[0]), timeout=10)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
LAB_SCRIPT = REPO / "contrib" / "lab" / "lab"
SLURM_BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "sinfo",
                  "scontrol", "squeue", "sbatch")

T = TypeVar("T")


class LabError(RuntimeError):
    """A lab command failed; the message carries argv, exit status and stderr."""


def slurm_missing() -> list[str]:
    """The Slurm/munge programs the lab needs that are not installed."""
    return [b for b in SLURM_BINARIES if shutil.which(b) is None and not Path(b).exists()]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(count: int, start: int = 21000, stop: int = 29000) -> int:
    """A base port P such that P..P+count are free on 127.0.0.1 (pid-spread to avoid
    two concurrent test sessions racing for the same range)."""
    step = count + 3
    first = start + (os.getpid() * step) % (stop - start)
    for i in range(0, stop - start, step):
        base = start + (first - start + i) % (stop - start - step)
        if all(_port_free(p) for p in range(base, base + count + 1)):
            return base
    raise LabError(f"no {count + 1} free consecutive ports in {start}..{stop}")


def run(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 60.0,
        check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv (never a shell) with a timeout, killing its process group on timeout."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise LabError(f"{' '.join(argv)} timed out after {timeout}s") from None
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed (exit {proc.returncode}): {err.strip()}")
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


class Lab:
    """A running lab: its directory, slurm.conf, environment and node names."""

    def __init__(self, directory: Path, nodes: int = 4, base_port: int | None = None,
                 conf_lines: Sequence[str] = ()) -> None:
        self.dir = Path(directory).resolve()
        self.base_port = base_port if base_port is not None else free_base_port(nodes)
        self.conf = self.dir / "etc" / "slurm.conf"
        width = max(2, len(str(nodes)))
        self.nodes = [f"gpu{i:0{width}d}" for i in range(1, nodes + 1)]
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(self.conf)
        self.lab_cmd = [str(LAB_SCRIPT), "--dir", str(self.dir)]
        # `lab reboot NODE` simulates a machine reboot from outside (provider simulator).
        self.reboot_script = [*self.lab_cmd, "reboot"]
        self._conf_lines = list(conf_lines)

    # life cycle
    def start(self, timeout: float = 90.0) -> None:
        """`lab up` in this lab's directory, on its ports; waits until all nodes are IDLE."""
        argv = [*self.lab_cmd, "--nodes", str(len(self.nodes)), "--base-port",
                str(self.base_port), "up", "--timeout", str(timeout)]
        for line in self._conf_lines:
            argv += ["--conf-line", line]
        run(argv, timeout=timeout + 30)

    def stop(self) -> None:
        """`lab down`: stops only this lab's processes."""
        run([*self.lab_cmd, "down"], timeout=60, check=False)

    # commands
    def run(self, argv: Sequence[str], check: bool = True,
            timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (or anything) against this lab (SLURM_CONF set). It runs
        in the lab's directory, so `sbatch` output files land there, not in the repo."""
        return run(argv, env=self.env, timeout=timeout, check=check, cwd=self.dir)

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["scontrol", *args], check=check)

    def show(self, node: str) -> dict[str, str]:
        """`scontrol show node -o NODE` as key -> value (values without spaces only)."""
        line = self.scontrol("show", "node", "-o", node).stdout
        return dict(w.split("=", 1) for w in line.split() if "=" in w)

    def state(self, node: str) -> set[str]:
        """The node's state flags, e.g. {"IDLE", "DRAIN"} (the `*` not-responding mark
        is dropped)."""
        return set(self.show(node).get("State", "").rstrip("*").split("+")) - {""}

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0,
                 interval: float = 0.5, what: str = "") -> T:
        """Poll `predicate` until it returns something truthy; return that. Raises
        TimeoutError naming `what` (or the predicate) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last: T | None = None
        while True:
            last = predicate()
            if last:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what or predicate!r} not true after {timeout}s "
                                   f"(last value {last!r})")
            time.sleep(interval)

    def reboot(self, node: str, delay: float = 2.0, detach: bool = False) -> None:
        """Simulate a machine reboot: stop NODE's slurmd, wait, start it with -b."""
        argv = [*self.reboot_script, node, "--delay", str(delay)]
        if detach:
            argv.append("--detach")
        run(argv, timeout=delay + 60)

    def stop_ctld(self) -> None:
        """Stop slurmctld only (`lab ctld stop`): the nodes run on, Slurm commands fail."""
        run([*self.lab_cmd, "ctld", "stop"], timeout=60)

    def start_ctld(self, timeout: float = 60.0) -> None:
        """Start slurmctld again with its saved state (`lab ctld start`)."""
        run([*self.lab_cmd, "ctld", "start", "--timeout", str(timeout)], timeout=timeout + 30)

    def reset(self, timeout: float = 60.0) -> None:
        """Put every node back to plain IDLE with empty Extra and no jobs, so tests do
        not leak state into each other."""
        self.run(["scancel", "--full", "--signal=KILL", "--user=root"], check=False)
        self.run(["scancel", "--user=root"], check=False)
        for node in self.nodes:
            self.reset_node(node)
        self.wait_for(lambda: all(self.state(n) == {"IDLE"} for n in self.nodes), timeout,
                      what="all lab nodes IDLE")

    def reset_node(self, node: str) -> None:
        """Clear Extra, cancel a pending reboot, resume a drained/down node."""
        info = self.show(node)
        if info.get("Extra", "") not in ("", "(null)"):
            self.scontrol("update", f"nodename={node}", "extra=")
        flags = self.state(node)
        if flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}:
            self.scontrol("cancel_reboot", node, check=False)
        if not self.run(["pgrep", "-f", f"slurmd -f {self.conf} -N {node}( |$)"],
                        check=False).stdout.strip():
            # A test stopped this node's slurmd (or a reboot left it down): bring it back.
            self.reboot(node, delay=0)
        if flags & {"DRAIN", "DOWN", "FAIL", "DRAINED", "DRAINING"} or "*" in info.get("State", ""):
            self.scontrol("update", f"nodename={node}", "state=resume", check=False)
