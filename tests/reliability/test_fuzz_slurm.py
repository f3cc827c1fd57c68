"""Fuzzing the three Slurm backends' parsers (issue 22, item 2; SPEC I3, I6).

`sinfo --json` printing ``{"nodes": true}`` ended the daemon with a TypeError, an
`squeue --json` job whose ``nodes`` is ``gpu[`` with ClusterShell's NodeSetParseError.
Whatever Slurm answers, each backend's parser raises only the project's SlurmError (the
daemon skips the cycle and logs it): the commands (`sinfo`/`scontrol --json`, `squeue
--json`, `scontrol show node -o`), slurmrestd (a real HTTP server on 127.0.0.1 answering
the fuzzed document) and pyslurm (a module whose ``load()`` gives the fuzzed records).
Profiles as in test_fuzz_inputs.py (``SLURM_HEAL_FUZZ=long``: 10,000 examples each).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slurm_heal.errors import SlurmError
from slurm_heal.slurm.cli import parse_scontrol_nodes, parse_sinfo_json, parse_squeue_json
from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm
from slurm_heal.slurm.rest import RestSlurm

pytestmark = pytest.mark.reliability

LONG = os.environ.get("SLURM_HEAL_FUZZ", "ci") == "long"
FUZZ = settings(max_examples=10_000 if LONG else 150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text(max_size=20))
_any = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
_hostlists = st.sampled_from(["gpu[", "gpu[01-", "gpu]", "gpu[1-2]x[", "gpu[01-04]", "gpu01",
                              "a,b,,", "[]", "gpu[9-1]", "gpu[0-99999999999]", ""]) \
    | st.text(max_size=12)


def _maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(good, good, _any)


_node = st.fixed_dictionaries({"name": _maybe(st.sampled_from(["gpu01", "gpu02"]))}, optional={
    "state": _maybe(st.sampled_from(["IDLE", "DOWN*+DRAIN"]) | st.lists(st.text(max_size=6))),
    "state_flags": _any, "reason": _any, "reason_changed_at": _any, "boot_time": _any,
    "extra": _maybe(st.text(max_size=30)), "partitions": _any, "features": _any,
    "reason_set_by_user": _any, "slurmd_start_time": _any, "address": _any})
_job = st.fixed_dictionaries({"job_id": _maybe(st.integers(1, 10**6))}, optional={
    "nodes": _maybe(_hostlists), "job_state": _maybe(st.sampled_from(["RUNNING", "PENDING"])),
    "time_limit": _any, "end_time": _any, "start_time": _any, "user_name": _any,
    "user_id": _any, "name": _any})
_errors = st.one_of(st.just([]), _any, st.lists(st.fixed_dictionaries(
    {}, optional={"errno": _any, "error": _any, "description": _any}), max_size=2))
_sinfo_doc = st.one_of(_any, st.fixed_dictionaries({}, optional={
    "nodes": st.one_of(_any, st.lists(_node, max_size=3)), "errors": _errors}))
_squeue_doc = st.one_of(_any, st.fixed_dictionaries({}, optional={
    "jobs": st.one_of(_any, st.lists(_job, max_size=3)), "errors": _errors}))


def _text(doc: Any) -> str:
    return json.dumps(doc)


def test_the_answers_that_crashed_the_daemon_are_slurm_errors() -> None:
    """The two shapes of issue 22 item 2, by name."""
    with pytest.raises(SlurmError, match="'nodes' is not a list"):
        parse_sinfo_json('{"nodes": true}')
    with pytest.raises(SlurmError, match="host list"):
        parse_squeue_json(json.dumps({"jobs": [{"job_id": 7, "nodes": "gpu[",
                                                "job_state": "RUNNING"}]}))
    with pytest.raises(SlurmError, match="more than"):
        parse_squeue_json(json.dumps({"jobs": [{"job_id": 7, "nodes": "g[0-99999999]"}]}))
    with pytest.raises(SlurmError):
        parse_sinfo_json('{"errors": 5, "nodes": []}')


@FUZZ
@given(_sinfo_doc)
def test_fuzz_the_commands_node_json_only_raises_slurm_error(doc: Any) -> None:
    try:
        parse_sinfo_json(_text(doc))
    except SlurmError as exc:
        assert str(exc)


@FUZZ
@given(_squeue_doc)
def test_fuzz_the_commands_job_json_only_raises_slurm_error(doc: Any) -> None:
    try:
        parse_squeue_json(_text(doc))
    except SlurmError as exc:
        assert str(exc)


@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=80),
    st.builds(lambda n, s, b, r, e: f"NodeName={n} State={s} BootTime={b} Reason={r} Extra={e}",
              st.text(max_size=8), st.text(max_size=8), st.text(max_size=12),
              st.text(max_size=12), st.text(max_size=20))), max_size=4))
def test_fuzz_the_commands_scontrol_lines_only_raise_slurm_error(lines: list[str]) -> None:
    from slurm_heal.slurm import cli

    try:
        parse_scontrol_nodes("\n".join(lines))
    except cli._Ambiguous:  # by design: the caller reads the JSON instead
        pass
    except SlurmError as exc:
        assert str(exc)



_SEP = "\x1fSHfuzz"
_field = st.sampled_from(["gpu01", "gpu02", "idle+drain", "down*", "root(0)", "Unknown",
                          "1796131563", "(null)", "1:30:00", "UNLIMITED", "7", "", "\n",
                          "gpu[01-02]", "RUNNING"]) | st.text(max_size=10)
_text_answer = st.lists(st.lists(_field, min_size=1, max_size=12).map(
    lambda fs: "".join(f + _SEP for f in fs)), max_size=4).map("\n".join) \
    | st.text(max_size=60)


@FUZZ
@given(_text_answer, st.lists(st.one_of(st.text(max_size=60), st.builds(
    lambda n, os_, s, t: f"NodeName={n} AvailableFeatures=lab NodeAddr=a NodeHostName={n} "
                         f"OS={os_} RealMemory=1 State={s} BootTime=1 SlurmdStartTime=2{t}",
    st.sampled_from(["gpu01", "gpu02"]) | st.text(max_size=6), st.text(max_size=12),
    st.sampled_from(["IDLE", "DOWN*+DRAIN"]) | st.text(max_size=8),
    st.sampled_from(["", " Reason=x [root@1]", " Extra={}", " Comment=a Extra={}",
                     " InstanceId=i-1"]) | st.text(max_size=16))),
    max_size=3).map("\n".join))
# Found by the fresh-clone run: a name no host list can hold, on a line that sends the
# backend to sinfo, raised ClusterShell's NodeSetParseError.
@example(answer="", lines="NodeName=[ AvailableFeatures=lab NodeAddr=a NodeHostName=[ OS=x "
                          "RealMemory=1 State=IDLE BootTime=1 SlurmdStartTime=2 Extra={} "
                          "Reason=x")
def test_fuzz_the_commands_node_text_only_raises_slurm_error(answer: str, lines: str) -> None:
    """Issue 26: `scontrol show node -o` and `sinfo -N -O` text of any shape is nodes, a
    SlurmError naming the problem, or Ambiguous (the caller reads the JSON)."""
    from slurm_heal.slurm import text

    try:
        text.nodes_from_text(lines, lambda sep, names: answer.replace(_SEP, sep))
    except text.Ambiguous:
        pass
    except SlurmError as exc:
        assert str(exc)


@FUZZ
@given(_text_answer)
def test_fuzz_the_commands_job_text_only_raises_slurm_error(answer: str) -> None:
    from slurm_heal.slurm import text

    try:
        text.jobs_from_text(answer, _SEP)
    except SlurmError as exc:
        assert str(exc)

# ------------------------------------------------------------------ slurmrestd
class _Answer:
    body = b"{}"
    status = 200


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(_Answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(_Answer.body)))
        self.end_headers()
        self.wfile.write(_Answer.body)

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestSlurm]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token = tmp_path_factory.mktemp("rest") / "token"
    token.write_text("SLURM_JWT=x.e30.x\n")
    try:
        yield RestSlurm(f"http://127.0.0.1:{server.server_address[1]}", str(token),
                        user="root", timeout=5, api_version="v0.0.41")
    finally:
        server.shutdown()
        server.server_close()


@FUZZ
@given(_sinfo_doc, _squeue_doc, st.sampled_from([200, 200, 404, 500]))
def test_fuzz_the_rest_backend_only_raises_slurm_error(rest: RestSlurm, nodes: Any, jobs: Any,
                                                       status: int) -> None:
    _Answer.status = status
    for doc, read in ((nodes, rest.nodes), (nodes, lambda: rest.node("gpu01")),
                      (jobs, rest.jobs)):
        _Answer.body = _text(doc).encode()
        try:
            read()
        except SlurmError as exc:  # NotFound is a HealError too, not a SlurmError
            assert str(exc)
        except Exception as exc:
            from slurm_heal.errors import NotFound

            if not isinstance(exc, NotFound):
                raise


def test_rest_answer_nested_past_the_parser_is_a_slurm_error(rest: RestSlurm) -> None:
    _Answer.status = 200
    _Answer.body = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(SlurmError, match="not a JSON object"):
        rest.nodes()


# ------------------------------------------------------------------ pyslurm
def _module(nodes: Any, jobs: Any) -> Any:
    return SimpleNamespace(Nodes=SimpleNamespace(load=lambda: nodes),
                           Jobs=SimpleNamespace(load=lambda: jobs))


_records = st.one_of(_any, st.dictionaries(st.text(max_size=4), st.one_of(_node, _any),
                                           max_size=3))
_job_records = st.one_of(_any, st.dictionaries(st.integers(0, 9), st.one_of(
    st.fixed_dictionaries({"id": _maybe(st.integers(1, 99))}, optional={
        "allocated_nodes": _maybe(_hostlists), "state": _any, "time_limit": _any,
        "end_time": _any, "user_name": _any}), _any), max_size=3))


@FUZZ
@given(_records, _job_records)
def test_fuzz_the_pyslurm_backend_only_raises_slurm_error(nodes: Any, jobs: Any) -> None:
    client = PyslurmSlurm(module=_module(nodes, jobs))
    for read in (client.nodes, client.jobs):
        try:
            read()
        except SlurmError as exc:
            assert str(exc)


def test_pyslurm_job_on_an_unreadable_host_list_is_a_slurm_error() -> None:
    client = PyslurmSlurm(module=_module({}, {1: {"id": 1, "allocated_nodes": "gpu["}}))
    with pytest.raises(SlurmError, match="host list"):
        client.jobs()


