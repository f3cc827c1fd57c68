"""The machine ledger's cost beside the daemon's cycle (SPEC E7, docs/machines.md).

    python benchmarks/ledger.py [--nodes N]

N generated nodes (default 100,000), each with its own GPU serials as the node check
publishes them, and `LedgerFile.update` as the daemon's observer calls it: the first
sweep (every machine new, the file written), a quiet cycle between sweeps, an hourly
sweep that finds nothing new (nothing written), a daily one (every ``last_seen`` moves,
the file written), and a cold load of the file (a daemon's start). Prints seconds and
the file's size. Never run by the test suite; not part of `make bench` (run it alone).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurm_heal import extra  # noqa: E402
from slurm_heal.ledger import LEDGER_FILE, LedgerFile  # noqa: E402
from slurm_heal.types import NodeInfo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    n = ap.parse_args().nodes
    now = datetime(2026, 1, 5, tzinfo=timezone.utc)
    nodes = []
    for i in range(n):
        machine = extra.machine_identity([f"16549{i:08d}"])
        nodes.append(NodeInfo(name=f"n{i:06d}", states=frozenset({"IDLE"}), partitions=("a",),
                              extra={extra.KEY: extra.our_section([], now, machine)}))
    root = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    try:
        f = LedgerFile(root)
        rows = []
        for what, at, touched in (
                ("first sweep, every machine new (file written)", now, None),
                ("quiet cycle between sweeps", now + timedelta(seconds=30), []),
                ("hourly sweep, nothing new (nothing written)", now + timedelta(hours=1), []),
                ("daily sweep, every last_seen moves (file written)",
                 now + timedelta(days=1, hours=1), [])):
            start = time.perf_counter()
            f.update(nodes, [], at, touched)
            rows.append((what, time.perf_counter() - start))
        start = time.perf_counter()
        LedgerFile(root).load()
        rows.append(("cold load (a daemon's start)", time.perf_counter() - start))
        size = (root / LEDGER_FILE).stat().st_size
        print(f"machine ledger, {n} nodes/machines; machines.json {size / 1e6:.1f} MB")
        for what, secs in rows:
            print(f"  {what}: {secs:.3f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
