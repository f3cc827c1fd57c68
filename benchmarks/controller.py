"""Controller-side benchmarks (issues 13, 20): decide() at 1k/10k/100k nodes cycle after
cycle (creating, next, nothing changed), the whole cycle, `simulate` of a 10k-node day,
the store's write. Called by benchmarks/run.py; alone:

    python benchmarks/controller.py [--quick] [--store]   (--store: the store's rows only)
    python benchmarks/controller.py --cycle-once DIR   (one cycle in this process on a
                                                        cluster `prepare` wrote; prints JSON
                                                        with its times and peak RSS)

Every figure is the median of several runs, wall and CPU time both: the machine these
ran on is shared, so the wall time carries other people's work and the CPU time (this
process's user + system) is the steadier of the two. Sizes and seeds are fixed
(benchmarks/scale.py). Nothing here is run by the test suite.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import scale  # noqa: E402

from slurm_heal.catalog import load as load_catalog  # noqa: E402
from slurm_heal.config import policy_from_dict  # noqa: E402
from slurm_heal.models import Plan, Remediation, State  # noqa: E402
from slurm_heal.policy import decide, decide_counted  # noqa: E402
from slurm_heal.policy.incremental import Decide  # noqa: E402
from slurm_heal.simulation import Simulation, parse_scenario  # noqa: E402
from slurm_heal.slurm.cli import CliSlurm, parse_sinfo_json, parse_squeue_json  # noqa: E402
from slurm_heal.store import DEFAULT_AUDIT_RETENTION, DEFAULT_KEEP, Store, archived  # noqa: E402
from slurm_heal.types import ClusterView  # noqa: E402

POLICY = policy_from_dict({"approvals": {"default": "auto"}})
CATALOG = load_catalog()  # an input of decide(), read once at the edge (issue 33)
Row = tuple[str, str, str, str]  # benchmark, result, target (met / MISSED), notes


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float, Any]:
    """Median wall and median CPU time of ``runs`` calls, in ms, and the last result."""
    wall, cpu = [], []
    out = None
    for _ in range(runs):
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu), out


def verdict(cpu_ms: float, limit_ms: float, what: str) -> str:
    return f"{what}: {'met' if cpu_ms <= limit_ms else 'MISSED'}"


def retained(state: State, days: timedelta = DEFAULT_KEEP) -> State:
    """What the daemon's retention keeps of a year (closed records of the last 14 days,
    its default hot_retention since issue 26; 90 before)."""
    since = scale.NOW - days
    return state.model_copy(update={"remediations": tuple(
        r for r in state.remediations if r.updated >= since)})


def view_of(n: int) -> ClusterView:
    return ClusterView(nodes=parse_sinfo_json(scale.sinfo_json(n)),
                       jobs=parse_squeue_json(scale.squeue_json(n)))


def quiet_before(view: ClusterView) -> ClusterView:
    """The cycle before ``view``: the same nodes, the alerting ones' check published no
    alert yet (their Extra text is a healthy node's)."""
    nodes = []
    for n in view.nodes:
        ours = (n.extra or {}).get("slurm_heal") or {}
        if ours.get("alerts"):
            raw = json.dumps({"slurm_heal": {**ours, "alerts": []}}, separators=(",", ":"))
            n = dataclasses.replace(n, extra_raw=raw, extra=json.loads(raw))
        nodes.append(n)
    return ClusterView(nodes=tuple(nodes), jobs=view.jobs)


def cycle_after(runs: int, before: tuple[ClusterView, State, datetime],
                now: tuple[ClusterView, State, datetime]) -> tuple[float, float, Plan]:
    """One cycle as the controller runs it (`Decide`: check data and the store's index
    kept since the cycle ``before``, which each run replays untimed first; the snapshot
    and the store frozen out of the garbage collector's way, as Controller.cycle does),
    timed: median wall, CPU, plan."""
    wall, cpu = [], []
    plan = Plan()
    for _ in range(runs):
        run = Decide(CATALOG)
        run(*before, POLICY)
        gc.collect()
        gc.freeze()
        c, t = time.process_time(), time.perf_counter()
        plan = run(*now, POLICY)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        gc.unfreeze()
    return statistics.median(wall), statistics.median(cpu), plan


def decide_rows(sizes: tuple[int, ...], quick: bool) -> list[Row]:
    """decide() as the controller calls it, cycle after cycle: the cycle that creates 2 %
    of the cluster's remediations (the one before it saw no alert), the next one, and
    one where nothing changed since the last (targets of issue 20)."""
    rows: list[Row] = []
    for n in sizes:
        runs = 3 if n >= 100_000 else (5 if quick else (11 if n >= 10_000 else 21))
        view = view_of(n)
        year = scale.history(n)
        t0, t1, t2 = (scale.NOW + timedelta(seconds=30 * k) for k in range(-1, 2))
        big = n >= 100_000
        limits = (500.0, 200.0, 100.0) if big else (50.0, 20.0, 10.0)
        wall, cpu, plan = cycle_after(runs, (quiet_before(view), year, t0), (view, year, t1))
        rows.append((f"decide(), {n:,} nodes, 2% alerting (new), 1 year history "
                     f"({len(year.remediations):,} closed)",
                     f"{cpu:.0f} ms", verdict(cpu, limits[0], f"<= {limits[0]:.0f} ms"),
                     f"CPU median of {runs}; wall {wall:.0f} ms; {len(plan.updates)} created"))
        later = year.model_copy(update={"remediations": year.remediations + plan.updates,
                                        "data": plan.data or year.data})
        wall, cpu, plan2 = cycle_after(runs, (view, year, t1), (view, later, t2))
        rows.append((f"decide(), {n:,} nodes, the next cycle ({len(plan.updates)} open)",
                     f"{cpu:.0f} ms", verdict(cpu, limits[1], f"<= {limits[1]:.0f} ms"),
                     f"CPU median of {runs}; wall {wall:.0f} ms; {len(plan2.updates)} updated"))
        t3 = t2 + timedelta(seconds=30)
        wall, cpu, _ = cycle_after(runs, (view, later, t2), (view, later, t3))
        rows.append((f"decide(), {n:,} nodes, a cycle where nothing changed",
                     f"{cpu:.0f} ms", verdict(cpu, limits[2], f"<= {limits[2]:.0f} ms"),
                     f"CPU median of {runs}; wall {wall:.0f} ms"))
        if n == 10_000:
            _, touched_year = decide_counted(view, year, scale.NOW, POLICY, catalog=CATALOG)
            _, touched_none = decide_counted(view, State(), scale.NOW, POLICY, catalog=CATALOG)
            empty = State()
            _, cpu0, _ = timed(partial(decide, view, empty, scale.NOW, POLICY, catalog=CATALOG),
                               runs)
            rows.append((f"decide(), {n:,} nodes, no history, every Extra validated "
                         "(the bare call)", f"{cpu0:.0f} ms", "",
                         f"remediations the rules looked at: {touched_none} without history, "
                         f"{touched_year} with a year of it (the rest is the one index pass)"))
    return rows


def prepare(n: int, base: Path) -> Path:
    """A cluster of ``n`` nodes as the daemon meets it: ``sinfo``/``squeue`` on PATH that
    print the generated 22.05 JSON (stand-ins for Slurm's own commands, so the cycle
    runs the real cli backend: subprocess, capture, parse), and the store the daemon's
    retention keeps (90 days of the year's history). ``--version`` is answered as Slurm
    does (one line; before issue 26 the stand-in printed the whole JSON there too).
    What the stand-ins do not pay is Slurm's own cost of making the answer: the lab
    rows (`lab_rows`) measure that on real commands."""
    bin_dir = base / "bin"
    bin_dir.mkdir(parents=True)
    nodes, jobs = scale.sinfo_json(n), scale.squeue_json(n)
    # The text forms the backend reads (issue 26), with the separator it was given in
    # place of the mark (`sed`, paid as the commands' CPU); the JSON for `--json`.
    texts = {"sinfo": scale.sinfo_text(nodes), "scontrol": scale.scontrol_text(nodes),
             "squeue": scale.squeue_text(jobs)}
    cut = {"sinfo": 's=${6#NodeList:0}; s=${s%%,*}', "squeue": 's=${5#%A}; s=${s%%%u*}',
           "scontrol": "s="}
    for cmd, text in (("sinfo", nodes), ("squeue", jobs), ("scontrol", "{}")):
        (base / f"{cmd}.json").write_text(text)
        (base / f"{cmd}.txt").write_text(texts[cmd])
        script = bin_dir / cmd
        script.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "slurm 22.05.8"; '
                          f'exit 0; fi\nfor a in "$@"; do [ "$a" = --json ] && exec cat '
                          f'"{base / (cmd + ".json")}"; done\n{cut[cmd]}\n'
                          f'exec sed "s/{scale.SEP_MARK}/$s/g" "{base / (cmd + ".txt")}"\n')
        script.chmod(0o755)
    seed_store(base / "seed", n)
    return base


def one_cycle(base: Path, state_dir: Path) -> dict[str, float]:
    """One controller cycle as the daemon runs it: snapshot (the text reads of issue 26
    through the cli backend), load, decide, apply (the store write), each part timed."""
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{base / 'bin'}:{old_path}"
    try:
        t0 = time.perf_counter()
        view = CliSlurm(timeout=300).snapshot()
    finally:
        os.environ["PATH"] = old_path
    t1 = time.perf_counter()
    store = Store(state_dir)
    state = store.load()
    t2 = time.perf_counter()
    plan = Decide(CATALOG)(view, state, scale.NOW, POLICY)  # what Controller.cycle calls
    t3 = time.perf_counter()
    store.apply(plan, scale.NOW)
    t4 = time.perf_counter()
    return {"parse": (t1 - t0) * 1000, "load": (t2 - t1) * 1000, "decide": (t3 - t2) * 1000,
            "write": (t4 - t3) * 1000, "total": (t4 - t0) * 1000,
            "store_mb": store.file.stat().st_size / 1e6, "created": len(plan.updates),
            "json_mb": sum((base / f).stat().st_size for f in ("sinfo.txt", "scontrol.txt",
                                                               "squeue.txt")) / 1e6}


def seed_store(path: Path, n: int) -> None:
    store = Store(path)
    state = retained(scale.history(n))
    store.apply(Plan(updates=state.remediations), scale.NOW - timedelta(minutes=1))


def cycle_rows(quick: bool) -> list[Row]:
    n = 10_000
    runs = 3 if quick else 7
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
        base = prepare(n, Path(tmp))
        parts: list[dict[str, float]] = []
        cpu = []
        for i in range(runs):
            d = Path(tmp) / f"run{i}"
            shutil.copytree(base / "seed", d)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            c = time.process_time()
            parts.append(one_cycle(base, d))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append((time.process_time() - c + after.ru_utime - before.ru_utime
                        + after.ru_stime - before.ru_stime) * 1000)
        med = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
        cpu_med = statistics.median(cpu)
        rows.append((f"whole cycle, {n:,} nodes (scontrol show node -o, squeue -o: "
                     f"{med['json_mb']:.0f} MB, "
                     "parsed; load, decide, store write)",
                     f"{cpu_med:.0f} ms", verdict(cpu_med, 1000, "<= 1 s"),
                     f"CPU median of {runs} (cat included); wall {med['total']:.0f} ms = "
                     f"snapshot {med['parse']:.0f} + load {med['load']:.0f} + decide "
                     f"{med['decide']:.0f} + write {med['write']:.0f}; {med['created']:.0f} "
                     f"created; store {med['store_mb']:.1f} MB ({DEFAULT_KEEP.days} days kept)"))
    # Peak memory at 100k: the files are made here, the cycle runs in a fresh process.
    with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
        prepare(100_000, Path(tmp))
        out = subprocess.run([sys.executable, __file__, "--cycle-once", tmp], check=True,
                             capture_output=True, text=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    rows.append(("whole cycle, 100,000 nodes, peak memory (fresh process, VmHWM)",
                 f"{got['rss_mb']:.0f} MB", "<= 300 MB: " + ("met" if got["rss_mb"] <= 300
                                                            else "MISSED"),
                 f"wall {got['total'] / 1000:.1f} s (snapshot {got['parse'] / 1000:.1f} s, "
                 f"decide {got['decide']:.0f} ms, write {got['write']:.0f} ms); Slurm's answers "
                 f"are {got['json_mb']:.0f} MB; {got.get('why', '')}"))
    return rows


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM of /proc/self/status, the high-water mark of its own
    memory. Not ru_maxrss: Linux carries the parent's RSS across fork and exec into it,
    so a child of the benchmark (which holds the generated 247 MB of JSON and the year's
    history) reported the parent's 570 MB, not its own 350 MB (issue 26)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cycle_once(base: Path) -> dict[str, Any]:
    """One cycle in this (fresh) process, its peak RSS, and where the memory went."""
    import tracemalloc

    state_dir = base / "run"
    shutil.copytree(base / "seed", state_dir)
    got: dict[str, Any] = dict(one_cycle(base, state_dir))
    got["rss_mb"] = peak_rss_mb()
    # Where it goes (a second, traced snapshot): the text Slurm printed vs the objects.
    tracemalloc.start()
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{base / 'bin'}:{old_path}"
    try:
        view = CliSlurm(timeout=300).snapshot()
    finally:
        os.environ["PATH"] = old_path
    _, peak = tracemalloc.get_traced_memory()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    got["why"] = (f"traced: the snapshot peaks at {peak / 1e6:.0f} MB while parsing and keeps "
                  f"{held / 1e6:.0f} MB of NodeInfo/JobInfo for {len(view.nodes):,} nodes and "
                  f"{len(view.jobs):,} jobs")
    return got


def day_scenario(n: int = 10_000, alerts: int = 200, seed: int = scale.SEED,
                 every: int | None = None) -> dict[str, Any]:
    """The 10k-node day: ``alerts`` Xid alerts (fixed seed) at random times of the day,
    or one every ``every`` seconds from the start; auto-approved reboots (Xid 119/95
    and 48/63/64 mixed), in pools of 64."""
    rng = random.Random(seed)
    faults = ["gpu.xid.119", "gpu.xid.95", "gpu.xid.48", "gpu.xid.63", "gpu.xid.94"]
    events = []
    for k in range(alerts):
        node = scale.node_name(rng.randrange(n))
        at = rng.randrange(86_000)
        events.append({"at": f"+{at if every is None else every * k}s", "type": "alert",
                       "node": node, "fault": faults[k % len(faults)]})
    return {"start": "2026-06-01T00:00:00Z", "until": "+1d",
            "config": {"approvals": {"default": "auto"}},
            "nodes": [{"name": scale.node_name(i), "pool": f"gpu-{i // scale.POOL_SIZE:04d}"}
                      for i in range(n)],
            "events": events}


def simulate_rows(quick: bool) -> list[Row]:
    runs = 1 if quick else 3
    out: list[Row] = []
    for doc, what in ((day_scenario(every=60), "one a minute over the first 200 minutes"),
                      (day_scenario(), "at random times of the day")):
        def run(doc: dict[str, Any] = doc) -> tuple[int, int]:
            result = Simulation(parse_scenario(doc, "bench")).run()
            return len(result.state.remediations), len(result.records)

        wall, cpu, (rems, _) = timed(run, runs)
        wall_p, cpu_p, _ = timed(lambda doc=doc: parse_scenario(doc, "bench"), runs)
        out.append((f"simulate, 10,000 nodes, 200 alerts {what}, one virtual day",
                    f"{cpu / 1000:.1f} s", verdict(cpu, 10_000, "<= 10 s"),
                    f"CPU median of {runs}; wall {wall / 1000:.1f} s; {rems} remediations; "
                    f"reading the scenario {cpu_p:.0f} ms"))
    return out


def write_one(store: Store, rem: Remediation) -> None:
    """One changed record: the whole document is rewritten (temp file, fsync, rename)."""
    store.apply(Plan(updates=(rem.model_copy(update={"updated": datetime.now(timezone.utc)}),)),
                scale.NOW)


def cold_load(path: Path) -> State:
    """A read by a new Store (a restarted daemon, a CLI command): nothing kept."""
    return Store(path).load()


def read_write(store: Store, rem: Remediation) -> None:
    """What a process that opens the store pays: a cold read (a new Store: nothing kept
    from before) and one changed record written (apply reads under the lock, writes)."""
    fresh = Store(store.dir)
    fresh.load()
    write_one(fresh, rem)


def daemon_cycle(store: Store, rem: Remediation | None) -> None:
    """The daemon's store work in one cycle on its long-lived Store: load, then apply
    (the fresh read under the lock, and the write when the plan changed something)."""
    store.load()
    if rem is None:
        store.apply(Plan(), scale.NOW)
    else:
        write_one(store, rem)


def store_rows(quick: bool) -> list[Row]:
    """Issue 26: the hot store (what the daemon's retention keeps: DEFAULT_KEEP, 14
    days) read + written at 10k and 100k, a node's history out of a year's archive, and
    the 90-day document of before for comparison."""
    rows: list[Row] = []
    runs = 5 if quick else 11
    for n in (10_000, 100_000):
        year = scale.history(n)
        with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
            store = Store(Path(tmp))
            state = retained(year, DEFAULT_KEEP)
            store.apply(Plan(updates=state.remediations), scale.NOW)
            size = store.file.stat().st_size
            last = state.remediations[-1]
            wall, cpu, _ = timed(partial(read_write, store, last), runs)
            wall_l, cpu_l, _ = timed(partial(cold_load, store.dir), runs)
            wall_w, cpu_w, _ = timed(partial(write_one, store, last), runs)
            wall_q, cpu_q, _ = timed(partial(daemon_cycle, store, None), runs)
            wall_c, cpu_c, _ = timed(partial(daemon_cycle, store, last), runs)
            target = verdict(cpu, 200.0, "<= 200 ms") if n >= 100_000 else ""
            rows.append((f"store read + write, {n:,}-node cluster, hot store ({DEFAULT_KEEP.days} "
                         f"days kept, {len(state.remediations):,} records)", f"{cpu:.0f} ms",
                         target,
                         f"CPU median of {runs} (cold read by a new Store + one record "
                         f"written); wall {wall:.0f} ms (fsync included); {size / 1e6:.1f} MB; "
                         f"read alone {cpu_l:.0f} ms CPU / {wall_l:.0f} ms wall, write alone "
                         f"{cpu_w:.0f} / {wall_w:.0f} ms"))
            rows.append((f"store in the daemon's cycle, {n:,}-node cluster, hot store",
                         f"{cpu_q:.0f} ms", "",
                         f"CPU median of {runs}: load + apply on the daemon's Store (the same "
                         f"bytes: no parse, the records and their index kept); wall "
                         f"{wall_q:.0f} ms; a cycle that changes a record: {cpu_c:.0f} ms CPU, "
                         f"{wall_c:.0f} ms wall"))
        with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
            archive = Path(tmp) / "audit.jsonl"
            archive.write_bytes(b"".join(
                json.dumps({"archived_at": scale.NOW.isoformat(),
                            "remediation": r.model_dump(mode="json")},
                           separators=(",", ":")).encode() + b"\n"
                for r in year.remediations))
            node = year.remediations[len(year.remediations) // 2].node
            wall_a, cpu_a, got = timed(partial(archived, archive, node=node), runs)
            rows.append((f"a node's history from the audit archive, {n:,}-node cluster, "
                         f"a year archived ({len(year.remediations):,} records)",
                         f"{cpu_a:.0f} ms", "",
                         f"CPU median of {runs}; wall {wall_a:.0f} ms; "
                         f"{archive.stat().st_size / 1e6:.0f} MB read, {len(got)} record(s) "
                         "parsed (the lines without the node's name are skipped)"))
        if n >= 100_000:
            with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
                store = Store(Path(tmp))
                state = retained(year, DEFAULT_AUDIT_RETENTION)
                store.apply(Plan(updates=state.remediations), scale.NOW)
                runs90 = 3
                wall, cpu, _ = timed(partial(read_write, store, state.remediations[-1]),
                                     runs90)
                rows.append((f"store read + write, {n:,}-node cluster, 90 days kept as before "
                             f"({len(state.remediations):,} records; for comparison)",
                             f"{cpu:.0f} ms", "",
                             f"CPU median of {runs90}; wall {wall:.0f} ms; "
                             f"{store.file.stat().st_size / 1e6:.1f} MB"))
    return rows


def rows(quick: bool = False, sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> list[Row]:
    out: list[Row] = []
    for part in (lambda: decide_rows(sizes, quick), lambda: cycle_rows(quick),
                 lambda: simulate_rows(quick), lambda: store_rows(quick)):
        out.extend(part())
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--cycle-once":
        print(json.dumps(cycle_once(Path(sys.argv[2]))))
        return 0
    only_store = "--store" in sys.argv  # the store's rows alone (issue 26)
    for r in (store_rows("--quick" in sys.argv) if only_store else rows(quick="--quick" in sys.argv)):
        print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
