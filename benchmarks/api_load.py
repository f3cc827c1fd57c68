"""serve under load and under slowloris (issue 34 item 3, SPEC O5), on 127.0.0.1 only.

    python benchmarks/api_load.py [--clients 100] [--seconds 20] [--slowloris 200]

A real `slurm-heal serve` process (its defaults: 16 threads, 10 s timeouts, 32
connections a client address) on the store of a 10,000-node cluster (benchmarks/scale.py:
a year of closed remediations, none pruned, 2,000 records) and no Slurm (the store's side
of the read model; serve reads Slurm's node list at most once every 2 s and shares it, so
with a real Slurm add one read of about 0.4 s at 10,000 nodes every 2 s). Then:

1. ``--clients`` clients at once, each on its own loopback address (127.0.1.N) and its own
   keep-alive connection, ask ``GET /api/v1/overview`` with a viewer's token as fast as
   they are answered for ``--seconds``; then the same for ``GET /api/v1/status`` (what
   ``slurm-heal status --json`` prints) and ``GET /api/v1/breaker``, the store's smallest
   read: requests a second, p50 and p99 latency, errors and timeouts;
2. ``--slowloris`` connections, each from its own loopback address (127.0.2.N: no
   per-address bound helps), send a request line and then one header byte a second, while
   ``/healthz`` is asked 20 times, one after another (timeout 5 s each): its p50, max and
   how many were not answered.

The load clients run in this process (threads), on the same cores as serve: on a 2-core
machine they take about one of them. Targets (issue 34 item 3): >= 200 req/s at p99 <=
1 s with 100 clients; /healthz within 1 s during a 200-connection slowloris.
"""

from __future__ import annotations

import argparse
import http.client
import os
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

def site(base: Path, nodes: int) -> tuple[Path, str]:
    """A store of a ``nodes``-node cluster, a config and a viewer's token."""
    import scale

    from slurm_heal.api.auth import add_token
    from slurm_heal.store import Store

    state = base / "state"
    state.mkdir()
    with Store(state).transaction() as txn:
        txn.state = scale.history(nodes)
    (state / "heartbeat").write_text(time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()))
    token = add_token(base / "tokens.toml", "bench", "viewer")
    config = base / "heal.toml"
    config.write_text(f'[controller]\nstate_dir = "{state}"\n'
                      f'slurm_conf = "{base / "no-such-slurm.conf"}"\n'
                      '[api]\ntokens = "tokens.toml"\n')
    return config, token


def start(config: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """serve on a free port, its access log off (WARNING), ready when /healthz answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_HEAL_STATE_DIR", "SLURM_HEAL_CONFIG")}
    env["SLURM_CONF"] = str(config.parent / "no-such-slurm.conf")
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "slurm_heal.cli", "serve", "--config",
                             str(config), "--bind", f"127.0.0.1:{port}", "--log-level",
                             "WARNING"], stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"serve did not start:\n{log.read_text(errors='replace')}")


def load(port: int, path: str, token: str, clients: int, seconds: float
         ) -> dict[str, float]:
    """``clients`` keep-alive clients asking ``path`` for ``seconds``."""
    lat: list[float] = []
    errors = [0, 0]  # [error answers and resets, timeouts]
    lock = threading.Lock()
    go = threading.Event()
    end = [0.0]

    def client(n: int) -> None:
        source = (f"127.0.1.{n % 250 + 1}", 0)
        mine: list[float] = []
        bad = [0, 0]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                          source_address=source)
        go.wait()
        while time.perf_counter() < end[0]:
            t = time.perf_counter()
            try:
                conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    bad[0] += 1
                else:
                    mine.append(time.perf_counter() - t)
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
            except TimeoutError:
                bad[1] += 1
                conn.close()
            except (OSError, http.client.HTTPException):
                bad[0] += 1
                conn.close()
        conn.close()
        with lock:
            lat.extend(mine)
            errors[0] += bad[0]
            errors[1] += bad[1]

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for th in threads:
        th.start()
    t0 = time.perf_counter()
    end[0] = t0 + seconds
    go.set()
    for th in threads:
        th.join(seconds + 60)
    took = time.perf_counter() - t0
    lat.sort()
    return {"rps": len(lat) / took, "n": len(lat),
            "p50": statistics.median(lat) if lat else float("nan"),
            "p99": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else float("nan"),
            "errors": errors[0], "timeouts": errors[1]}


def slowloris(port: int, conns: int, probes: int = 20) -> dict[str, float]:
    """``conns`` connections dripping headers while /healthz is asked ``probes`` times."""
    socks: list[socket.socket] = []
    refused = 0
    for n in range(conns):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5,
                                         source_address=(f"127.0.2.{n % 250 + 1}", 0))
            s.sendall(b"GET /api/v1/overview HTTP/1.1\r\nHost: x\r\nX-Drip: ")
            socks.append(s)
        except OSError:
            refused += 1
    stop = threading.Event()

    def drip() -> None:
        while not stop.wait(1.0):
            for s in list(socks):
                try:
                    s.sendall(b"x")
                except OSError:
                    socks.remove(s)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    time.sleep(1.5)
    times: list[float] = []
    missed = 0
    for _ in range(probes):
        t = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
        except (OSError, http.client.HTTPException):
            ok = False
        if ok:
            times.append(time.perf_counter() - t)
        else:
            missed += 1
        time.sleep(0.2)
    held = len(socks)
    stop.set()
    dripper.join()
    for s in socks:
        s.close()
    times.sort()
    return {"p50": statistics.median(times) if times else float("nan"),
            "max": times[-1] if times else float("nan"), "missed": missed,
            "probes": probes, "held": held, "refused": refused}


def rows(clients: int = 100, seconds: float = 20, loris: int = 200,
         nodes: int = 10_000) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="api-load-") as tmp:
        base = Path(tmp)
        config, token = site(base, nodes)
        proc, port = start(config, base / "serve.log")
        try:
            for path in ("/api/v1/overview", "/api/v1/status", "/api/v1/breaker"):
                load(port, path, token, 4, 2)  # warm: imports, the first parse
                r = load(port, path, token, clients, seconds)
                ok = r["rps"] >= 200 and r["p99"] <= 1.0
                out.append((f"serve, GET {path}, {nodes:,}-node store, {clients} clients at "
                            "once", f"{r['rps']:.0f} req/s",
                            f">= 200 req/s, p99 <= 1 s: {'met' if ok else 'MISSED'}",
                            f"p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms; "
                            f"{r['n']:,} answered in {seconds:g} s, {r['errors']} errors, "
                            f"{r['timeouts']} timeouts (30 s); load {os.getloadavg()[0]:.1f}"))
            s = slowloris(port, loris)
            ok = s["missed"] == 0 and s["max"] <= 1.0
            out.append((f"serve, /healthz during a {loris}-connection slowloris (a header "
                        "byte a second each)", f"max {s['max'] * 1000:.0f} ms",
                        f"<= 1 s: {'met' if ok else 'MISSED'}",
                        f"p50 {s['p50'] * 1000:.0f} ms; {s['probes'] - s['missed']}/"
                        f"{s['probes']} answered within 5 s; {s['held']} dripping "
                        f"connections held open at the end, {s['refused']} refused; "
                        f"load {os.getloadavg()[0]:.1f}"))
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited {proc.returncode}")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--slowloris", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=10_000)
    args = ap.parse_args()
    for r in rows(args.clients, args.seconds, args.slowloris, args.nodes):
        print("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
