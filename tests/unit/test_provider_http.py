"""The http provider against the simulator over real HTTP on 127.0.0.1 (SPEC S6, L2).

Nothing is patched: the simulator's injectable faults produce the failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_heal.errors import ProviderError, ProviderRefused, ProviderTimeout
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.simulator import SimulatorServer
from slurm_heal.types import Action


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.05) as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def provider(sim: SimulatorServer, sleeps: list[float]) -> Iterator[HttpProvider]:
    p = HttpProvider(sim.url, connect_timeout=1.0, read_timeout=0.3, attempts=4,
                     backoff=0.01, sleep=sleeps.append)
    yield p
    p.close()


def test_reboot_is_created_then_succeeds(sim: SimulatorServer, provider: HttpProvider) -> None:
    op = provider.submit("gpu07", Action.REBOOT, "r-1:act:0")
    assert (op.node, op.action, op.key) == ("gpu07", Action.REBOOT, "r-1:act:0")
    assert op.status in ("pending", "running")
    assert sim.wait_idle(5)
    done = provider.status("r-1:act:0")
    assert done is not None and done.status == "succeeded" and done.id == op.id
    assert provider.operation(op.id).status == "succeeded"
    assert sim.stats()["executed"] == {"r-1:act:0": 1}


def test_same_key_twice_returns_the_same_operation(sim: SimulatorServer,
                                                   provider: HttpProvider) -> None:
    """SPEC S6: a second submit with the key is the first operation, not a second action."""
    first = provider.submit("gpu07", Action.REBUILD, "r-2:act:0")
    second = provider.submit("gpu07", Action.REBUILD, "r-2:act:0")
    assert first.id == second.id
    assert sim.stats()["executed"] == {"r-2:act:0": 1}


def test_status_of_a_key_never_submitted_is_none(provider: HttpProvider) -> None:
    assert provider.status("r-never:act:0") is None


def test_5xx_answers_are_retried_with_the_same_key(sim: SimulatorServer, provider: HttpProvider,
                                                   sleeps: list[float]) -> None:
    sim.set_faults(error_5xx=2)
    op = provider.submit("gpu07", Action.REBOOT, "r-3:act:0")
    assert op.key == "r-3:act:0"
    assert len(sleeps) == 2  # two back-offs, then success
    assert sim.stats()["executed"] == {"r-3:act:0": 1}


def test_429_is_retried_after_the_servers_retry_after(sim: SimulatorServer,
                                                     provider: HttpProvider,
                                                     sleeps: list[float]) -> None:
    sim.set_faults(error_429=1, retry_after=7)
    provider.submit("gpu07", Action.REBOOT, "r-4:act:0")
    assert sleeps == [7.0]


def test_lost_response_after_the_action_ran_does_not_run_it_twice(
        sim: SimulatorServer, provider: HttpProvider) -> None:
    """The core S6 guarantee: the server did the action, the answer was lost, the client
    retried with the same key and got the same operation; the action ran once."""
    sim.set_faults(lose_response=1)
    op = provider.submit("gpu07", Action.REBOOT, "r-5:act:0")
    assert op.key == "r-5:act:0"
    assert sim.stats()["executed"] == {"r-5:act:0": 1}
    assert len(sim.operations()) == 1


def test_a_slow_provider_ends_in_provider_timeout(sim: SimulatorServer,
                                                  provider: HttpProvider) -> None:
    sim.set_faults(latency=1.0)
    quick = HttpProvider(sim.url, read_timeout=0.2, attempts=2, sleep=lambda s: None)
    with pytest.raises(ProviderTimeout, match="gave up after 2 tries: timed out"):
        quick.status("r-6:act:0")


def test_a_hung_create_times_out_and_never_executes(sim: SimulatorServer,
                                                    provider: HttpProvider) -> None:
    sim.set_faults(timeout=10, hang=1.0)
    quick = HttpProvider(sim.url, read_timeout=0.2, attempts=2, sleep=lambda s: None)
    with pytest.raises(ProviderTimeout):
        quick.submit("gpu07", Action.REBOOT, "r-7:act:0")
    assert sim.stats()["executed"] == {}


def test_bad_token_is_a_clear_error(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("wrong\n")
    with SimulatorServer(port=0, token="s3cret", duration=0) as sim:
        p = HttpProvider(sim.url, token_file=token, attempts=1)
        with pytest.raises(ProviderError, match="HTTP 401 .*token file.*invalid bearer token"):
            p.submit("gpu07", Action.REBOOT, "r-8:act:0")
        assert sim.stats()["executed"] == {}
        # The token file is re-read when it changes: rotation needs no restart.
        token.write_text("s3cret\n")
        assert p.submit("gpu07", Action.REBOOT, "r-8:act:0").key == "r-8:act:0"
        p.close()


def test_missing_token_file_is_named(tmp_path: Path) -> None:
    with SimulatorServer(port=0) as sim:
        p = HttpProvider(sim.url, token_file=tmp_path / "nope", attempts=1)
        with pytest.raises(ProviderError, match="cannot read token file .*nope"):
            p.submit("gpu07", Action.REBOOT, "k")


def test_client_error_carries_the_servers_message(provider: HttpProvider) -> None:
    provider.submit("gpu07", Action.REBOOT, "r-9:act:0")
    # a definite no (nothing ran): ProviderRefused, which the controller records as failed
    with pytest.raises(ProviderRefused, match="HTTP 409: idempotency key 'r-9:act:0' was used"):
        provider.submit("gpu08", Action.REBOOT, "r-9:act:0")


def test_remove_is_refused_without_a_call(sim: SimulatorServer, provider: HttpProvider) -> None:
    """SPEC Q2: removal is a person's job, never a provider call."""
    with pytest.raises(ProviderRefused, match="'remove' is not enabled"):
        provider.submit("gpu07", Action.REMOVE, "r-10:act:0")
    assert sim.stats()["requests"] == 0


def _one_shot_server(body: bytes, status: int = 200) -> tuple[str, object]:
    """A tiny server that answers every request with ``body`` (a misbehaving provider)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Bad(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Bad)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd


@pytest.mark.parametrize(("body", "problem"), [
    (b"<html>oops</html>", "answer is not JSON"),
    (b'{"op": {}}', "expected a JSON object with 'operation'"),
    (b'{"operation": {"id": "x", "node": "gpu07", "action": "reboot"}}',
     "missing or non-string status"),
    (b'{"operation": {"id": "x", "node": "gpu07", "action": "reboot", "status": "weird"}}',
     "status 'weird' is not one of"),
])
def test_malformed_answers_name_the_problem(body: bytes, problem: str) -> None:
    url, httpd = _one_shot_server(body)
    try:
        p = HttpProvider(url, attempts=1)
        with pytest.raises(ProviderError, match=problem):
            p.submit("gpu07", Action.REBOOT, "r-11:act:0")
    finally:
        httpd.shutdown()  # type: ignore[attr-defined]


def test_an_unreachable_provider_is_said_in_plain_words_not_requests_text(
        sleeps: list[float]) -> None:
    """SPEC O6, issue 36 item 11: the provider-error line status, explain, the console
    and the API show is the address and the plain reason, never urllib3's
    ``HTTPConnectionPool(host=...): Max retries exceeded ... [Errno 111]``."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = HttpProvider(f"http://127.0.0.1:{port}/base", attempts=1, sleep=sleeps.append)
    with pytest.raises(ProviderError) as info:
        p.submit("gpu07", Action.REBOOT, "r-12:act:0")
    message = str(info.value)
    assert message.endswith(f"cannot connect to http://127.0.0.1:{port}: connection refused")
    for raw in ("HTTPConnectionPool", "Max retries", "Errno", "NewConnectionError", "object at"):
        assert raw not in message, message
    named = HttpProvider("http://no-such-host.invalid", attempts=1, sleep=sleeps.append)
    with pytest.raises(ProviderError, match="cannot connect to http://no-such-host.invalid: "
                                            "the host name does not resolve$"):
        named.submit("gpu07", Action.REBOOT, "r-12:act:1")


def test_unreachable_provider_is_retried_then_a_clear_error(sleeps: list[float]) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = HttpProvider(f"http://127.0.0.1:{port}", attempts=3, backoff=0.01, sleep=sleeps.append)
    with pytest.raises(ProviderError, match="gave up after 3 tries: connection failed") as info:
        p.submit("gpu07", Action.REBOOT, "r-12:act:0")
    assert not isinstance(info.value, ProviderTimeout)
    assert len(sleeps) == 2 and all(0 <= s <= 0.04 for s in sleeps)  # jittered back-off
