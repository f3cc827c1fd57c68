"""The console's fleet map and history pages at scale (issue 42, SPEC O5), on 127.0.0.1.

    python benchmarks/console_map.py [--nodes 10000] [--repeat 20]

The console served by the production WSGI server (`slurm-heal serve`'s, in this
process) on the generated cluster and store of the browser tests (`tests/consolegen.py`:
``--nodes`` nodes in memory, NVLink blocks of 18 and racks of 40 as node features, an
open incident, 90 days of ended remediations with the older ones in the audit archive).
A logged-in client asks each page ``--repeat`` times on one keep-alive connection:

* ``/`` (the overview with the fleet map: one tile per group at this size), the first
  request (nothing in memory) and then the rest (served from memory while the store, the
  heartbeat and Slurm's node list are the same, at most 2 s);
* ``/?map=block:nvl100`` (one block expanded node by node), ``/?state=attention`` (the
  map of the nodes that need attention, cell by cell);
* ``/history?days=7|30|90`` and ``GET /api/v1/history?days=90``.

It prints each page's size (bytes of the body) and its time to serve (first, p50, max,
from the request sent to the last byte read). Then the case that matters in service:
the overview asked right after a store change (the daemon writes the store every cycle,
so a person's request usually finds nothing of it in memory), ``--repeat`` times:

* ``after a store change``: the store rewritten (one transaction, as the daemon's cycle
  writes it), Slurm's node list still within its bound (`views.FRESH_S`: serve's clock
  held still);
* ``... and a new Slurm read``: also the bound passed (serve's clock moved on by it),
  so Slurm's node list is read again (here the in-memory Slurm's read; a real
  ``scontrol``/slurmrestd read costs its own time on top).

Besides p50 and max of the wall time, ``cpu p50``: the CPU seconds this process spent
(serve's threads and the client), less sensitive to other work on the machine; and
``Slurm read p50``: the seconds of the (in-memory) Slurm's node-list reads among them,
with their count, part of the time above.

Targets (issue 42): the overview <= 200 KB and <= 0.3 s to serve at 10,000 nodes, the
first request after a store change included.
"""

from __future__ import annotations

import argparse
import http.client
import re
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PAGES = ("/", "/?map=block%3Anvl100", "/?state=attention", "/history?days=7",
         "/history?days=30", "/history?days=90", "/api/v1/history?days=90")


class Client:
    """One keep-alive connection with a console session (or a bearer token for /api)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=30)
        self.token = token
        self.cookie = ""

    def get(self, path: str, headers: dict[str, str] | None = None
            ) -> tuple[int, bytes, http.client.HTTPResponse]:
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = self.cookie
        if path.startswith("/api/"):
            h["Authorization"] = f"Bearer {self.token}"
        self.conn.request("GET", path, headers=h)
        resp = self.conn.getresponse()
        return resp.status, resp.read(), resp

    def login(self) -> None:
        from urllib.parse import urlencode

        status, body, resp = self.get("/login")
        nonce = re.search(rb'name="login_csrf" value="([^"]+)"', body)
        cookie = (resp.getheader("Set-Cookie") or "").split(";", 1)[0]
        assert status == 200 and nonce and cookie, "no login form"
        form = urlencode({"login_csrf": nonce.group(1).decode(), "token": self.token,
                          "next": "/"})
        self.conn.request("POST", "/login", body=form, headers={
            "Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
        resp = self.conn.getresponse()
        resp.read()
        got = [c.split(";", 1)[0] for c in resp.headers.get_all("Set-Cookie") or []
               if c.startswith("slurm_heal_session=")]
        assert resp.status == 303 and got, f"login refused: {resp.status}"
        self.cookie = got[0]


class Clock:
    """serve's monotonic clock (what ages what it keeps in memory): moved on by
    ``offset``, or held still at ``held``."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.held: float | None = None

    def __call__(self) -> float:
        return self.held if self.held is not None else time.monotonic() + self.offset


class TimedSlurm:
    """The generated Slurm, timing its node-list reads (``reads``: seconds each)."""

    def __init__(self, slurm: Any) -> None:
        self.slurm = slurm
        self.reads: list[float] = []

    def nodes(self) -> Any:
        start = time.perf_counter()
        try:
            return self.slurm.nodes()
        finally:
            self.reads.append(time.perf_counter() - start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.slurm, name)


def serve(nodes: int, base: Path, clock: Clock,
          slurm_out: list[TimedSlurm]) -> tuple[object, str, int, str]:
    from slurm_heal.api.app import ApiApp
    from slurm_heal.api.auth import add_token
    from slurm_heal.api.settings import ApiSettings
    from slurm_heal.commands.serve import wsgi_server
    from slurm_heal.location import Location
    from tests import consolegen as gen

    now = datetime.now(timezone.utc)
    (base / "state").mkdir()
    gen.store(base / "state", nodes, now)
    slurm = TimedSlurm(gen.cluster(nodes, now))
    slurm_out.append(slurm)
    token = add_token(base / "tokens.toml", "bench", "viewer")
    settings = ApiSettings(tokens=base / "tokens.toml", bind="127.0.0.1:0")
    app = ApiApp(settings, Location(state_dir=base / "state", source="bench"),
                 slurm=lambda: slurm, clock=clock)
    server = wsgi_server(settings, app)
    server.prepare()
    threading.Thread(target=server.serve, daemon=True).start()
    return server, server.bind_addr[0], server.bind_addr[1], token


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        timed: list[TimedSlurm] = []
        server, host, port, token = serve(args.nodes, Path(tmp), clock, timed)
        try:
            c = Client(host, port, token)
            c.login()
            print(f"console at {args.nodes:,} nodes, {args.repeat} requests a page "
                  "(one keep-alive connection; seconds from request to last byte):")
            print(f"{'page':28} {'bytes':>9} {'first':>7} {'p50':>7} {'max':>7}")
            for path in PAGES:
                times, size = [], 0
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    status, body, _resp = c.get(path)
                    times.append(time.perf_counter() - start)
                    assert status == 200, f"{path}: HTTP {status}: {body[:300]!r}"
                    size = len(body)
                print(f"{path:28} {size:>9,} {times[0]:>7.3f} "
                      f"{statistics.median(times[1:] or times):>7.3f} {max(times):>7.3f}")
            after_changes(c, Path(tmp) / "state", args.repeat, clock, timed[0])
        finally:
            server.stop()  # type: ignore[attr-defined]
    return 0


def after_changes(c: Client, state_dir: Path, repeat: int, clock: Clock,
                  slurm: TimedSlurm) -> None:
    """The overview right after a store change, ``repeat`` times a case (p50, max)."""
    from slurm_heal.api.views import FRESH_S
    from slurm_heal.store import Store

    store = Store(state_dir)
    print(f"\nthe overview (/) right after a store change, {repeat} times "
          "(seconds from request to last byte):")
    print(f"{'case':44} {'bytes':>9} {'p50':>7} {'max':>7} {'cpu p50':>8} "
          f"{'Slurm read p50':>15}")
    for label, new_read in (("after a store change", False),
                            ("after a store change and a new Slurm read", True)):
        times, cpu, size = [], [], 0
        c.get("/")  # Slurm's list read, the overview in memory: then the store changes
        clock.held = None if new_read else clock()
        read = len(slurm.reads)
        for k in range(repeat):
            with store.transaction() as txn:  # what the daemon's cycle does
                txn.state = txn.state.model_copy(
                    update={"data": {**txn.state.data, "benchmark_cycle": k}})
            if new_read:
                clock.offset += FRESH_S + 0.1
            start, start_cpu = time.perf_counter(), time.process_time()
            status, body, _resp = c.get("/")
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)  # serve's and the client's
            assert status == 200, f"/: HTTP {status}: {body[:300]!r}"
            size = len(body)
        clock.held = None
        reads = slurm.reads[read:]
        print(f"{label:44} {size:>9,} {statistics.median(times):>7.3f} {max(times):>7.3f} "
              f"{statistics.median(cpu):>8.3f} "
              f"{f'{statistics.median(reads):.3f} ({len(reads)})' if reads else '-':>15}")


if __name__ == "__main__":
    sys.exit(main())
