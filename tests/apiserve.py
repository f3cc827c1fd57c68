"""A real `slurm-heal serve` process for tests: started on 127.0.0.1 with a free port
(port 0; the port is read from its "listening on" log line), stopped with SIGTERM.

    with Serve(["--state-dir", str(state), "--tokens", str(tokens)]) as srv:
        requests.get(srv.url + "/api/v1/whoami", headers=srv.bearer(token))
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import requests

from slurm_heal.api.auth import add_token
from tests.lab import Lab

if TYPE_CHECKING:
    from tests.integration.test_daemon_lab import Heal

LISTENING = re.compile(r"listening on (https?://[^/\s]+)/")


class Serve:
    """`slurm-heal serve ARGS` as a process; its log is kept in ``log``."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 bind: str = "127.0.0.1:0") -> None:
        self.argv = [sys.executable, "-m", "slurm_heal.cli", "serve", "--bind", bind, *args]
        self.log = log
        self.env = dict(env if env is not None else os.environ)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> Serve:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = LISTENING.search(self.text())
            if m:
                self.url = m.group(1)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}:\n{self.text()}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"serve did not start within {timeout}s:\n{self.text()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def __enter__(self) -> Serve:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @staticmethod
    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def get(self, path: str, token: str | None = None, **kw: object) -> requests.Response:
        headers = self.bearer(token) if token else {}
        return requests.get(self.url + path, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]

    def post(self, path: str, token: str | None = None, json: object = None,
             key: str | None = None, **kw: object) -> requests.Response:
        headers = self.bearer(token) if token else {}
        if key is not None:
            headers["Idempotency-Key"] = key
        return requests.post(self.url + path, headers=headers, json=json, timeout=30,
                             **kw)  # type: ignore[arg-type]


def make_tokens(path: Path) -> dict[str, str]:
    """A token file with an operator (alice) and a viewer (victor); name -> token."""
    return {"alice": add_token(path, "alice", "operator"),
            "victor": add_token(path, "victor", "viewer")}


# --------------------------------------------------------------------------- with the lab

def manual_config(state_dir: Path, slurm_conf: Path, provider_url: str) -> str:
    """A daemon config whose approvals all wait for a person (SPEC P2: the default), with
    serve's [api] section naming the token file beside it."""
    return f"""
[approvals]
default = "manual"

[safety]
concurrency = 4
one_per_pool = false
return_timeout = "5m"

[capacity]
min_available_percent = 0

[controller]
state_dir = "{state_dir}"
interval = 1
slurm_backend = "cli"
slurm_conf = "{slurm_conf}"

[provider]
type = "http"
url = "{provider_url}"
read_timeout = 30

[api]
tokens = "tokens.toml"
"""


XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, Timeout after 6s of waiting for "
          "RPC response from GPU0 GSP!")


@contextlib.contextmanager
def heal_with_serve(lab: Lab, tmp: Path) -> Iterator[tuple[Heal, Serve, dict[str, str]]]:
    """The lab with the daemon's world (the provider simulator rebooting lab nodes, the
    node check at boot) under a manual-approval policy, and `slurm-heal serve` on the
    same config. The daemon is started by the test (``heal.start_daemon()``)."""
    from slurm_heal.providers.simulator import LabHook, SimulatorServer
    from slurm_heal.slurm.cli import CliSlurm
    from tests.integration.test_daemon_lab import Heal

    hook = LabHook(lab.dir, slurm=CliSlurm(slurm_conf=str(lab.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.5) as sim:
        heal = Heal(lab, tmp, sim)
        heal.config.write_text(manual_config(heal.state_dir, lab.conf, sim.url))
        tokens = make_tokens(tmp / "tokens.toml")
        heal.baseline()
        heal._watcher.start()
        srv = Serve(["--config", str(heal.config)], tmp / "serve.log", env=lab.env)
        try:
            srv.start()
            yield heal, srv, tokens
        finally:
            srv.stop()
            heal.close()
