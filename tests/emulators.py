"""Cloud and BMC emulators on 127.0.0.1 for the provider tests: real HTTP, never patched
functions.

- `MotoServer`: moto's server mode (``moto_server -H 127.0.0.1 -p PORT``), an EC2 API.
- `SushyEmulator`: sushy-tools' Redfish emulator with its fake driver (no libvirt).
- `RecordingProxy`: a small HTTP server in front of either one. It records every request
  (so a test counts how often an action really reached the platform), can run a hook on
  a request before forwarding it (the lab tests reboot the lab node when EC2 is asked to
  reboot it), and answers the EC2 operations moto lacks from a recorded exchange
  (``CreateReplaceRootVolumeTask``, ``DescribeReplaceRootVolumeTasks``:
  tests/data/providers/aws/).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import parse_qs

import requests

DATA = Path(__file__).resolve().parent / "data" / "providers"
# Credentials for moto only: boto3 reads them from the environment, as in production.
FAKE_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(requests.RequestException):
            requests.get(url, timeout=2)
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer at {url} within {timeout:g}s")


def stop_process(proc: subprocess.Popen[Any] | None) -> None:
    """Terminate ``proc`` if it still runs; kill it when it has not ended in 10 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def stop_daemons(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every daemon still running first (they stop together), then wait for each
    up to 15 s and kill the ones that did not end."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class _Process:
    """A server process of ours, stopped by its process id."""

    argv: list[str]
    probe = "/"
    what = "server"

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> _Process:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            _wait_http(self.url + self.probe, self.proc, self.what)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.proc)


def _tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name  # the venv's own scripts first
    return str(here) if here.exists() else shutil.which(name)


class MotoServer(_Process):
    what = "moto_server"
    probe = "/moto-api/"

    def __init__(self) -> None:
        super().__init__()
        exe = _tool("moto_server")
        if exe is None:
            raise FileNotFoundError("moto_server is not installed (pip install 'moto[server]')")
        self.argv = [exe, "-H", "127.0.0.1", "-p", str(self.port)]

    def ec2(self) -> Any:
        import boto3

        return boto3.client("ec2", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def instance(self, instance_type: str = "p5.48xlarge") -> str:
        """A new running instance (an EBS-backed GPU type by default)."""
        client = self.ec2()
        out = client.run_instances(ImageId="ami-12c6146b", InstanceType=instance_type,
                                   MinCount=1, MaxCount=1)
        iid: str = out["Instances"][0]["InstanceId"]
        return iid


class SushyEmulator(_Process):
    what = "sushy-emulator"
    probe = "/redfish/v1/"

    def __init__(self) -> None:
        super().__init__()
        exe = _tool("sushy-emulator")
        if exe is None:
            raise FileNotFoundError("sushy-emulator is not installed (pip install sushy-tools)")
        self.argv = [exe, "--fake", "-i", "127.0.0.1", "-p", str(self.port)]

    def system(self) -> str:
        """The @odata.id of the one fake system."""
        members = requests.get(self.url + "/redfish/v1/Systems", timeout=5).json()["Members"]
        path: str = members[0]["@odata.id"]
        return path


@dataclass(eq=False)
class Seen:
    method: str
    path: str
    body: bytes
    form: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ec2_action(self) -> str:
        return (self.form.get("Action") or [""])[0]

    @property
    def op(self) -> str:
        """The EC2 action, or "Reset" for a Redfish ComputerSystem.Reset."""
        if self.method == "POST" and self.path.endswith("/Actions/ComputerSystem.Reset"):
            return "Reset"
        return self.ec2_action

    def json(self) -> Any:
        import json

        return json.loads(self.body or b"null")


Hook = Callable[[Seen], None]


class RecordingProxy:
    """Forwards to ``upstream``; records requests; answers the recorded EC2 operations."""

    def __init__(self, upstream: str, *, hook: Hook | None = None,
                 replay_ec2: bool = True, tls: tuple[Path, Path] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.hook = hook
        self.replay_ec2 = replay_ec2
        self.seen: list[Seen] = []
        self.tasks: dict[str, dict[str, str]] = {}  # ClientToken -> recorded task
        self.task_polls: dict[str, int] = {}
        self.answer_next: list[tuple[int, str]] = []  # (status, body) answered instead
        # Seen.op -> [(status, body), ...]: the next requests for it are answered with
        # these instead, one each; they never arrive
        self.answer_for: dict[str, list[tuple[int, str]]] = {}
        # Seen.op -> (status, body): the request arrives and runs, its answer is lost
        self.lose: dict[str, tuple[int, str]] = {}
        self.not_forwarded: list[Seen] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:  # (certificate, key): serve HTTPS
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what the tests read ----------------------------------------------------------------
    def ec2_calls(self, action: str, instance: str | None = None) -> int:
        with self._lock:
            return sum(1 for s in self.seen if s.ec2_action == action and (
                instance is None or instance in sum(s.form.values(), [])))

    def redfish_resets(self) -> list[str]:
        """The ResetType of every reset that reached the BMC (answered or lost)."""
        with self._lock:
            return [s.json().get("ResetType", "") for s in self.seen
                    if s.op == "Reset" and s not in self.not_forwarded]

    # -- the server ---------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                form: dict[str, list[str]] = {}
                if "x-www-form-urlencoded" in (self.headers.get("Content-Type") or ""):
                    form = parse_qs(body.decode(), keep_blank_values=True)
                seen = Seen(self.command, self.path, body, form)
                with proxy._lock:
                    proxy.seen.append(seen)
                    injected = proxy.answer_next.pop(0) if proxy.answer_next else None
                    if injected is None:
                        queued = proxy.answer_for.get(seen.op)
                        injected = queued.pop(0) if queued else None
                    lost = proxy.lose.pop(seen.op, None)
                if injected is not None:
                    with proxy._lock:
                        proxy.not_forwarded.append(seen)
                    self._reply(injected[0], injected[1].encode(), "text/xml")
                    return
                if proxy.replay_ec2 and seen.ec2_action in _RECORDED:
                    status, text = _RECORDED[seen.ec2_action](proxy, seen)
                    if lost is not None:
                        status, text = lost
                    self._reply(status, text.encode(), "text/xml;charset=UTF-8")
                    return
                if proxy.hook is not None:
                    proxy.hook(seen)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                resp = requests.request(self.command, proxy.upstream + self.path, data=body,
                                        headers=headers, timeout=60, allow_redirects=False)
                if lost is not None:
                    self._reply(lost[0], lost[1].encode(), "text/xml")
                    return
                self._reply(resp.status_code, resp.content,
                            resp.headers.get("Content-Type", ""))

            def _reply(self, status: int, content: bytes, ctype: str) -> None:
                self.send_response(status)
                if ctype:
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if content and self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _any

        return Handler


# --- the recorded EC2 exchange (operations moto does not implement) --------------------------
def _template(name: str) -> Template:
    return Template((DATA / "aws" / name).read_text())


def _create_task(proxy: RecordingProxy, seen: Seen) -> tuple[int, str]:
    token = (seen.form.get("ClientToken") or [""])[0]
    with proxy._lock:
        task = proxy.tasks.get(token)
        if task is None:  # the ClientToken makes a repeat return the same task
            task = {"task": f"replacevol-{len(proxy.tasks) + 1:017x}",
                    "instance": seen.form["InstanceId"][0],
                    "image": (seen.form.get("ImageId") or [""])[0]}
            proxy.tasks[token] = task
    return 200, _template("create-replace-root-volume-task.xml").substitute(
        task, state="pending")


def _describe_tasks(proxy: RecordingProxy, seen: Seen) -> tuple[int, str]:
    wanted = seen.form.get("ReplaceRootVolumeTaskId.1", [""])[0]
    with proxy._lock:
        task = next((t for t in proxy.tasks.values() if t["task"] == wanted), None)
        polls = proxy.task_polls[wanted] = proxy.task_polls.get(wanted, 0) + 1
    if task is None:
        return 400, _template("error.xml").substitute(
            code="InvalidReplaceRootVolumeTaskId.NotFound",
            message=f"The replace root volume task ID '{wanted}' does not exist")
    # The first look finds it in progress, later ones succeeded (as EC2 reports it).
    state = "in-progress" if polls == 1 else "succeeded"
    return 200, _template("describe-replace-root-volume-tasks.xml").substitute(
        task, state=state)


_RECORDED: dict[str, Callable[[RecordingProxy, Seen], tuple[int, str]]] = {
    "CreateReplaceRootVolumeTask": _create_task,
    "DescribeReplaceRootVolumeTasks": _describe_tasks,
}


def service_account_key(directory: Path, token_uri: str) -> Path:
    """A service-account key file whose token endpoint is ``token_uri`` (a local fake)."""
    import json

    pem = directory / "sa.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(pem), "2048"], check=True,
                   capture_output=True, timeout=60)
    key = directory / "sa.json"
    key.write_text(json.dumps({
        "type": "service_account", "project_id": "hpc-prod", "private_key_id": "k1",
        "private_key": pem.read_text(), "client_id": "1",
        "client_email": "slurm-heal@hpc-prod.iam.gserviceaccount.com",
        "token_uri": token_uri}))
    return key


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (openssl), as a BMC's factory certificate."""
    cert, key = directory / "bmc.crt", directory / "bmc.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True, timeout=60)
    return cert, key


@contextlib.contextmanager
def aws_env() -> Iterator[None]:
    """The fake credentials in the environment, the way boto3 finds real ones."""
    saved = {k: os.environ.get(k) for k in FAKE_AWS_ENV}
    os.environ.update(FAKE_AWS_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- a local Compute Engine endpoint (REST v1 shapes from tests/data/providers/gcp) ----------
class ComputeEngine:
    """Answers the Compute Engine methods the gcp provider uses, in the API's JSON shapes:
    instances.reset/stop/start/reportHostAsFaulty, instanceGroupManagers.recreateInstances
    (each a zone Operation, deduplicated by requestId as Compute Engine does) and
    zoneOperations.get (RUNNING at the first look, DONE after)."""

    def __init__(self, *, report_host_as_faulty: bool = True,
                 hook: Callable[[str, str], None] | None = None) -> None:
        import json

        self._json = json
        self.report_host_as_faulty = report_host_as_faulty
        self.shape = json.loads((DATA / "gcp" / "operation.json").read_text())
        self.error = json.loads((DATA / "gcp" / "error.json").read_text())
        self.calls: list[tuple[str, str, str]] = []  # (method, instance, requestId)
        self.executed: list[tuple[str, str]] = []  # (method, instance), once per requestId
        self.operations: dict[str, dict[str, Any]] = {}
        self.by_request: dict[str, str] = {}
        self.answer_next: list[int] = []  # HTTP statuses answered instead (e.g. 503)
        self.hook = hook  # hook(method, instance) when a method first runs
        self.tokens_issued = 0  # OAuth2 token endpoint (/token) for service-account keys
        self.authorizations: list[str] = []  # Authorization header of each method call
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ComputeEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _operation(self, method: str, project: str, zone: str, target: str,
                   request_id: str) -> tuple[int, Any]:
        with self._lock:
            self.calls.append((method, target, request_id))
            if request_id and request_id in self.by_request:
                return 200, self.operations[self.by_request[request_id]]
            if method == "reportHostAsFaulty" and not self.report_host_as_faulty:
                return 400, self.error
            name = f"operation-{len(self.operations) + 1:04d}-{method}"
            base = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}"
            op = dict(self.shape, name=name, operationType=method, status="RUNNING",
                      id=str(len(self.operations) + 1), zone=base,
                      targetLink=f"{base}/{target}", selfLink=f"{base}/operations/{name}")
            self.operations[name] = op
            if request_id:
                self.by_request[request_id] = name
            self.executed.append((method, target.rsplit("/", 1)[-1]))
        if self.hook is not None:
            self.hook(method, target.rsplit("/", 1)[-1])
        return 200, op

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        import re
        from urllib.parse import urlsplit

        fake = self
        prefix = r"^/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)/"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = fake._json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                parts = urlsplit(self.path)
                if parts.path == "/token":  # Google's OAuth2 token endpoint, for a key file
                    with fake._lock:
                        fake.tokens_issued += 1
                    self._reply(200, {"access_token": f"ya29.fake{fake.tokens_issued}",
                                      "expires_in": 3600, "token_type": "Bearer"})
                    return
                with fake._lock:
                    fake.authorizations.append(self.headers.get("Authorization", ""))
                rid = (parse_qs(parts.query).get("requestId") or [""])[0]
                with fake._lock:
                    injected = fake.answer_next.pop(0) if fake.answer_next else None
                if injected is not None:
                    self._reply(injected, {"error": {"code": injected, "message": "busy"}})
                    return
                m = re.match(prefix + r"instances/(?P<i>[^/]+)/(?P<m>reset|stop|start|"
                             r"reportHostAsFaulty)$", parts.path)
                if m:
                    self._reply(*fake._operation(m["m"], m["p"], m["z"],
                                                 f"instances/{m['i']}", rid))
                    return
                m = re.match(prefix + r"instanceGroupManagers/(?P<g>[^/]+)/recreateInstances$",
                             parts.path)
                if m:
                    self._reply(*fake._operation("recreateInstances", m["p"], m["z"],
                                                 f"instanceGroupManagers/{m['g']}", rid))
                    return
                self._reply(404, {"error": {"code": 404, "message": f"no {parts.path}"}})

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                m = re.match(prefix + r"operations/(?P<o>[^/]+)$", parts.path)
                with fake._lock:
                    op = fake.operations.get(m["o"]) if m else None
                    if op is None:
                        body = {"error": {"code": 404, "message": f"no {parts.path}"}}
                        self._reply(404, body)
                        return
                    answer = dict(op)
                    op["status"] = "DONE"  # the next look finds it finished
                self._reply(200, answer)

        return Handler


class IpmiBmc:
    """tests/ipmi_bmc.py (pyghmi's BMC server, IPMI 2.0 over LAN) on 127.0.0.1, in its own
    process: pyghmi keeps its sessions and sockets in class-wide state, so a client and a
    server in one process would share them."""

    def __init__(self, log: Path, *, user: str = "admin", password: str = "secret",
                 on_reset: list[str] | None = None, off_delay: float = 0.0,
                 port: int | None = None, refuse_reset: bool = False) -> None:
        self.port: int = port or 0
        if not self.port:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
        self.log, self.user, self.password = log, user, password
        self.argv = [sys.executable, "-m", "tests.ipmi_bmc", "--port", str(self.port),
                     "--log", str(log), "--user", user, "--password", password,
                     "--off-delay", str(off_delay)]
        if refuse_reset:
            self.argv.append("--refuse-reset")
        if on_reset:
            import json

            self.argv += ["--on-reset", json.dumps(on_reset)]
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> IpmiBmc:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL,
                                     cwd=Path(__file__).resolve().parent.parent)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "ipmi bmc listening on ..." once bound
        if "listening" not in line:
            self.stop()
            raise RuntimeError(f"the IPMI BMC did not start: {line!r}")
        return self

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> IpmiBmc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def commands(self) -> list[str]:
        """The chassis control commands carried out, oldest first."""
        return self.log.read_text().split() if self.log.exists() else []
