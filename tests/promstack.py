"""The real Prometheus and Alertmanager (Debian's packages) on 127.0.0.1 for tests of
SPEC D13: free ports, their own temporary directories, stopped with SIGTERM.

    page = MetricsPage(text)                  # a dcgm-exporter page served over HTTP
    with Prometheus(tmp, page.target, rules, am_port) as prom, Alertmanager(tmp, cfg) as am:
        page.set(new_text)                    # what the next scrape sees
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import yaml

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "contrib" / "prometheus" / "slurm-heal-dcgm.rules.yml"
RECEIVER = REPO / "contrib" / "alertmanager" / "slurm-heal-receiver.yml"


def missing() -> str | None:
    """Why the stack cannot run here (None: it can)."""
    if PROMETHEUS is None:
        return "prometheus is not installed (Debian: apt-get install prometheus)"
    if ALERTMANAGER is None:
        return ("prometheus-alertmanager is not installed (Debian: apt-get install "
                "prometheus-alertmanager)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsPage:
    """A metrics page served at http://127.0.0.1:PORT/metrics; `set` changes it."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lock = threading.Lock()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with page._lock:
                    body = page._text.encode()
                self.send_response(200 if self.path.startswith("/metrics") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set(self, text: str) -> None:
        with self._lock:
            self._text = text

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Proc:
    name = ""

    def __init__(self, argv: list[str], log: Path, ready_url: str) -> None:
        self.argv, self.log, self.ready_url = argv, log, ready_url
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> _Proc:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n"
                                   f"{self.log.read_text(errors='replace')[-4000:]}")
            try:
                if requests.get(self.ready_url, timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not ready in {timeout}s:\n"
                           f"{self.log.read_text(errors='replace')[-4000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> _Proc:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class Prometheus(_Proc):
    """Prometheus scraping ``target`` every second, evaluating ``rules`` every second and
    sending to the Alertmanager on ``am_port``."""

    name = "prometheus"

    def __init__(self, tmp: Path, target: str, rules: Path, am_port: int) -> None:
        assert PROMETHEUS is not None
        self.port = free_port()
        conf = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "alerting": {"alertmanagers": [{"static_configs": [
                    {"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [{"job_name": "dcgm", "static_configs": [
                    {"targets": [target]}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(conf))
        super().__init__([PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{self.port}"],
                         tmp / "prometheus.log", f"http://127.0.0.1:{self.port}/-/ready")


def alertmanager_config(url: str, token_file: Path) -> dict[str, Any]:
    """The shipped receiver snippet (contrib/alertmanager) under a default route, with
    the receiver's URL and token file set and the waits made short for a test."""
    snippet = yaml.safe_load(RECEIVER.read_text())
    routes = snippet["route"]["routes"]
    for r in routes:
        r.update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    receivers = snippet["receivers"]
    for hook in receivers[0]["webhook_configs"]:
        hook["url"] = url
        hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    return {"route": {"receiver": "blackhole", "group_wait": "1s", "group_interval": "1s",
                      "routes": routes},
            "receivers": [{"name": "blackhole"}, *receivers]}


class Alertmanager(_Proc):
    """Alertmanager with ``config`` (a dict), no cluster."""

    name = "alertmanager"

    def __init__(self, tmp: Path, config: dict[str, Any], port: int | None = None) -> None:
        assert ALERTMANAGER is not None
        self.port = port or free_port()
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
        (tmp / "am-data").mkdir(exist_ok=True)
        super().__init__([ALERTMANAGER, f"--config.file={tmp / 'alertmanager.yml'}",
                          f"--storage.path={tmp / 'am-data'}",
                          f"--web.listen-address=127.0.0.1:{self.port}",
                          "--cluster.listen-address="],
                         tmp / "alertmanager.log", f"http://127.0.0.1:{self.port}/-/ready")
