"""A site as it deploys slurm-heal, on the Slurm lab, for the deployed-together suite
(issue 32; tests/reliability/test_deployed.py, docs/reliability.md "Deployed together").

Every part runs as a process of its own, the way the README installs it:

* a lab of four nodes in two partitions (``gpu``: gpu[01-02], the default; ``infer``:
  gpu[03-04], in no other partition) under a topology (topology/tree: leaf1 gpu[01-02],
  leaf2 gpu[03-04], one spine);
* `slurm-heal install-node` wrote the HealthCheckProgram, Prolog and Epilog wrappers;
  slurmd runs the INSTALLED HealthCheckProgram every ``HEALTHCHECK_INTERVAL`` seconds
  and the installed Prolog/Epilog around every job (the README's slurm.conf lines with
  a short interval);
* `slurm-heal agent` on every node; each node reads a replay root
  (``SLURM_HEAL_ROOT=LAB/root/NODE``: the lab's nodes share one kernel), whose
  /sys/class/infiniband is the real capture of an H100 node (../shared/fixtures/real)
  and whose kernel log is a kmsg-format file, except gpu01's: the host's real /dev/kmsg
  (a link to the device, where the host lets us write it), so its agent wakes on poll();
* `slurm-heal daemon` with the GPU reset, the post-repair gate, incidents and lemons on
  (stub `nvidia-smi` and `dcgmi` on the jobs' PATH, tests/integration/repairlab.py);
* `slurm-heal serve` (a person's approve and deny go through its API);
* `slurm-heal provider-simulator --lab-dir LAB`: its reboot really reboots the lab node
  (`contrib/lab/lab reboot`: slurmd restarted with -b, the replay root given a new boot).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from tests.apiserve import Serve, make_tokens
from tests.integration.repairlab import DCGMI, NVIDIA_SMI, gate_toml
from tests.lab import Lab, run
from tests.realdata import REAL

IB = REAL / "sys-class-infiniband-h100"
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
PARTITIONS = (("gpu", "gpu[01-02]"), ("infer", "gpu[03-04]"))
PARTITION_OF = {"gpu01": "gpu", "gpu02": "gpu", "gpu03": "infer", "gpu04": "infer"}
LEAVES = {"leaf1": ("gpu01", "gpu02"), "leaf2": ("gpu03", "gpu04")}
TOPOLOGY = ("# two leaf switches under one spine (written for the deployed-together suite)\n"
            "SwitchName=leaf1 Nodes=gpu[01-02]\nSwitchName=leaf2 Nodes=gpu[03-04]\n"
            "SwitchName=spine Switches=leaf[1-2]\n")
REAL_KMSG_NODE = "gpu01"
GPUS = ("0000:1b:00.0", "0000:3b:00.0", "0000:5d:00.0", "0000:86:00.0")
HEALTHCHECK_INTERVAL = 10  # seconds (the README's 300, short: the check runs often)
AGENT_INTERVAL = 5  # the agent's full check (the unit's 300, short)
CHECK_TOML = """[services]
enabled = false
[network]
enabled = false
[mounts]
rw = ["/"]
[disk]
paths = ["/"]
min_free_percent = 0.001
[infiniband]
expected_rate = 400
ports = 8
"""
# The node's boot script (contrib/lab/lab runs DIR/root/NODE/etc/lab-boot at a reboot):
# a node on the host's /dev/kmsg starts its new boot's log after what is in the ring
# now, as a real boot's empty log would (the lab's nodes share one kernel).
BOOT_HOOK = """#!{python}
import os
from slurm_heal.checks import state
root = os.environ["LAB_NODE_ROOT"]
boot = open(root + "/proc/sys/kernel/random/boot_id").read().strip()
last = -1
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
try:
    while True:
        try:
            rec = os.read(fd, 8192)
        except BlockingIOError:
            break
        except BrokenPipeError:
            continue
        if not rec:
            break
        last = max(last, int(rec.split(b",", 2)[1]))
finally:
    os.close(fd)
d = root + "/var/lib/slurm-heal/node"
os.makedirs(d, exist_ok=True)
with state.locked(d):
    st, _ = state.load(d, boot)
    st["cursor"] = {{"kind": "kmsg", "seq": last}}
    state.save(d, st)
"""


def real_kmsg_usable() -> bool:
    """The host's /dev/kmsg can be written and read here (root, not locked down)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        os.close(fd)
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def policy(site: Site) -> str:
    """The daemon's config: reset, gate, incidents and lemons on; an Xid 119 goes on by
    itself (the GPU reset, then the ladder), an Xid 79's migrate waits for a person."""
    return f"""
[approvals]
default = "manual"
[[approvals.rules]]
fault = "gpu.xid.119"
mode = "auto"
[[approvals.rules]]
fault = "ib.*"
mode = "auto"

[safety]
concurrency = 4
one_per_pool = false
cooldown = "0s"
breaker_threshold = 1000
breaker_window = "1h"
return_timeout = "{site.return_timeout}s"
act_timeout = "{site.act_timeout}s"

[capacity]
min_available_percent = 0

[escalation]
gpu_reset = true
gpu_reset_timeout = "20s"
[escalation.lemon]
enabled = true
remediations = 3
window = "1h"

[incidents]
enabled = true
settle = "3s"
window = "2m"

[validation]
results_dir = "{site.tmp / 'results'}"
python = "{site.bin / 'python-node'}"
{gate_toml()}
[controller]
state_dir = "{site.state_dir}"
interval = 1
slurm_backend = "cli"
slurm_conf = "{site.lab.conf}"

[provider]
type = "http"
url = "{site.sim_url}"
read_timeout = 30

[api]
tokens = "{site.tokens_file}"
"""


class Site:
    """The whole deployment; ``start()`` brings it up, ``close()`` stops every process
    it started (by its own handles, never by name)."""

    def __init__(self, tmp: Path, slurm: str = "22.05") -> None:
        self.tmp = tmp
        self.prefix = tmp / "opt" / "slurm-heal"
        self.state_dir = tmp / "state"
        self.config = tmp / "heal.toml"
        self.bin = tmp / "bin"  # stubs for the jobs: nvidia-smi, python-node
        self.gate_bin = tmp / "gate-bin"  # dcgmi
        self.tokens_file = tmp / "tokens"
        self.return_timeout = 120
        self.act_timeout = 90
        conf_lines = [
            f"HealthCheckProgram={self.prefix}/libexec/slurm-heal-healthcheck",
            f"HealthCheckInterval={HEALTHCHECK_INTERVAL}",
            "HealthCheckNodeState=ANY,CYCLE",
            f"Prolog={self.prefix}/libexec/slurm-heal-prolog",
            f"Epilog={self.prefix}/libexec/slurm-heal-epilog",
            "SchedulerParameters=nohold_on_prolog_fail",
            "TopologyPlugin=topology/tree",
        ]
        self.lab = Lab(tmp / "lab", nodes=len(NODES), conf_lines=conf_lines, slurm=slurm,
                       partitions=PARTITIONS)
        self.store = Store(self.state_dir)
        self.real_kmsg = real_kmsg_usable()
        self.kmsg_seq = {n: 100 for n in NODES}
        self.sim_url = ""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.serve: Serve | None = None
        self.tokens: dict[str, str] = {}
        self.slurm: CliSlurm  # once the lab is up (start)

    # -- the node side ------------------------------------------------------------------
    def root(self, node: str) -> Path:
        return self.lab.dir / "root" / node

    def real(self, node: str) -> bool:
        return self.real_kmsg and node == REAL_KMSG_NODE

    def _make_root(self, node: str) -> None:
        root = self.root(node)
        for sub in ("dev", "proc/sys/kernel/random", "etc/slurm-heal", "var/lib/slurm-heal/node"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("lab-first-boot\n")
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
        if self.real(node):
            # the host's kernel log and its uptime: a record's time (boot + its
            # microseconds) is the same in every run of the check
            (root / "dev/kmsg").symlink_to("/dev/kmsg")
            (root / "proc/uptime").symlink_to("/proc/uptime")
            hook = root / "etc/lab-boot"
            hook.write_text(BOOT_HOOK.format(python=sys.executable))
            hook.chmod(0o755)
            run([str(hook)], env=dict(os.environ, LAB_NODE_ROOT=str(root)))
        else:
            # The host's uptime, as the stamps `kernel_says` writes are the host's boot
            # clock: a record's wall time (now - uptime + its stamp) is when it was
            # written, as on a machine. A fixed uptime put every record tens of minutes
            # off (before a GPU reset that came after it: the reset dropped it), and
            # a lab reboot's fixed 5 s put records past this boot's uptime.
            (root / "proc/uptime").symlink_to("/proc/uptime")
            (root / "dev/kmsg").write_text("6,1,1000,-;Linux version 6.1.0 (lab)\n")
        (root / "etc/slurm-heal/check.toml").write_text(CHECK_TOML)
        dst = root / "sys/class/infiniband"
        shutil.copytree(IB, dst)
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        for bus in GPUS:
            d = root / "proc/driver/nvidia/gpus" / bus
            d.mkdir(parents=True, exist_ok=True)
            (d / "information").write_text("Model: NVIDIA H100 80GB HBM3\n")

    def kernel_says(self, node: str, message: str) -> None:
        """A kernel record on the node: into the real /dev/kmsg for gpu01 (where it can),
        else appended to the node's replayed kernel log."""
        if self.real(node):
            with open("/dev/kmsg", "w") as fh:
                fh.write(f"<3>{message}\n")
            return
        self.kmsg_seq[node] += 1
        usec = int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1e6)  # /proc/uptime's clock
        with (self.root(node) / "dev/kmsg").open("a") as fh:
            fh.write(f"3,{self.kmsg_seq[node]},{usec},-;{message}\n")

    def ib_ports(self, node: str, up: bool) -> None:
        """Every InfiniBand port of the node loses (or gets back) its link, as when its
        leaf switch goes (or comes back). A link that goes down counts it in the port's
        ``counters/link_downed``, as the adapter does."""
        for state in (self.root(node) / "sys/class/infiniband").glob("*/ports/*/state"):
            if (state.parent / "link_layer").read_text().strip() != "InfiniBand":
                continue
            downed = state.parent / "counters" / "link_downed"
            if not up and "ACTIVE" in state.read_text() and downed.exists():
                count = downed.read_text().strip()
                downed.write_text(f"{int(count) + 1 if count.isdigit() else 1}\n")
            state.write_text("4: ACTIVE\n" if up else "1: DOWN\n")
            (state.parent / "phys_state").write_text("5: LinkUp\n" if up else "3: Disabled\n")

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        (self.lab.dir / "etc").mkdir(parents=True, exist_ok=True)
        (self.lab.dir / "etc" / "topology.conf").write_text(TOPOLOGY)
        for node in NODES:
            self._make_root(node)
        # README step 1 without its pip install: this checkout's venv is the site's.
        (self.prefix / "bin").mkdir(parents=True)
        (self.prefix / "bin" / "slurm-heal").symlink_to(Path(sys.executable).parent
                                                        / "slurm-heal")
        self.lab.conf.parent.mkdir(parents=True, exist_ok=True)
        self.lab.conf.write_text("# written by `lab up` below\n")
        run([str(self.prefix / "bin" / "slurm-heal"), "install-node", "--no-venv",
             "--prefix", str(self.prefix), "--slurm-conf", str(self.lab.conf),
             "--env", f"SLURM_HEAL_ROOT={self.lab.dir}/root/${{SLURMD_NODENAME}}"],
            env=self.lab.env, timeout=120)
        self._stubs()
        self.lab.start(timeout=120)
        self.slurm = CliSlurm(slurm_conf=str(self.lab.conf))
        port = free_port()
        self.sim_url = f"http://127.0.0.1:{port}"
        self._spawn("simulator", [str(self.prefix / "bin" / "slurm-heal"), "provider-simulator",
                                  "--port", str(port), "--lab-dir", str(self.lab.dir),
                                  "--slurm-conf", str(self.lab.conf), "--duration", "0.5"],
                    self.lab.env)
        self.tokens = make_tokens(self.tokens_file)
        self.config.write_text(policy(self))
        for node in NODES:
            env = dict(self.lab.env, SLURM_HEAL_ROOT=str(self.root(node)),
                       PATH=self.lab.path_prefix + "/usr/bin:/bin")
            self._spawn(f"agent-{node}", [str(self.prefix / "bin" / "slurm-heal"), "agent",
                                          "--node", node, "--interval", str(AGENT_INTERVAL)],
                        env)
        env = dict(self.lab.env, PYTHONFAULTHANDLER="1",
                   PATH=f"{self.bin}:{self.gate_bin}:{self.lab.env['PATH']}")
        self._spawn("daemon", [str(self.prefix / "bin" / "slurm-heal"), "daemon", "--config",
                               str(self.config)], env)
        self.serve = Serve(["--config", str(self.config)], self.tmp / "serve.log",
                           env=self.lab.env).start()
        deadline = time.monotonic() + 30
        while not self._sim_up():
            if time.monotonic() > deadline:
                raise RuntimeError("the provider simulator never answered:\n"
                                   + self.log("simulator"))
            time.sleep(0.2)

    def _stubs(self) -> None:
        for folder, name, text in ((self.bin, "nvidia-smi", NVIDIA_SMI),
                                   (self.gate_bin, "dcgmi", DCGMI)):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            (folder / name).chmod(0o755)
        (self.bin / "say").write_text("GPU 00000000:3B:00.0 was successfully reset.\n")
        # The jobs' Python runs the node check on the node's replay root.
        python = self.bin / "python-node"
        python.write_text(f"#!/bin/sh\nexport SLURM_HEAL_ROOT={self.lab.dir}/root/"
                          f"$SLURMD_NODENAME\nexec {sys.executable} \"$@\"\n")
        python.chmod(0o755)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with (self.tmp / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(argv, env=env, stdout=log,
                                                stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def _sim_up(self) -> bool:
        try:
            return requests.get(self.sim_url + "/_sim/stats", timeout=5).ok
        except requests.RequestException:
            return False

    def dead(self) -> list[str]:
        """The site's processes that exited (each should run for the whole test)."""
        out = [f"{n} (exit {p.returncode})" for n, p in self.procs.items()
               if p.poll() is not None]
        if self.serve is not None and self.serve.proc is not None \
                and self.serve.proc.poll() is not None:
            out.append(f"serve (exit {self.serve.proc.returncode})")
        return out

    def close(self) -> None:
        if self.serve is not None:
            self.serve.stop()
        for proc in self.procs.values():
            if proc.poll() is None:
                with _quiet():
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with _quiet():
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.lab.stop()

    # -- what the driver reads ----------------------------------------------------------
    def log(self, name: str, tail: int = 4000) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def sim_stats(self) -> dict[str, Any]:
        return dict(requests.get(self.sim_url + "/_sim/stats", timeout=10).json())

    def sim_operations(self) -> list[dict[str, Any]]:
        body = requests.get(self.sim_url + "/v1/operations", timeout=10).json()
        return list(body.get("operations", []))

    def reservations(self) -> dict[str, str]:
        """Reservation name -> its Nodes=."""
        out = {}
        for line in self.lab.scontrol("show", "reservation", "-o").stdout.splitlines():
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if "ReservationName" in fields:
                out[fields["ReservationName"]] = fields.get("Nodes", "")
        return out

    def jobs(self) -> list[dict[str, str]]:
        """Every job Slurm still lists (MinJobAge keeps ended ones a while)."""
        sep = "\x1f"
        fields = ("id", "name", "state", "nodes", "start", "reason", "partition",
                  "reservation")
        fmt = sep.join(("%i", "%j", "%T", "%N", "%S", "%r", "%P", "%v"))
        out = self.lab.run(["squeue", "-h", "-t", "all", "-o", fmt], check=False).stdout
        return [dict(zip(fields, line.split(sep), strict=False))
                for line in out.splitlines() if line.strip()]

    def api(self, method: str, path: str, body: dict[str, Any] | None = None,
            key: str | None = None) -> requests.Response:
        assert self.serve is not None
        if method == "GET":
            return self.serve.get(path, self.tokens["alice"])
        return self.serve.post(path, self.tokens["alice"], json=body or {}, key=key)

    def slurmd_launched(self, job: str) -> bool:
        """A slurmd launched the job (its log; the lab keeps no accounting)."""
        needles = (f"Launching batch job {job}\n", f"Launching batch job {job} ",
                   f"Launching batch JobId={job} ", f"Launching batch JobId={job}\n")
        for log in (self.lab.dir / "log").glob("slurmd-*.log"):
            text = log.read_text(errors="replace")
            if any(n in text for n in needles):
                return True
        return False

    def node_log(self, node: str, needle: str, limit: int = 4) -> list[str]:
        """The last lines of the node's agent log holding ``needle``."""
        text = self.log(f"agent-{node}", tail=200_000)
        return [ln[-300:] for ln in text.splitlines() if needle in ln][-limit:]

    def slurmd_lines(self, needle: str, limit: int = 4) -> list[str]:
        out = []
        for log in sorted((self.lab.dir / "log").glob("slurmd-*.log")):
            out += [f"{log.stem}: {ln}" for ln in log.read_text(errors="replace").splitlines()
                    if needle in ln]
        return out[-limit:]

    def ctld_lines(self, needle: str, limit: int = 6) -> list[str]:
        path = self.lab.dir / "log" / "slurmctld.log"
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if needle in ln]
        return lines[-limit:]


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError)  # type: ignore[arg-type]


def dump(obj: Any) -> str:
    return json.dumps(obj, default=str, sort_keys=True)
