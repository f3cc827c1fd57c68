"""`slurm-heal demo`: the whole remediation life cycle on a simulated cluster.

Everything here is the real thing except the cluster: the real node check reads a
(replayed) kernel log and publishes its alert in the node's Extra, the real controller
decides with the real engine under a real policy, records to the real JSON store, and
repairs the node through the real `http` provider talking to the provider simulator
over HTTP on 127.0.0.1. The node's health check at boot runs when the controller sees
the node's boot time change. The cluster is `MemorySlurm` (in process, so the demo runs on
a machine without Slurm) or, with ``lab``, the loopback lab cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from slurm_heal.checks.config import parse_config
from slurm_heal.checks.runner import run_check
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller, CycleReport, Notifier, utcnow
from slurm_heal.errors import HealError
from slurm_heal.models import Phase
from slurm_heal.operations import rem_json
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.slurm.base import SlurmClient
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action

# The SPEC P2 example, plus short times so the story fits in well under a minute.
DEMO_POLICY: dict[str, Any] = {
    "approvals": {"default": "manual", "rules": [
        {"fault": "gpu.xid.119", "action": "reboot", "mode": "auto"},
        {"fault": "gpu.xid.95", "action": "reboot", "mode": "auto"},
        {"action": "migrate", "mode": "manual"},
    ]},
    "safety": {"persistence": {"critical": "2s"}, "cooldown": "30m"},
    "waiting": {"max_wait": "2h", "at_limit": "requeue"},
}

XID_MESSAGE = ("Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function "
               "76 (GSP_RM_CONTROL) (0x20801813 0x4c).")
XID_LINE = f"NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=python3, {XID_MESSAGE}"
# The persistence wait (SPEC S1) is a normal step of every remediation, not a refusal:
# the story says what it is instead of the engine's "blocked".
PHASE_WORDS = {("blocked", "S1"): "confirming"}
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
FAULTY = "gpu02"


class ReplayNode:
    """A node's system files (kernel log, boot id) under a replay root for the check."""

    def __init__(self, base: Path, name: str) -> None:
        self.root = base / name
        (self.root / "dev").mkdir(parents=True)
        (self.root / "proc/sys/kernel/random").mkdir(parents=True)
        self.seq = 0
        self.boot()

    def boot(self) -> None:
        """A new boot: new boot id, empty kernel log."""
        (self.root / "proc/sys/kernel/random/boot_id").write_text(str(uuid.uuid4()) + "\n")
        (self.root / "proc/uptime").write_text("5.00 5.00\n")
        (self.root / "proc/mounts").write_text("/dev/vda1 / ext4 rw,relatime 0 0\n")
        (self.root / "dev/kmsg").write_text("6,1,1000,-;Linux version 6.1.0 (demo)\n")
        self.seq = 1

    def kernel_says(self, message: str, prio: int = 3) -> None:
        self.seq += 1
        with (self.root / "dev/kmsg").open("a") as fh:
            fh.write(f"{prio},{self.seq},{self.seq * 1000000},-;{message}\n")


@contextmanager
def _replay_root(path: Path) -> Iterator[None]:
    old = os.environ.get("SLURM_HEAL_ROOT")
    os.environ["SLURM_HEAL_ROOT"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SLURM_HEAL_ROOT", None)
        else:
            os.environ["SLURM_HEAL_ROOT"] = old


class Narrator:
    """The demo's story: lines for people, or JSON lines (``--json``): ``{"t": seconds,
    "node": NODE, "text": ...}`` for each step (``node`` absent on a heading), and one
    last ``{"result": {...}}``."""

    def __init__(self, out: TextIO, start: float, as_json: bool = False) -> None:
        self.out = out
        self.start = start
        self.as_json = as_json
        self.shown: list[tuple[str, str]] = []  # (long text already told, how to refer to it)

    def told(self, text: str, label: str) -> None:
        """``text`` was told in full: later lines refer to it as ``label`` instead of
        repeating it (whole, or cut short as Slurm's reason cuts it)."""
        self.shown.append((text, label))
        self.shown.sort(key=lambda t: -len(t[0]))

    def elide(self, line: str) -> str:
        for text, label in self.shown:
            i = line.find(text[:40])
            if i < 0:
                continue
            n = 0  # how much of ``text`` the line repeats from there
            while n < len(text) and i + n < len(line) and line[i + n] == text[n]:
                n += 1
            tail = line[i + n:]
            if n < len(text) and tail.lstrip().startswith("..."):  # a reason's cut copy
                tail = tail.lstrip()[len("..."):]
            line = f"{line[:i].rstrip()} {label}{tail}"
        return line

    def _json(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, default=str) + "\n")
        self.out.flush()

    def say(self, node: str, text: str) -> None:
        text = self.elide(text)
        t = time.monotonic() - self.start
        if self.as_json:
            self._json({"t": round(t, 1), "node": node, "text": text})
            return
        self.out.write(f"{t:6.1f}s  {node:<6} {text}\n")
        self.out.flush()

    def text(self, text: str) -> None:
        """A heading or a part of the closing record (no time, no node)."""
        if self.as_json:
            if text.strip():
                self._json({"t": round(time.monotonic() - self.start, 1), "text": text.strip()})
            return
        self.out.write(text)
        self.out.flush()

    def result(self, result: dict[str, Any]) -> None:
        if self.as_json:
            self._json({"result": result})

    def report(self, report: CycleReport) -> None:
        for rec in report.records:
            action = f" {rec.action.value}" if rec.action is not Action.NONE else ""
            phase = PHASE_WORDS.get((rec.phase, rec.rule), rec.phase)  # S1 records its id alone
            self.say(rec.node, f"[{phase}]{action}  rule={rec.rule}  {rec.why}")
        for ex in report.executed:
            e = ex.effect
            if e.kind == "poll" and ex.outcome == "running":
                continue
            outcome = ex.outcome or "in flight"
            self.say(e.node, f"  -> {e.kind}{' ' + e.action.value if e.action is not Action.NONE else ''}"
                             f": {outcome}{' (' + ex.detail + ')' if ex.detail else ''}")


class MemoryBackend:
    """The embedded default: an in-process simulated cluster (no Slurm needed)."""

    name = "a simulated GPU cluster (in process)"

    def __init__(self, tmp: Path) -> None:
        self.slurm = MemorySlurm([(n, "gpu") for n in NODES], clock=utcnow)

    def submit_job(self, node: str, seconds: float) -> str:
        return str(self.slurm.submit_job(node, timedelta(seconds=seconds)))

    def hook(self, node: str, action: Action, op: Any) -> str | None:
        self.slurm.simulate_reboot(node, timedelta(seconds=2))
        return None

    def close(self) -> None:
        return None


class LabBackend:
    """The loopback lab: real slurmctld and slurmd on 127.0.0.1 (root, Slurm installed)."""

    name = "the Slurm lab on 127.0.0.1 (real slurmctld + slurmd)"

    def __init__(self, tmp: Path) -> None:
        from slurm_heal.providers.simulator import LabHook
        from slurm_heal.slurm.cli import CliSlurm

        self.script = Path(__file__).resolve().parents[1] / "contrib" / "lab" / "lab"
        if not self.script.exists():
            raise HealError(f"--lab needs the lab script {self.script} (a source checkout)")
        if os.geteuid() != 0:
            raise HealError("--lab runs slurmctld and slurmd as root: run it as root")
        if shutil.which("slurmctld") is None and not Path("/usr/sbin/slurmctld").exists():
            raise HealError("--lab needs Slurm: run `contrib/lab/lab install` first")
        self.dir = tmp / "lab"
        self.lab = [str(self.script), "--dir", str(self.dir)]
        self._run([*self.lab, "--nodes", str(len(NODES)), "--base-port", str(_free_ports(5)),
                   "up"], timeout=150)
        self.conf = self.dir / "etc" / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.slurm = CliSlurm(slurm_conf=str(self.conf))
        self.hook = LabHook(self.dir, slurm=self.slurm, lab_command=self.script)

    def _run(self, argv: list[str], timeout: float) -> str:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, env=getattr(self, "env", None),
                                  cwd=self.dir if self.dir.exists() else None)
        except subprocess.TimeoutExpired:
            raise HealError(f"{' '.join(argv)} ran past {timeout:.0f}s") from None
        if proc.returncode != 0:
            raise HealError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")
        return proc.stdout

    def submit_job(self, node: str, seconds: float) -> str:
        out = self._run(["sbatch", "--parsable", "-w", node, "-t", "5", "--wrap",
                         f"sleep {seconds:.0f}"], timeout=30)
        jid = out.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the story needs it running, not pending
            if any(str(j.job_id) == jid and j.state == "RUNNING" for j in self.slurm.jobs(node)):
                return jid
            time.sleep(0.3)
        raise HealError(f"job {jid} did not start on {node} within 30s")

    def close(self) -> None:
        subprocess.run([*self.lab, "down"], capture_output=True, timeout=60,
                       stdin=subprocess.DEVNULL, check=False)


def _free_ports(count: int) -> int:
    """A base port P with P..P+count free on 127.0.0.1."""
    for base in range(23000, 29000, count + 3):
        try:
            for port in range(base, base + count + 1):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise HealError("no free ports for the lab in 23000..29000")


def run_demo(out: TextIO, *, job_seconds: float = 6.0, deadline: float = 55.0,
             interval: float = 0.5, workdir: Path | None = None, lab: bool = False,
             as_json: bool = False) -> int:
    """Run the demo; return 0 when the node was repaired and resumed, else 1."""
    start = time.monotonic()
    say = Narrator(out, start, as_json)
    tmp = Path(tempfile.mkdtemp(prefix="slurm-heal-demo-")) if workdir is None else workdir
    check_cfg = parse_config({"services": {"enabled": False}, "mounts": {"rw": ["/"]}})
    if lab:
        say.text("starting the Slurm lab (slurmctld + 4 slurmd on 127.0.0.1)...\n")
    backend: MemoryBackend | LabBackend = LabBackend(tmp) if lab else MemoryBackend(tmp)
    cluster = backend.slurm
    # The lab's replay roots are DIR/root/NODE: a lab reboot gives them a new boot id
    # itself (docs/lab.md), so the demo's path and the lab's are one.
    replay = {n: ReplayNode(backend.dir / "root" if isinstance(backend, LabBackend)
                            else tmp / "nodes", n)
              for n in NODES}
    try:
        return _story(out, say, backend, cluster, replay, check_cfg, tmp, job_seconds,
                      deadline, interval, start)
    finally:
        backend.close()
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _story(out: TextIO, say: Narrator, backend: MemoryBackend | LabBackend,
           cluster: SlurmClient, replay: dict[str, ReplayNode], check_cfg: Any, tmp: Path,
           job_seconds: float, deadline: float, interval: float, start: float) -> int:
    def node_check(node: str) -> int:
        with _replay_root(replay[node].root):
            result = run_check(check_cfg, node_name=node, client=cluster)
        for f in result.findings:
            say.say(node, f"node check: {f.fault} ({f.severity.value}) {f.summary}")
            say.told(f.summary, f"({f.fault} above)")
        for a in result.actions:
            say.say(node, f"node check: {a}")
        return len(result.findings)

    def on_action(node: str, action: Action, op: Any) -> str | None:
        say.say(node, f"provider simulator: executing {action.value} (operation {op.id})")
        return backend.hook(node, action, op)

    policy = policy_from_dict(DEMO_POLICY, source="demo policy (SPEC P2 example)")
    store = Store(tmp / "state")
    with SimulatorServer(port=0, on_action=on_action, duration=1.0) as sim:
        say.text(f"slurm-heal demo: {backend.name}, nodes {NODES[0]}..{NODES[-1]}; the "
                 f"provider simulator on {sim.url}; state in {tmp}\n")
        say.text("policy: Xid 119 and 95 reboot automatically (rule P2:approvals[0]); "
                 "migrate always needs a person\n\n")
        provider = HttpProvider(sim.url, connect_timeout=2, read_timeout=30)
        controller = Controller(slurm=cluster, provider=provider, store=store, policy=policy,
                                notifier=Notifier(tmp / "state" / "notifications.jsonl"))
        jid = backend.submit_job(FAULTY, job_seconds)
        say.say(FAULTY, f"job {jid} is running; it ends in {job_seconds:.0f}s")
        for n in NODES:
            node_check(n)
        say.say("*", f"all nodes healthy; the controller runs a cycle every {interval}s")
        say.report(controller.cycle())
        replay[FAULTY].kernel_says(XID_LINE)
        say.say(FAULTY, f"FAULT: the kernel logs {XID_LINE}")
        say.told(XID_MESSAGE, "(the kernel's message above)")
        node_check(FAULTY)
        boot = cluster.node(FAULTY).boot_time

        def health_check_at_boot() -> None:
            nonlocal boot
            now_boot = cluster.node(FAULTY).boot_time
            if now_boot != boot and now_boot is not None:
                boot = now_boot
                if isinstance(backend, MemoryBackend):
                    replay[FAULTY].boot()  # the lab's reboot does this itself
                say.say(FAULTY, "booted (new boot id, clean kernel log); HealthCheckProgram runs")
                if node_check(FAULTY) == 0:
                    say.say(FAULTY, "node check: healthy")

        ok = _drive(controller, cluster, say, store, deadline, interval, start,
                    health_check_at_boot)
        provider.close()
        stats = sim.stats()
    rems = [r for r in store.load().remediations if r.node == FAULTY]
    if ok and not say.as_json:
        rem = rems[-1]
        out.write("\naudit record (SPEC P4):\n")
        out.write(f"  remediation {rem.id}: {rem.action.value} of {rem.node} for {rem.fault}\n")
        out.write(f"  requested by {rem.requested_by}; approved by "
                  f"{rem.approved_by or 'rule ' + str(rem.approval_rule)}; action chosen by "
                  f"{rem.action_rule}\n")
        for phase, at in rem.phase_times.items():
            out.write(f"  {phase:<10} {at.isoformat()}\n")
        out.write(f"  provider actions executed per idempotency key: {stats['executed']}\n")
        out.write(f"\n{FAULTY} was repaired and is back in service.\n")
    say.result({"ok": ok, "exit": 0 if ok else 1, "node": FAULTY,
                "remediation": rem_json(rems[-1]) if rems else None,
                "executed_per_key": stats["executed"]})
    return 0 if ok else 1


def _drive(controller: Controller, cluster: SlurmClient, say: Narrator, store: Store,
           deadline: float, interval: float, start: float, between: Callable[[], None],
           sleep: Callable[[float], None] = time.sleep) -> bool:
    while time.monotonic() - start < deadline:
        between()
        say.report(controller.cycle())
        rems = [r for r in store.load().remediations if r.node == FAULTY]
        if rems and rems[-1].phase is Phase.DONE and not cluster.node(FAULTY).drained:
            return True
        if rems and rems[-1].phase.terminal and rems[-1].phase is not Phase.DONE:
            say.say(FAULTY, f"remediation ended {rems[-1].phase.value}")
            return False
        sleep(interval)
    say.say(FAULTY, f"not finished after {deadline:.0f}s")
    return False
