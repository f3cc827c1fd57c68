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
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from slurm_heal.slurm.base import SlurmClient

REPO = Path(__file__).resolve().parent.parent
LAB_SCRIPT = REPO / "contrib" / "lab" / "lab"
SLURM_BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "sinfo",
                  "scontrol", "squeue", "sbatch")
# The Slurm versions the lab runs (contrib/lab/lab BUILDS): None = Debian's packages in /usr.
VERSIONS = ("22.05", "25.11", "26.05")
# Where the lab builds the source versions (LAB_BUILD_ROOT, as contrib/lab/lab reads it).
BUILD_ROOT = Path(os.environ.get("LAB_BUILD_ROOT") or "/opt/slurm-heal")
# version -> (prefix, vendored tarball, SchedMD's git tag the tarball is `git archive`d from)
SOURCE_BUILDS = {
    "25.11": (BUILD_ROOT / "slurm-25.11.7", "slurm-25.11.7.tar.xz"),
    "26.05": (BUILD_ROOT / "slurm-26.05.3", "slurm-26.05.3.tar.xz"),
}
# Backends that exist on each version: pyslurm needs a matching libslurm (25.11 here; there
# is no pyslurm release for 26.05), rest needs slurmrestd (which the source builds have).
BACKENDS = {"22.05": ("cli",), "25.11": ("cli", "pyslurm", "rest"), "26.05": ("cli", "rest")}

T = TypeVar("T")


class LabError(RuntimeError):
    """A lab command failed; the message carries argv, exit status and stderr."""


def slurm_missing(version: str = "22.05") -> list[str]:
    """What the lab of that Slurm version needs and lacks (programs, a built source
    tree, the vendored tarball), each as a phrase that says what is missing, where it
    comes from and the command that adds it, for a skip/fail reason."""
    install = "`contrib/lab/lab install` (as root on Debian 12; apt-get installs them)"
    if version not in SOURCE_BUILDS:
        gone = [b for b in SLURM_BINARIES if shutil.which(b) is None and not Path(b).exists()]
        return [f"{', '.join(gone)} (Debian's slurmctld slurmd slurm-client munge): "
                f"{install}"] if gone else []
    prefix, tarball = SOURCE_BUILDS[version]
    missing = [f"/usr/sbin/munged (Debian's munge): {install}"
               for b in ("/usr/sbin/munged",) if not Path(b).exists()]
    if (prefix / ".slurm-heal-built").is_file():
        return missing
    if vendor_tarball(tarball) is None:
        return missing + [source_hint(version)]
    return missing + [f"a Slurm {version} build in {prefix}: "
                      f"`contrib/lab/lab install --slurm {version}` (root; about 5 minutes)"]


def source_hint(version: str) -> str:
    """Why there is no Slurm `version` source here, and how to get it."""
    prefix, tarball = SOURCE_BUILDS[version]
    base = tarball.removesuffix(".tar.xz")
    tag = "slurm-" + base.removeprefix("slurm-").replace(".", "-") + "-1"
    return (f"the Slurm {version} source {tarball}, looked for in shared/vendor beside the "
            f"clone and in $LAB_VENDOR_DIR: make it from SchedMD's tag {tag} "
            f"(`git clone -b {tag} --depth 1 https://github.com/SchedMD/slurm && "
            f"git -C slurm archive --prefix={base}/ HEAD | xz > DIR/{tarball}`), then "
            f"`LAB_VENDOR_DIR=DIR contrib/lab/lab install --slurm {version}` builds it "
            f"into {prefix}")


def vendor_tarball(name: str) -> Path | None:
    """The vendored tarball as the lab script finds it (LAB_VENDOR_DIR, ../shared/vendor
    beside the clone or beside the main checkout of a git worktree)."""
    dirs = [Path(d) for d in [os.environ.get("LAB_VENDOR_DIR", "")] if d]
    dirs.append(REPO.parent / "shared" / "vendor")
    common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--git-common-dir"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if common:
        dirs.append((REPO / common).resolve().parent.parent / "shared" / "vendor")
    return next((d / name for d in dirs if (d / name).is_file()), None)


def version_bin(version: str) -> Path | None:
    """Where that version's commands live when they are not the system's."""
    return SOURCE_BUILDS[version][0] / "bin" if version in SOURCE_BUILDS else None


def skip_reason(version: str) -> str:
    """Why the Slurm `version` lab cannot run here (what to add, and how), '' when it can."""
    missing = slurm_missing(version)
    if missing:
        return f"no Slurm {version} lab here; it needs " + "; and ".join(missing)
    if os.geteuid() != 0:
        return ("the Slurm lab runs its daemons as root (SlurmUser=root): run the tests as "
                "root")
    return ""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(count: int, start: int = 21000, stop: int = 29000) -> int:
    """A base port P such that P..P+count+2 are free on 127.0.0.1 (P+count+1 is the
    tests' "nobody listens here" port, P+count+2 slurmrestd's), pid-spread to avoid two
    concurrent test sessions racing for the same range."""
    step = count + 3
    first = start + (os.getpid() * step) % (stop - start)
    for i in range(0, stop - start, step):
        base = start + (first - start + i) % (stop - start - step)
        if all(_port_free(p) for p in range(base, base + count + 3)):
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


# The RPCs the node side sends slurmctld (issue 43): its node reads and its writes.
NODE_READS = ("REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE")
PARTITION_READS = ("REQUEST_PARTITION_INFO",)
NODE_WRITES = ("REQUEST_UPDATE_NODE",)


def parse_sdiag_rpcs(text: str) -> dict[str, int]:
    """sdiag's "Remote Procedure Call statistics by message type": message type -> count
    (``REQUEST_UPDATE_NODE ( 3002) count:1 ave_time:164 total_time:164``, 22.05 to
    26.05). A section that is missing is an error, never zero RPCs."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines)
                     if line.strip() == "Remote Procedure Call statistics by message type")
    except StopIteration:
        raise LabError("sdiag printed no 'Remote Procedure Call statistics by message "
                       f"type' section: {text[:200]!r}") from None
    out: dict[str, int] = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        words = line.split()
        count = next((w.split(":", 1)[1] for w in words if w.startswith("count:")), None)
        if count is None or not count.isdigit():
            raise LabError(f"sdiag RPC line not understood: {line!r}")
        out[words[0]] = out.get(words[0], 0) + int(count)
    return out


class Lab:
    """A running lab: its directory, slurm.conf, environment and node names."""

    def __init__(self, directory: Path, nodes: int = 4, base_port: int | None = None,
                 conf_lines: Sequence[str] = (), slurm: str = "22.05",
                 rest: bool = False,
                 partitions: Sequence[str | tuple[str, str]] = ()) -> None:
        self.dir = Path(directory).resolve()
        self.base_port = base_port if base_port is not None else free_base_port(nodes)
        self._own_ports = base_port is None  # chosen here: another may be chosen at start
        self.conf = self.dir / "etc" / "slurm.conf"
        width = max(2, len(str(nodes)))
        self.nodes = [f"gpu{i:0{width}d}" for i in range(1, nodes + 1)]
        self.slurm = slurm
        self.rest = rest
        self.rest_url = f"http://127.0.0.1:{self.base_port + nodes + 2}"
        self.token_file = self.dir / "rest" / "token"
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(self.conf)
        bindir = version_bin(slurm)
        # That version's commands first on PATH, as `lab env` does ("" for the system's).
        self.path_prefix = f"{bindir}:{bindir.parent / 'sbin'}:" if bindir is not None else ""
        self.env["PATH"] = self.path_prefix + self.env.get("PATH", "")
        self.lab_cmd = [str(LAB_SCRIPT), "--dir", str(self.dir)]
        # `lab reboot NODE` simulates a machine reboot from outside (provider simulator).
        self.reboot_script = [*self.lab_cmd, "reboot"]
        self._conf_lines = list(conf_lines)
        # `lab up --partition NAME=NODES` each, as NAME=NODES or (NAME, NODES), the first
        # the default; none: one `gpu` partition of every node.
        self.partitions = [p if isinstance(p, str) else f"{p[0]}={p[1]}" for p in partitions]

    # life cycle
    def start(self, timeout: float = 90.0) -> None:
        """`lab up` in this lab's directory, on its ports; waits until all nodes are IDLE.

        The ports were free when this lab chose them; a lab of a test pass beside this one
        may take them before `up` binds them (CI's passes run side by side: seen once on
        the 26.05 pass). Ports this lab chose itself are then chosen again, twice at most."""
        for tries in range(3):
            argv = [*self.lab_cmd, "--nodes", str(len(self.nodes)), "--base-port",
                    str(self.base_port), "up", "--slurm", self.slurm, "--timeout", str(timeout)]
            if self.rest:
                argv.append("--rest")
            for line in self._conf_lines:
                argv += ["--conf-line", line]
            for spec in self.partitions:
                argv += ["--partition", spec]
            try:
                run(argv, timeout=timeout + 30)
                return
            except LabError as exc:
                if not self._own_ports or "ports in use" not in str(exc) or tries == 2:
                    raise
            n = len(self.nodes)
            self.base_port = free_base_port(n, start=21000 + 997 * (tries + 1) % 7000)
            self.rest_url = f"http://127.0.0.1:{self.base_port + n + 2}"

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

    def reset_rpc_counts(self) -> None:
        """`sdiag -r`: slurmctld's RPC counters back to zero."""
        self.run(["sdiag", "-r"])

    def rpc_counts(self) -> dict[str, int]:
        """slurmctld's RPCs by message type since the last reset (`sdiag`), without
        sdiag's own REQUEST_STATS_INFO."""
        counts = parse_sdiag_rpcs(self.run(["sdiag"]).stdout)
        counts.pop("REQUEST_STATS_INFO", None)
        return counts

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


def make_backend(lab: Lab, backend: str, timeout: float = 20.0) -> SlurmClient:
    """A SlurmClient of that backend on the lab, as `make_client` builds it."""
    from slurm_heal.slurm import make_client

    if backend == "rest":
        return make_client("rest", slurm_conf=str(lab.conf), timeout=timeout,
                           rest_url=lab.rest_url, rest_token_file=str(lab.token_file))
    return make_client(backend, slurm_conf=str(lab.conf), timeout=timeout)
