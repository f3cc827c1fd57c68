"""The rest backend's HTTP handling against a real server on 127.0.0.1 (SPEC I3).

The server answers with slurmrestd 25.11.7's recorded `/nodes` (tests/data/slurm/25.11/)
and checks the JWT headers. The live behaviour (drain, resume, Extra, jobs, reboot) is
the contract suite's, run with `--slurm 25.11 --slurm-backend rest`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.slurm import make_client
from slurm_heal.slurm.rest import RestSlurm

NODES = Path(__file__).resolve().parent.parent / "data" / "slurm" / "25.11" / "rest_nodes.json"


def _jwt(user: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'HS256'})}.{part({'sun': user, 'exp': 2**31})}.c2lnbmF0dXJl"


class FakeRestd:
    """slurmrestd's v0.0.44 node endpoints, answering only to the right token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.seen.append((method, self.path, dict(self.headers), body))
                if self.headers.get("X-SLURM-USER-TOKEN") != outer.token:
                    self._answer(401, {"errors": [{"error": "Authentication failure"}]})
                    return
                nodes = json.loads(NODES.read_text())
                if self.path.startswith("/slurm/v0.0.44/ping"):
                    self._answer(200, {"pings": [], "errors": []})
                elif self.path.startswith("/slurm/v0.0.44/nodes"):
                    self._answer(200, nodes)
                elif self.path.startswith("/slurm/v0.0.44/node/"):
                    name = self.path.rsplit("/", 1)[-1]
                    found = [n for n in nodes["nodes"] if n["name"] == name]
                    if not found:
                        self._answer(500, {"nodes": [], "errors": [{
                            "description": "Unable to query node", "error_number": 2}]})
                    elif method == "POST":
                        self._answer(200, {"errors": [], "warnings": []})
                    else:
                        self._answer(200, dict(nodes, nodes=found))
                else:  # as slurmrestd 25.11.7 answers a path it lacks (e.g. v0.0.45): text
                    data = (b"Unable to find requested URL endpoint. Please query the "
                            b"'/openapi/v3' endpoint")
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def restd(tmp_path: Path) -> Iterator[tuple[FakeRestd, Path]]:
    token = _jwt("root")
    token_file = tmp_path / "token"
    token_file.write_text(f"SLURM_JWT={token}\n")
    server = FakeRestd(token)
    try:
        yield server, token_file
    finally:
        server.close()


def test_token_from_the_file_and_its_user_go_in_the_headers(restd: tuple[FakeRestd, Path]) -> None:
    server, token_file = restd
    client = make_client("rest", rest_url=server.url, rest_token_file=str(token_file))
    assert [n.name for n in client.nodes()] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    _, _, headers, _ = server.seen[-1]
    assert headers["X-SLURM-USER-TOKEN"] == server.token
    assert headers["X-SLURM-USER-NAME"] == "root"


def test_drain_posts_the_state_list_and_reason(restd: tuple[FakeRestd, Path]) -> None:
    server, token_file = restd
    RestSlurm(server.url, str(token_file)).drain("gpu01", "heal: gpu.xid.79 by=controller")
    method, path, _, body = server.seen[-1]
    assert (method, path) == ("POST", "/slurm/v0.0.44/node/gpu01")
    assert body == {"state": ["DRAIN"], "reason": "heal: gpu.xid.79 by=controller"}


def test_the_newest_openapi_the_server_has_is_used_a_newer_one_is_passed_over(
        restd: tuple[FakeRestd, Path]) -> None:
    """SPEC I3, I6: v0.0.45 (26.05) is asked first; a 25.11 server answers it with a
    plain-text 404, and the client goes on with v0.0.44 instead of failing."""
    server, token_file = restd
    client = RestSlurm(server.url, str(token_file))
    assert client.api == "v0.0.44"
    assert [path for _, path, _, _ in server.seen] == ["/slurm/v0.0.45/ping/",
                                                         "/slurm/v0.0.44/ping/"]


def test_unknown_node_is_not_found(restd: tuple[FakeRestd, Path]) -> None:
    server, token_file = restd
    with pytest.raises(NotFound):
        RestSlurm(server.url, str(token_file)).node("gpu99")


def test_a_refused_token_is_an_error_that_never_shows_the_token(
        restd: tuple[FakeRestd, Path], caplog: pytest.LogCaptureFixture) -> None:
    server, token_file = restd
    wrong = _jwt("mallory")
    token_file.write_text(wrong + "\n")
    client = RestSlurm(server.url, str(token_file))
    with caplog.at_level(logging.DEBUG), pytest.raises(SlurmError) as err:
        client.nodes()
    assert "refused the token" in str(err.value) and str(token_file) in str(err.value)
    assert wrong not in str(err.value) and wrong not in repr(client)
    assert all(wrong not in r.getMessage() for r in caplog.records)


def test_a_rotated_token_file_is_read_again(restd: tuple[FakeRestd, Path]) -> None:
    server, token_file = restd
    good = token_file.read_text()
    token_file.write_text(_jwt("nobody") + "\n")
    client = RestSlurm(server.url, str(token_file))
    with pytest.raises(SlurmError, match="refused"):
        client.nodes()
    token_file.write_text(good)
    st = token_file.stat()
    os.utime(token_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert len(client.nodes()) == 4


def test_no_server_is_unreachable_and_no_token_file_is_named(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(_jwt("root"))
    with pytest.raises(SlurmUnreachable, match="cannot connect"):
        RestSlurm("http://127.0.0.1:9", str(token_file), timeout=2).nodes()
    with pytest.raises(SlurmError, match="cannot read the slurmrestd token file .*missing"):
        RestSlurm("http://127.0.0.1:9", str(tmp_path / "missing")).nodes()
    with pytest.raises(SlurmError, match="needs slurmrestd's URL"):
        make_client("rest", rest_url="", rest_token_file=str(token_file))
