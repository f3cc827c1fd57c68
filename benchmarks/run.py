"""Every benchmark (`make bench`): what the performance targets are measured with; one table.

    python benchmarks/run.py [--runs N] [--size-mb MB] [--big-mb MB] [--quick] [--lab]
                             [--markdown] [--skip-node-check] [--skip-controller]
                             [--skip-api]

Node side (issue 26), measured as an installed node runs it (a venv with the package on
its path and the console script as pip writes it):

1. ``slurm-heal check --dry-run --json`` on a healthy replayed node without GPUs, the
   same through ``python -m slurm_heal.checks``, the same on a healthy 8-GPU NVIDIA node
   with every detector on (kernel log, mounts, GPU count, services, NVIDIA with
   nvidia-smi XML + NVLink + DCGM, AMD, InfiniBand, network, disk; the tools are stubs
   that print golden files at once), and LBNL NHC's typical configuration, built from its
   public source (benchmarks/nhc.py): side by side, interleaved runs, interpreter start
   included, wall time (median, p90) beside CPU time (user + system of the process and
   its children), and the ratios to NHC;
2. kernel log scanning in MB/s over a generated log (default 200 MB, and a 1 GB one),
   one ``grep -F`` pass for all needles beside one ``bytes.find`` pass per needle, by the
   wall clock and per CPU second;
2b. a fault storm: 1,000 Xid lines (the real Xid 13/43 storm of gpud's ``dmesg --decode
   --time-format=iso`` capture, tests/data/real/kernlog, repeated) scanned and folded into
   the latched faults (`kernlog.scan` + `kernlog.latch`): the cost per event (issue 35);
3. an incremental check with nothing new on a 200 MB vs a 2 MB log (the cost must not
   depend on the log's size);
4. ``run_check`` in process (the check's own work without the interpreter);
5. the NVML read of all GPUs (nvidia-ml-py), where a driver and GPUs are present.

Targets (issue 26, docs/checks.md): the healthy check <= 100 ms and <= 0.7x NHC, <= 1.0x
NHC with every detector on; scanning >= 500 MB/s; a fault storm <= 10 us an event (1,000
Xid lines <= 10 ms).

Controller side (benchmarks/controller.py, issues 13 and 20): decide() at 1k/10k/100k
nodes (the cycle that creates 2 % of the remediations, the next one, one where nothing
changed), the whole cycle at 10k (Slurm JSON parsed, load, decide, store write), peak
memory at 100k, `simulate` of a 10k-node day (200 alerts one a minute, and at random
times), the store's write. With ``--lab`` (slow: it starts a
private Slurm lab), fault to drain on the lab (benchmarks/fault_to_drain.py), the
snapshot on real Slurm commands at 10,000 configured nodes (benchmarks/snapshot_lab.py),
and what the node side costs slurmctld, RPCs by type per run of the check, the agent, the
Prolog/Epilog and LBNL NHC counted with sdiag, extrapolated to 10k and 100k nodes
(benchmarks/slurmctld_rpcs.py, issue 43).

serve (benchmarks/api_load.py, issue 34 item 3): a real `slurm-heal serve` on the store of
a 10,000-node cluster, 100 clients at once on /api/v1/overview and /api/v1/breaker, and
/healthz during a 200-connection slowloris, on 127.0.0.1.

Benchmarks are never run by the test suite. ``--markdown`` prints the table as the
README carries it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from slurm_heal.checks import kernlog, sources  # noqa: E402

NOISE = [
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{n:x}: link becomes ready",
    "nvidia-nvswitch{m}: open (major=510)",
    "perf: interrupt took too long (2509 > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
    "EXT4-fs (nvme1n1): mounted filesystem with ordered data mode. Opts: (null)",
    "audit: type=1400 audit({n}.123:{m}): apparmor=\"DENIED\" operation=\"open\" profile=\"snap\"",
    "NVRM: GPU4 RPC history (CPU -> GSP): entry {n} function 76 GSP_RM_CONTROL 0x20802a02",
    "eth0: renamed from veth{n:x}",
    "device veth{n:x} entered promiscuous mode",
]
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid={n}, name=python3, GPU has fallen off the bus."


def make_log(path: Path, size: int, faults_every: int = 10 << 20) -> int:
    """A kmsg-record log of about ``size`` bytes with an Xid line every ~10 MB."""
    lines = []
    seq = 0
    for n in range(20000):
        lines.append(f"6,{seq},{n * 1000},-;{NOISE[n % len(NOISE)].format(n=n, m=n % 8)}\n")
        seq += 1
    block = "".join(lines).encode()
    written = 0
    faults = 0
    with path.open("wb") as fh:
        while written < size:
            fh.write(block)
            written += len(block)
            if written // faults_every > faults:
                fh.write(f"2,{seq},1,-;{XID.format(n=faults)}\n".encode())
                faults += 1
    return faults


def median_ms(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float, float]:
    """Wall median, wall p90 and CPU (user+sys) median of ``runs`` runs, in ms. The CPU
    time barely moves when other work shares the machine; the wall time does."""
    times = []
    cpu = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        # No timeout= here: Popen.wait(timeout) polls with sleeps of up to 50 ms, which
        # would be measured as part of the check.
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        times.append((time.perf_counter() - t) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1], statistics.median(cpu)


def healthy_root(base: Path, log_bytes: int = 0) -> Path:
    root = base
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("bench-boot\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n"
                                      "tmpfs /tmp tmpfs rw 0 0\n")
    (root / "proc/uptime").write_text("12345.67 100.0\n")
    (root / "dev/kmsg").write_bytes(b"".join(
        f"6,{i},{i * 1000},-;{NOISE[i % len(NOISE)].format(n=i, m=i % 8)}\n".encode()
        for i in range(2000)))
    return root


DATA = REPO / "tests" / "data"
REAL_IB = REPO.parent / "shared" / "fixtures" / "real" / "sys-class-infiniband-h100"


def stub(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def all_detectors_root(base: Path, port: int) -> tuple[Path, Path]:
    """A healthy 8-GPU NVIDIA node with every detector configured, and a stub dir."""
    root = healthy_root(base / "root")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    nv = DATA / "nvidia"
    stub(bin_dir, "nvidia-smi", f"""case "$1" in
  -q) exec cat "{nv}/smi-q-x-healthy-8.xml";;
  nvlink) exec cat "{nv}/nvlink-s-healthy-8.txt";;
esac
""")
    stub(bin_dir, "dcgmi", f'exec cat "{nv}/dcgmi-health-healthy-8.json"\n')
    stub(bin_dir, "systemctl", "printf 'Id=slurmd.service\\nLoadState=loaded\\nNRestarts=0\\n'\n")
    (root / "run/systemd/system").mkdir(parents=True)
    for i, bus in enumerate(["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]):
        d = root / f"proc/driver/nvidia/gpus/0000:{bus}:00.0"
        d.mkdir(parents=True)
        (d / "information").write_text(f"Device Minor: {i}\n")
    ib = root / "sys/class/infiniband"
    if REAL_IB.is_dir():
        shutil.copytree(REAL_IB, ib)
    else:  # the same shape as the real H100 capture: 8 NDR ports
        for i in range(8):
            pdir = ib / f"mlx5_{i}" / "ports" / "1"
            (pdir / "counters").mkdir(parents=True)
            for name, text in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                               ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
                (pdir / name).write_text(text + "\n")
            for c in ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors"):
                (pdir / "counters" / c).write_text("0\n")
    conf = root / "etc/slurm-heal/check.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"""[gpus]
expected = 8
[nvidia]
dcgm = "on"
expected = 8
[infiniband]
expected_rate = 400
ports = 8
[network]
endpoints = ["127.0.0.1:{port}"]
[disk]
paths = ["/", "/tmp"]
min_free_percent = 0.001
""")
    return root, bin_dir


def nvml_row(runs: int) -> tuple[str, str, str]:
    """The NVML read of every GPU, where nvidia-ml-py and a driver are present."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # no bindings, no driver: say so
        return ("NVML read of all GPUs (nvidia-ml-py)", "n/a",
                f"not measured here: {type(exc).__name__}: {str(exc)[:60]}")
    from slurm_heal.checks.detectors import nvidia

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        nvidia.gather_nvml()
        times.append((time.perf_counter() - t) * 1000)
    return (f"NVML read of all {count} GPUs (nvidia-ml-py, in process)",
            f"{statistics.median(times):.1f} ms", f"median of {runs}")


def met(value: float, limit: float, text: str, higher: bool = False) -> str:
    ok = value >= limit if higher else value <= limit
    return f"{text}: {'met' if ok else 'MISSED'}"


def node_install(base: Path) -> tuple[str, str]:
    """An installed node's interpreter and console script: a venv with the package on its
    path and the ``slurm-heal`` script as pip writes it (the development venv's editable
    install adds an import hook to every start, which a node installed by pip has not).
    Python 3.10 needs tomli from the development venv: there the development venv is used."""
    if sys.version_info < (3, 11):
        py = sys.executable
        return py, shutil.which("slurm-heal", path=str(Path(py).parent)) or "slurm-heal"
    venv = base / "node-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "slurm_heal.pth").write_text(f"{REPO}\n")
    script = venv / "bin" / "slurm-heal"
    script.write_text(f"#!{py}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                      "from slurm_heal.entry import main\nif __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    return py, str(script)


def endpoint() -> socket.socket:
    """The network detector's endpoint: a listener that accepts (a backlog never drained
    would make later connects wait their whole timeout)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener


def one_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system of the child and its children) of one run, in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # No timeout= here: Popen.wait(timeout) polls with sleeps of up to 50 ms, which would
    # be measured as part of the check.
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def side_by_side(cases: dict[str, tuple[list[str], dict[str, str]]],
                 runs: int) -> dict[str, tuple[float, float, float]]:
    """Each case run ``runs`` times, interleaved (one run of each in turn, the order
    rotated every round), so every case sees the same machine and load. Per case: wall
    median, wall p90 and CPU median, in ms."""
    walls: dict[str, list[float]] = {k: [] for k in cases}
    cpus: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    for i in range(runs):
        for name in names[i % len(names):] + names[:i % len(names)]:
            w, c = one_run(*cases[name])
            walls[name].append(w)
            cpus[name].append(c)
    out = {}
    for name in names:
        w = sorted(walls[name])
        out[name] = (statistics.median(w), w[max(0, int(len(w) * 0.9) - 1)],
                     statistics.median(cpus[name]))
    return out


def scan_rate(path: Path, threshold: int) -> tuple[float, float, int]:
    """A first read of the whole file (read + scan), best of 5: MB/s by the wall clock
    and per CPU second (this process and its grep child), and the events found."""
    best = (0.0, 0.0, 0)
    size = path.stat().st_size
    saved = sources.GREP_MIN_BYTES
    sources.GREP_MIN_BYTES = threshold
    try:
        for _ in range(5):
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            res = kernlog.ScanResult()
            t = time.perf_counter()
            sources.read_file(str(path), None, 1 << 62, res)
            dt = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
                   + c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
            if size / dt / 1e6 > best[0]:
                best = (size / dt / 1e6, size / max(cpu, 1e-9) / 1e6, len(res.events))
    finally:
        sources.GREP_MIN_BYTES = saved
    return best


STORM = Path(__file__).resolve().parent.parent / "tests/data/real/kernlog/gpud-dmesg-decode-iso.log"


def storm_cost(events: int = 1000, distinct: bool = False) -> tuple[float, float, int]:
    """A fault storm of ``events`` real Xid lines scanned and latched, best of 7: wall and
    CPU milliseconds, and the events found (issue 35: <= 10 us an event). ``distinct``:
    every line gets its own stamp (1 us apart, as a real storm's lines have), so that no
    line repeats another byte for byte."""
    from datetime import datetime, timezone

    from slurm_heal import catalog

    lines = [ln for ln in STORM.read_bytes().splitlines() if b"NVRM: Xid" in ln]
    lines = (lines * (events // len(lines) + 1))[:events]
    if distinct:  # "kern  :warn  : 2025-01-21T02:21:33,498559+00:00 NVRM: ..."
        lines = [ln[:15] + datetime.fromtimestamp(1737426093 + i / 1e6, timezone.utc)
                 .isoformat(timespec="microseconds").replace(".", ",").encode() + ln[47:]
                 for i, ln in enumerate(lines)]
        assert len(set(lines)) == len(lines)
    data = b"\n".join(lines) + b"\n"
    cat = catalog.load()
    now = datetime.now(timezone.utc)
    best = (1e9, 1e9, 0)
    for _ in range(7):
        t, c = time.perf_counter(), time.process_time()
        res = kernlog.scan(data, now=now)
        kernlog.latch({}, res.events, kernlog.GpuMap(), now, None,
                      lambda f: cat.get(f).severity, lambda f: cat.get(f).explanation,
                      lambda text: None)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        if wall * 1e3 < best[0]:
            best = (wall * 1e3, cpu * 1e3, len(res.events))
    return best


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def node_check_rows(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, ...]] = []  # (name, result, notes) or (name, result, target, notes)
    import nhc as nhc_build

    with tempfile.TemporaryDirectory(prefix="slurm-heal-bench-") as tmp:
        base = Path(tmp)
        py, console = node_install(base)
        root = healthy_root(base / "healthy")
        root_plain = root
        # Measure an installed node: its modules are byte-compiled (pip does that). The
        # caches go to the temp dir, never into the checkout; PYTHONDONTWRITEBYTECODE
        # would make every run compile every module from source.
        base_env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        base_env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
        env = dict(base_env, SLURM_HEAL_ROOT=str(root))
        check = ["check", "--dry-run", "--json", "--node", "n1"]
        subprocess.run([console, *check], env=env, stdout=subprocess.DEVNULL,
                       check=False)  # the first run compiles and sets the cursor

        # 1. the node check beside LBNL NHC, interleaved, on the same machine and load
        listener = endpoint()
        try:
            all_root, bin_dir = all_detectors_root(base / "all", listener.getsockname()[1])
            e_all = dict(base_env, SLURM_HEAL_ROOT=str(all_root),
                         PATH=f"{bin_dir}:{base_env.get('PATH', '/usr/bin:/bin')}")
            first = subprocess.run([console, *check], env=e_all, capture_output=True,
                                   text=True, check=False)
            if first.returncode != 0:
                print(first.stdout, first.stderr, file=sys.stderr)
                raise SystemExit("the all-detectors replay is not healthy; fix it first")
            cases: dict[str, tuple[list[str], dict[str, str]]] = {
                "pass": ([py, "-c", "pass"], env),
                "console": ([console, *check], env),
                "module": ([py, "-m", "slurm_heal.checks", *check[1:]], env),
                "all": ([console, *check], e_all),
            }
            tree = nhc_build.build()
            if tree is not None:
                conf = nhc_build.typical_conf(base / "nhc.conf")
                nhc_argv = nhc_build.argv(tree, conf, base / "nhc.result")
                ok = subprocess.run(nhc_argv, env=base_env, capture_output=True, text=True,
                                    check=False)
                if ok.returncode != 0:
                    print(ok.stdout, ok.stderr, file=sys.stderr)
                    raise SystemExit("NHC's typical configuration fails on this machine")
                cases["nhc"] = (nhc_argv, base_env)
            start_load = load()
            got = side_by_side(cases, args.runs)
            when = f"{args.runs} runs each, interleaved; {start_load} at the start, {load()} at the end"
        finally:
            listener.close()
        med, p90, cpu = got["pass"]
        rows.append(("python -c pass (interpreter start of the installed node, reference)",
                     f"{med:.0f} ms", f"p90 {p90:.0f} ms, cpu {cpu:.0f} ms"))
        med, p90, cpu = got["console"]
        rows.append(("slurm-heal check --dry-run --json, healthy (installed console script)",
                     f"{med:.0f} ms", met(med, 100, "<= 100 ms"),
                     f"p90 {p90:.0f} ms, cpu {cpu:.0f} ms; {when}"))
        med, p90, cpu = got["module"]
        rows.append(("python -m slurm_heal.checks --dry-run --json, healthy", f"{med:.0f} ms",
                     f"p90 {p90:.0f} ms, cpu {cpu:.0f} ms"))
        med, p90, cpu = got["all"]
        rows.append(("slurm-heal check --dry-run --json, healthy 8-GPU node, every detector on",
                     f"{med:.0f} ms", met(med, 100, "<= 100 ms"),
                     f"p90 {p90:.0f} ms, cpu {cpu:.0f} ms"))
        if "nhc" in got:
            nmed, np90, ncpu = got["nhc"]
            rows.append((f"LBNL NHC {nhc_build.NAME[9:]}, its typical configuration "
                         "(built from source)", f"{nmed:.0f} ms",
                         f"p90 {np90:.0f} ms, cpu {ncpu:.0f} ms (bash and its children); "
                         "the shipped nhc.conf's 6 checks, benchmarks/nhc.py"))
            for key, label, limit in (("console", "healthy", 0.7),
                                      ("all", "8-GPU node, every detector on", 1.0)):
                med, _, cpu = got[key]
                rows.append((f"node check / NHC, {label}", f"{med / nmed:.2f}x",
                             met(med / nmed, limit, f"<= {limit}x"),
                             f"wall {med:.0f} / {nmed:.0f} ms; cpu {cpu / ncpu:.2f}x "
                             f"({cpu:.0f} / {ncpu:.0f} ms)"))
        else:
            rows.append(("LBNL NHC", "n/a", nhc_build.missing()))

        # 2. kernel log scanning
        big = base / "big" / "var/log/kern.log"
        big.parent.mkdir(parents=True)
        faults = make_log(big, args.size_mb << 20)
        size = big.stat().st_size
        for label, threshold in (("one grep -F pass", sources.GREP_MIN_BYTES),
                                 ("one bytes.find pass per needle", 1 << 62)):
            rate, per_cpu, found = scan_rate(big, threshold)
            assert found == faults, (found, faults)
            rows.append((f"kernel log scan, {size / 1e6:.0f} MB file, {label} (read + scan, "
                         "best of 5)", f"{rate:.0f} MB/s",
                         met(rate, 500, ">= 500 MB/s", higher=True) if "grep" in label else "",
                         f"{per_cpu:.0f} MB per CPU second; {faults} Xid lines found; {load()}"))
        if args.big_mb:
            huge = base / "huge" / "kern.log"
            huge.parent.mkdir(parents=True)
            hfaults = make_log(huge, args.big_mb << 20)
            rate, per_cpu, found = scan_rate(huge, sources.GREP_MIN_BYTES)
            assert found == hfaults, (found, hfaults)
            rows.append((f"kernel log scan, {huge.stat().st_size / 1e9:.2f} GB file, one grep -F "
                         "pass (read + scan, best of 5)", f"{rate:.0f} MB/s",
                         met(rate, 500, ">= 500 MB/s", higher=True),
                         f"{per_cpu:.0f} MB per CPU second; {hfaults} Xid lines found; {load()}"))
            huge.unlink()
        for distinct in (False, True):
            wall, cpu, n = storm_cost(distinct=distinct)
            rows.append((f"kernel log, fault storm: {n:,} real Xid lines scanned and latched "
                         + ("(each its own stamp; " if distinct else "(") + "best of 7)",
                         f"{wall:.1f} ms", met(wall, 10, "<= 10 ms"),
                         f"{wall * 1e3 / n:.1f} us an event (cpu {cpu:.1f} ms, "
                         f"{cpu * 1e3 / n:.1f} us); {load()}"))
        if shutil.which("grep"):
            t = time.perf_counter()
            subprocess.run(["grep", "-c", "-F", "NVRM: Xid", str(big)], stdout=subprocess.DEVNULL,
                           check=False)
            rows.append(("grep -c -F 'NVRM: Xid' (one needle, reference)",
                         f"{size / (time.perf_counter() - t) / 1e6:.0f} MB/s", ""))

        conf = base / "file.toml"
        conf.write_text('[kernel_log]\nsource = "file"\npath = "/var/log/kern.log"\n'
                        "first_read_mb = 1000\n")
        small_root = base / "small"
        small = small_root / "var/log/kern.log"
        small.parent.mkdir(parents=True)
        make_log(small, 2 << 20)
        for label, r in (("2 MB", small_root), (f"{size / 1e6:.0f} MB", base / "big")):
            healthy_root(r)
            e = dict(base_env, SLURM_HEAL_ROOT=str(r))
            argv = [console, *check, "--config", str(conf)]
            subprocess.run(argv, env=e, stdout=subprocess.DEVNULL, check=False)  # sets the cursor
            med, p90, cpu = median_ms(argv, e, args.runs)
            rows.append((f"incremental check, nothing new, {label} log", f"{med:.0f} ms",
                         f"p90 {p90:.0f} ms, cpu {cpu:.0f} ms"))
        # 3. the check's own work in process, without the interpreter's start-up
        listener = endpoint()
        try:
            all_root, bin_dir = all_detectors_root(base / "all2", listener.getsockname()[1])
            e = dict(base_env, SLURM_HEAL_ROOT=str(all_root),
                     PATH=f"{bin_dir}:{base_env.get('PATH', '/usr/bin:/bin')}")
            # In process: the check's own work without the interpreter's start-up (imports
            # of the first run included: a fresh process pays them on every check).
            code = ("import os,sys,time,statistics;from slurm_heal.checks import config,runner;"
                    "c=config.load_config(None);ts=[]\n"
                    "for i in range(int(sys.argv[1])):\n"
                    " t=time.perf_counter();runner.run_check(c,node_name='n1',dry_run=True)\n"
                    " ts.append((time.perf_counter()-t)*1000)\n"
                    "print(f'{ts[0]:.1f} {statistics.median(ts[1:]):.1f}')")
            for label, env_ in (("healthy, no GPU", dict(base_env,
                                 SLURM_HEAL_ROOT=str(root_plain))),
                                ("healthy 8-GPU node, every detector on", e)):
                out = subprocess.run([py, "-c", code, str(args.runs + 1)], env=env_,
                                     capture_output=True, text=True, check=True).stdout.split()
                rows.append((f"run_check in process, {label}", f"{float(out[1]):.0f} ms",
                             f"first run (imports) {float(out[0]):.0f} ms; median of the rest"))
            for label, script in (("nvidia-smi -q -x stub", [str(bin_dir / "nvidia-smi"), "-q", "-x"]),):
                med, _, _ = median_ms(script, e, args.runs)
                rows.append((f"  of which one {label} call (reference)", f"{med:.0f} ms",
                             "3 stub calls per check: -q -x, nvlink -s, dcgmi"))
        finally:
            listener.close()
    rows.append(nvml_row(args.runs))
    return [(r[0], r[1], r[2], r[3]) if len(r) == 4 else (r[0], r[1], "", r[2]) for r in rows]


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores ({model or 'unknown CPU'}), Python "
            f"{sys.version.split()[0]}, load average {load[0]:.1f} at the start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--big-mb", type=int, default=1024,
                    help="also scan a generated file this big (0: not)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--lab", action="store_true",
                    help="also fault-to-drain on a private Slurm lab (slow, needs Slurm)")
    ap.add_argument("--injections", type=int, default=50)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--skip-node-check", action="store_true")
    ap.add_argument("--skip-controller", action="store_true")
    ap.add_argument("--skip-api", action="store_true")
    args = ap.parse_args()
    header = f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}"
    rows: list[tuple[str, str, str, str]] = []
    if not args.skip_node_check:
        rows += node_check_rows(args)
    if not args.skip_controller:
        import controller

        rows += controller.rows(quick=args.quick)
    if not args.skip_api:
        import api_load

        rows += api_load.rows(seconds=5 if args.quick else 20)
    if args.lab:
        import fault_to_drain
        import slurmctld_rpcs
        import snapshot_lab

        rows += fault_to_drain.rows(args.injections)
        rows += snapshot_lab.rows()
        rows += slurmctld_rpcs.rows()
    else:
        rows.append(("fault to drained (lab)", "not run", "", "run with --lab "
                     "(`make bench-lab`): starts a private Slurm lab, takes minutes"))
    print(header)
    if args.markdown:
        print("\n| benchmark | result | target | notes |\n| --- | --- | --- | --- |")
        for r in rows:
            print("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
        return 0
    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'result':>10}  {'target':<22}  notes")
    print("-" * (width + 60))
    for name, value, target, note in rows:
        print(f"{name:<{width}}  {value:>10}  {target:<22}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
