"""What the node side costs slurmctld (issue 43), counted by slurmctld itself on a
private Slurm 22.05 lab: ``sdiag -r`` (counters to zero), the runs, then sdiag's "Remote
Procedure Call statistics by message type" (tests/lab.py reads it). Slow (it starts a
lab), so `make bench` runs it only with ``--lab``. Alone:

    python benchmarks/slurmctld_rpcs.py [--runs N]

Measured, per run, by RPC type (node reads: REQUEST_NODE_INFO / _SINGLE; the partition
read scontrol and sinfo add to each: REQUEST_PARTITION_INFO; writes: REQUEST_UPDATE_NODE):

* `slurm-heal check` (HealthCheckProgram) on a healthy node with nothing changed, on a
  run that finds a new Xid 79, and on a run whose heartbeat is due;
* the Prolog and the Epilog (``--mode prolog`` / ``epilog``), healthy and with a new Xid
  (each);
* the node agent (`slurm-heal agent --interval 2`): a healthy window of full checks and
  kernel-log wake-ups (an informational ``NVRM: GPU at PCI:`` line: a needle, no fault),
  then a new Xid 79;
* LBNL NHC from its vendored source (benchmarks/nhc.py), ``NHC_RM=slurm``, on the same
  lab node: a passing configuration, and one whose check fails (NHC drains).

Then slurmctld's RPC load at 10,000 and 100,000 nodes at the default HealthCheckInterval
(300 s): the healthy per-run counts times nodes / 300 s, plus the heartbeat's counts times
nodes / heartbeat (30 min). Nothing on the node side polls Slurm while it measures:
every count is the tool's own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from tests.lab import NODE_READS, NODE_WRITES, PARTITION_READS, Lab, slurm_missing  # noqa: E402

Row = tuple[str, str, str, str]
INTERVAL = 300.0  # slurm.conf HealthCheckInterval, the default the docs recommend
HEARTBEAT = 1800.0  # [check] heartbeat's default
NOISE = "6,1,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready\n"
XID = ("2,{seq},{usec},-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has "
       "fallen off the bus.\n")
# A kernel-log needle with no fault: wakes the agent, finds nothing.
WAKE = "6,{seq},{usec},-;NVRM: GPU at PCI:0000:3b:00: GPU-0a1b2c3d-0000-1111-2222-333344445555\n"


def replay_root(root: Path, boot_id: str = "boot-0") -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    (root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
    (root / "dev/kmsg").write_text(NOISE)
    return root


def own(counts: dict[str, int]) -> dict[str, int]:
    """The RPCs a tool sent: slurmd's own messages to slurmctld (MESSAGE_*: its
    registration, epilog completions) are left out."""
    return {k: v for k, v in counts.items() if not k.startswith("MESSAGE_")}


def append(root: Path, line: str) -> None:
    with (root / "dev/kmsg").open("a") as fh:
        fh.write(line)


class Bench:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.seq = 1000

    def env(self, root: Path) -> dict[str, str]:
        return dict(self.lab.env, SLURM_HEAL_ROOT=str(root),
                    PATH=self.lab.path_prefix + "/usr/bin:/bin")

    def check(self, root: Path, node: str, *extra: str) -> int:
        return subprocess.run([sys.executable, "-m", "slurm_heal.checks", "--node", node,
                               *extra], env=self.env(root), capture_output=True,
                              timeout=120).returncode

    def xid(self, root: Path) -> None:
        self.seq += 1
        append(root, XID.format(seq=self.seq, usec=200_000_000 + self.seq))

    def counted(self, runs: int, fn: Callable[[], object]) -> dict[str, float]:
        """RPCs by type per run of ``fn``, ``runs`` runs after one reset."""
        self.lab.reset_rpc_counts()
        for _ in range(runs):
            fn()
        total = Counter(own(self.lab.rpc_counts()))
        return {k: v / runs for k, v in total.items()}

    def faulted(self, times: int, node: str, root: Path, run: Callable[[], object]) -> dict[str, float]:
        """RPCs of the one run that finds a new Xid 79, averaged over ``times``; between
        them the node "reboots" (new boot id, fresh log) and a run clears the drain."""
        total: Counter[str] = Counter()
        for i in range(times):
            replay_root(root, f"boot-f{self.seq}-{i}")
            self.check(root, node)  # the new boot: clears our drain (not counted)
            self.xid(root)
            self.lab.reset_rpc_counts()
            run()
            total.update(own(self.lab.rpc_counts()))
            if "DRAIN" not in self.lab.state(node):
                raise RuntimeError(f"{node} was not drained for the Xid 79")
        replay_root(root, f"boot-end-{self.seq}")
        self.check(root, node)
        return {k: v / times for k, v in total.items()}


def words(per_run: dict[str, float]) -> str:
    def n(kinds: tuple[str, ...]) -> float:
        return sum(per_run.get(k, 0.0) for k in kinds)

    parts = [f"node read {n(NODE_READS):g}", f"partition read {n(PARTITION_READS):g}",
             f"node update {n(NODE_WRITES):g}"]
    other = {k: v for k, v in per_run.items()
             if k not in NODE_READS + PARTITION_READS + NODE_WRITES}
    parts += [f"{k.removeprefix('REQUEST_').lower()} {v:g}" for k, v in sorted(other.items())]
    return ", ".join(parts)


def by_type(per_run: dict[str, float]) -> str:
    return "; ".join(f"{k} {v:g}" for k, v in sorted(per_run.items())) or "no RPC"


def nhc_tree(base: Path) -> Path | None:
    """NHC's vendored tree (benchmarks/nhc.py), its helpers made executable in a copy
    (what its `make install` does; the tarball keeps them 0644)."""
    import nhc

    tree = nhc.build()
    if tree is None:
        return None
    helpers = base / "nhc-helpers"
    shutil.copytree(tree / "helpers", helpers)
    for f in helpers.iterdir():
        f.chmod(0o755)
    return tree


def nhc_run(tree: Path, helpers: Path, conf: Path, node: str, env: dict[str, str]) -> int:
    return subprocess.run(
        ["bash", str(tree / "nhc"), "-D", str(tree), "-c", str(conf), "-l", "/dev/null",
         "-t", "60", f"INCDIR={tree / 'scripts'}", f"HELPERDIR={helpers}",
         f"RESULTFILE={helpers.parent / 'nhc.result'}", f"HOSTNAME={node}", "NHC_RM=slurm"],
        env=env, capture_output=True, timeout=120).returncode


def rate(per_run: dict[str, float], per_beat: dict[str, float] | None, nodes: int,
         kinds: tuple[str, ...]) -> float:
    """RPCs a second of ``kinds`` from ``nodes`` healthy nodes: a run every
    HealthCheckInterval, plus the heartbeat's every HEARTBEAT."""
    r = sum(per_run.get(k, 0.0) for k in kinds) * nodes / INTERVAL
    if per_beat is not None:
        r += sum(per_beat.get(k, 0.0) for k in kinds) * nodes / HEARTBEAT
    return r


def load(per_run: dict[str, float], per_beat: dict[str, float] | None, nodes: int) -> str:
    return (f"{rate(per_run, per_beat, nodes, NODE_READS):.1f} node reads/s, "
            f"{rate(per_run, per_beat, nodes, PARTITION_READS):.1f} partition reads/s, "
            f"{rate(per_run, per_beat, nodes, NODE_WRITES):.1f} node updates/s")


def rows(runs: int = 10, faults: int = 3) -> list[Row]:
    missing = slurm_missing()
    if missing:
        return [("slurmctld RPCs per node-side run (lab)", "not run", "",
                 f"Slurm is not installed here ({', '.join(missing)})")]
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="slurm-heal-rpcs-") as tmp:
        base = Path(tmp)
        os.chmod(tmp, 0o755)
        lab = Lab(base / "lab", nodes=4)
        lab.start()
        agent: subprocess.Popen[bytes] | None = None
        try:
            b = Bench(lab)
            n1, n2, n3, n4 = lab.nodes
            root = replay_root(base / "check")
            b.check(root, n1)  # the first run publishes (the state is new)
            healthy = b.counted(runs, lambda: b.check(root, n1))
            fault = b.faulted(faults, n1, root, lambda: b.check(root, n1))
            conf = base / "beat.toml"
            conf.write_text('[check]\nheartbeat = "1s"\n')
            beat_root = replay_root(base / "beat")
            b.check(beat_root, n2, "--check-config", str(conf))
            time.sleep(1.2)
            beat = b.counted(1, lambda: b.check(beat_root, n2, "--check-config", str(conf)))
            target = "<= NHC's reads; writes on change + heartbeat"
            out.append(("slurmctld RPCs, node check, healthy run, nothing changed (lab 22.05, "
                        "sdiag)", f"{words(healthy)}", target,
                        f"per run over {runs} runs: {by_type(healthy)}"))
            out.append(("slurmctld RPCs, node check, the run that finds a new Xid 79",
                        words(fault), "one read; Extra + drain at once",
                        f"per run over {faults} faults: {by_type(fault)}"))
            out.append(("slurmctld RPCs, node check, the run whose heartbeat is due (every "
                        "30 min by default)", words(beat), "one read, one write",
                        by_type(beat)))
            pro_root = replay_root(base / "prolog")
            b.check(pro_root, n3, "--mode", "prolog")
            for mode in ("prolog", "epilog"):
                per = b.counted(runs, lambda mode=mode: b.check(pro_root, n3, "--mode", mode))
                out.append((f"slurmctld RPCs, {mode.capitalize()}, healthy run", words(per),
                            "no RPC", f"per run over {runs} runs: {by_type(per)}"))
            pro_fault = b.faulted(faults, n3, pro_root,
                                  lambda: b.check(pro_root, n3, "--mode", "prolog"))
            out.append(("slurmctld RPCs, Prolog, the run that finds a new Xid 79",
                        words(pro_fault), "one read; Extra + drain at once",
                        f"per run over {faults} faults: {by_type(pro_fault)}"))
            epi_fault = b.faulted(faults, n3, pro_root,
                                  lambda: b.check(pro_root, n3, "--mode", "epilog"))
            out.append(("slurmctld RPCs, Epilog, the run that finds a new Xid 79",
                        words(epi_fault), "one read; Extra + drain at once",
                        f"per run over {faults} faults: {by_type(epi_fault)}"))

            agent_root = replay_root(base / "agent")
            console = shutil.which("slurm-heal", path=str(Path(sys.executable).parent)) \
                or "slurm-heal"
            env = dict(b.env(agent_root), PATH=f"/usr/bin:/bin:{Path(console).parent}")
            agent = subprocess.Popen([console, "agent", "--node", n4, "--interval", "2"],
                                     env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(4)  # its first full checks (the first one publishes)
            window, wakes = 20.0, 10
            lab.reset_rpc_counts()
            for _ in range(wakes):
                b.seq += 1
                append(agent_root, WAKE.format(seq=b.seq, usec=300_000_000 + b.seq))
                time.sleep(window / wakes)
            quiet = Counter(own(lab.rpc_counts()))
            lab.reset_rpc_counts()
            b.xid(agent_root)
            time.sleep(2.0)  # no polling of Slurm while counting
            agent_fault = own(lab.rpc_counts())
            drained = "DRAIN" in lab.state(n4)
            agent.terminate()  # its full checks of the drained node would count below
            agent.wait(timeout=10)
            agent = None
            full = window / 2.0
            out.append(("slurmctld RPCs, node agent, healthy: full checks every 2 s and "
                        "kernel-log wake-ups", f"{words({k: v / full for k, v in quiet.items()})}",
                        "no RPC until a finding changes",
                        f"{window:g} s: ~{full:g} full checks and {wakes} wake-ups, in all: "
                        f"{by_type(dict(quiet))}"))
            out.append(("slurmctld RPCs, node agent, a new Xid 79", words(agent_fault),
                        "one read; Extra + drain at once",
                        f"the 2 s after it: {by_type(agent_fault)}; drained: {drained} (the "
                        "wake-up's run: a read, Extra and the drain; the full check after it "
                        "a read: S8's is it still drained, one a run while the fault stands)"))

            tree = nhc_tree(base)
            nhc_healthy: dict[str, float] | None = None
            if tree is None:
                import nhc

                out.append(("slurmctld RPCs, LBNL NHC", "not run", "", nhc.missing()))
            else:
                helpers = base / "nhc-helpers"
                ok = base / "nhc-ok.conf"
                ok.write_text("* || check_fs_mount_rw -f /\n* || check_file_test -r /etc/passwd\n")
                bad = base / "nhc-bad.conf"
                bad.write_text("* || check_file_test -r /nonexistent-fault-marker\n")
                nhc_run(tree, helpers, ok, n1, lab.env)
                nhc_healthy = b.counted(runs, lambda: nhc_run(tree, helpers, ok, n1, lab.env))
                nhc_fault = b.counted(1, lambda: nhc_run(tree, helpers, bad, n1, lab.env))
                lab.scontrol("update", f"nodename={n1}", "state=resume", check=False)
                out.append(("slurmctld RPCs, LBNL NHC (HealthCheckProgram), healthy run",
                            words(nhc_healthy), "reference",
                            f"same lab node, NHC_RM=slurm, per run over {runs} runs: "
                            f"{by_type(nhc_healthy)} (node-mark-online: `sinfo -n`, the "
                            "one-node read ours is too)"))
                out.append(("slurmctld RPCs, LBNL NHC, a failing check", words(nhc_fault),
                            "reference", f"{by_type(nhc_fault)} (node-mark-offline: `sinfo "
                            "-n`, `scontrol update State=DRAIN`)"))
            for nodes in (10_000, 100_000):
                ours = load(healthy, beat, nodes)
                theirs = load(nhc_healthy, None, nodes) if nhc_healthy is not None else "not run"
                verdict = ""
                if nhc_healthy is not None:
                    met = rate(healthy, beat, nodes, NODE_READS) <= rate(
                        nhc_healthy, None, nodes, NODE_READS)
                    verdict = ": met" if met else ": MISSED"
                out.append((f"slurmctld load from healthy nodes, {nodes:,} nodes, "
                            f"HealthCheckInterval={INTERVAL:g} s", ours,
                            f"<= NHC's reads{verdict}",
                            f"extrapolated from the counts above (heartbeat every "
                            f"{HEARTBEAT / 60:g} min); NHC: {theirs}; before issue 43 "
                            "(its measurement: a write and 1.4 node + 1.4 partition reads a "
                            f"run): {nodes / INTERVAL:.0f} node updates/s, "
                            f"{1.4 * nodes / INTERVAL:.0f} node reads/s of the whole node "
                            "table (scontrol show node) and as many partition reads/s"))
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=10)
            lab.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--faults", type=int, default=3)
    args = ap.parse_args()
    for r in rows(args.runs, args.faults):
        print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
