"""The shared set-up of the lab tests of the lighter and surer repairs: the GPU reset
(SPEC E6, test_gpu_reset_lab.py), the post-repair gate (SPEC V4, test_gate_lab.py) and
the two together (test_reset_gate_lab.py).

`slurm-heal daemon` as a process against the real Slurm lab, the provider simulator
whose reboot really reboots the lab node, and stub tools on the jobs' PATH: `nvidia-smi`
(the reset) and `dcgmi` (the gate's suite), each in a folder of its own, so that what one
is told (its exit status, its words, a hang) never leaks into the other.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from slurm_heal.models import ValidationRun
from slurm_heal.providers.simulator import LabHook, SimulatorServer
from slurm_heal.slurm.cli import CliSlurm
from slurm_heal.store import Store
from tests.integration.test_daemon_lab import Heal, _policy
from tests.lab import Lab

RESET_PREFIX = "slurm-heal-reset-"
GATE_PREFIX = "slurm-heal-gate-"
# The stub reset tool: what it does is chosen per test through files beside it; every
# call's arguments are kept, one line each.
NVIDIA_SMI = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
if [ "$1" = "nvlink" ]; then exit 0; fi
if [ -f "$dir/sleep" ]; then sleep "$(cat "$dir/sleep")"; fi
cat "$dir/say" 2>/dev/null
exit "$(cat "$dir/rc" 2>/dev/null || echo 0)"
"""
# The stub gate tool: says what it was asked, sleeps and exits as the files beside it say;
# while it sleeps, a file `sleeping` beside it says so (a test that ends the sleep early
# waits for that first: a job RUNNING in squeue may not have reached the tool yet).
DCGMI = """#!/bin/sh
dir=$(dirname "$0")
echo "dcgmi (stub) $*"
if [ -f "$dir/sleep" ]; then touch "$dir/sleeping"; sleep "$(cat "$dir/sleep")"; fi
exit "$(cat "$dir/rc" 2>/dev/null || echo 0)"
"""


def gate_toml(steps: str = "") -> str:
    """`[gate]` on, a stub dcgmi diag as its suite (plus ``steps``)."""
    return f"""
[gate]
enabled = true
vendor = "nvidia"
timeout = "3m"

[[gate.suites.nvidia]]
name = "diag"
command = ["dcgmi", "diag", "-r", "1"]
timeout = "2m"
{steps}"""


def _stub(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)
    return folder


def clear_reservations(lab: Lab) -> None:
    for line in lab.scontrol("show", "reservation", "-o").stdout.splitlines():
        name = line.split()[0].partition("=")[2] if line.startswith("ReservationName=") else ""
        if name:
            lab.scontrol("delete", f"ReservationName={name}", check=False)


def clear(lab: Lab) -> None:
    """No job and no reservation of an earlier test left on the lab."""
    lab.run(["scancel", "--user=root"], check=False)
    clear_reservations(lab)


class Gate:
    """What the gate's tests read: the gate's runs in the store, the reservations."""

    lab: Lab
    store: Store

    def gate_runs(self, node: str) -> list[ValidationRun]:
        return [v for v in self.store.load().validations
                if v.node == node and v.origin == "gate"]

    def reservations(self) -> str:
        return self.lab.scontrol("show", "reservation", "-o").stdout


class Reset(Heal, Gate):
    """Heal (test_daemon_lab) with `escalation.gpu_reset` on and a stub nvidia-smi; with
    ``gate`` (a `[gate]` section, gate_toml()) the post-repair gate on too, its stub
    dcgmi in a folder of its own."""

    def __init__(self, lab: Lab, tmp: Path, sim: SimulatorServer, timeout: str = "3s",
                 gate: str = "") -> None:
        super().__init__(lab, tmp, sim)
        self.bin = _stub(tmp / "bin", "nvidia-smi", NVIDIA_SMI)
        self.gate_bin = _stub(tmp / "gate-bin", "dcgmi", DCGMI)
        # The job's Python: the node's replay root for the node check it runs (on a real
        # node the check reads the real /dev/kmsg; the lab's nodes share one machine).
        python = self.bin / "python-node"
        python.write_text(f"#!/bin/sh\nexport SLURM_HEAL_ROOT={tmp}/roots/$SLURMD_NODENAME\n"
                          f"exec {sys.executable} \"$@\"\n")
        python.chmod(0o755)
        self.results = tmp / "results"
        self.config.write_text(_policy(self.state_dir, lab.conf, sim.url, extra_toml=f"""
[[approvals.rules]]
fault = "gpu.xid.119"
action = "reset_gpu"
mode = "auto"

[escalation]
gpu_reset = true
gpu_reset_timeout = "{timeout}"
gpu_reset_check_config = "{tmp / 'check.toml'}"

[validation]
results_dir = "{self.results}"
python = "{python}"
{gate}"""))
        self.env = dict(lab.env, PATH=f"{self.bin}:{self.gate_bin}:{lab.env['PATH']}")

    def start_daemon(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"daemon-{len(self.daemons)}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", "daemon", "--config",
                                 str(self.config)], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.daemons.append(proc)
        return proc

    def tool(self, rc: int = 0, say: str = "", sleep: float | None = None) -> None:
        """What the stub nvidia-smi does."""
        (self.bin / "rc").write_text(f"{rc}\n")
        (self.bin / "say").write_text(say)
        if sleep is not None:
            (self.bin / "sleep").write_text(f"{sleep}\n")

    def gate_tool(self, rc: int) -> None:
        """What the stub dcgmi does."""
        (self.gate_bin / "rc").write_text(f"{rc}\n")

    def calls(self) -> list[str]:
        p = self.bin / "calls"
        return p.read_text().splitlines() if p.exists() else []

    def gpus(self, node: str, *buses: str) -> None:
        """The node's GPUs as the driver lists them (/proc/driver/nvidia/gpus)."""
        for bus in buses:
            d = self.root(node) / "proc/driver/nvidia/gpus" / bus
            d.mkdir(parents=True, exist_ok=True)
            (d / "information").write_text("Model: NVIDIA H100\n")


class Gated(Heal, Gate):
    """The daemon lab's installation with `[gate]` on and a stub dcgmi for the job."""

    def __init__(self, lab: Lab, tmp: Path, sim: SimulatorServer, backend: str,
                 steps: str = "") -> None:
        super().__init__(lab, tmp, sim, backend)
        self.bin = _stub(tmp / "bin", "dcgmi", DCGMI)
        self.results = tmp / "results"
        gate = f'\n[validation]\nresults_dir = "{self.results}"\n{gate_toml(steps)}'
        self.config.write_text(_policy(self.state_dir, lab.conf, sim.url, extra_toml=gate,
                                       backend_toml=self.backend_toml))

    def tool(self, rc: int) -> None:
        (self.bin / "rc").write_text(f"{rc}\n")

    def start_daemon(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"daemon-{len(self.daemons)}.log").open("wb")
        env = dict(self.lab.env, PATH=f"{self.bin}:{self.lab.env['PATH']}")
        proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", "daemon", "--config",
                                 str(self.config)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.daemons.append(proc)
        return proc


H = TypeVar("H", bound=Heal)


@contextmanager
def installed(lab: Lab, make: Callable[[SimulatorServer], H]) -> Iterator[H]:
    """The fixtures' body: no job or reservation left, the provider simulator (its
    reboot reboots the lab node), the installation made, its boot watcher running; all
    stopped and cleared after the test."""
    clear(lab)
    hook = LabHook(lab.dir, slurm=CliSlurm(slurm_conf=str(lab.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.5) as sim:
        h = make(sim)
        h.baseline()
        h._watcher.start()
        try:
            yield h
        finally:
            h.close()
            clear(lab)
