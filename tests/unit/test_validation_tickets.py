"""Hardware tickets (SPEC V2): every sink files against a real HTTP server on 127.0.0.1
(webhook, GitHub issues API, Jira REST), with the retry on 5xx/429, a clear error for a
garbage answer, and a failing sink that never stops the others; the directory sink keeps
the ticket and its logs whatever the network does. Tokens come from the environment."""

from __future__ import annotations

import base64
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.errors import ConfigError, TicketError
from slurm_heal.validation import runner
from slurm_heal.validation.suite import SuiteResult
from slurm_heal.validation.tickets import (
    GithubSink,
    Ticket,
    WebhookSink,
    file_all,
    sinks_from,
    summarize,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
FAST = {"backoff": "0s", "timeout": "5s"}


class Server:
    """An HTTP server on 127.0.0.1: records every request, answers from a script
    (status, body) in order, then with ``default``."""

    def __init__(self, default: tuple[int, Any]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[tuple[int, Any]] = []
        self.default = default
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": json.loads(raw) if raw else None})
                status, body = outer.script.pop(0) if outer.script else outer.default
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server((201, {"ok": True}))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def failed_run(tmp_path: Path) -> tuple[Ticket, Path]:
    """A real run of the runner on a machine whose GPU memory test fails."""
    bad_gpu = DATA / "dcgm4-diag-r3-fail.json"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"node": "gpu-017", "peer": "gpu-018", "vendor": "nvidia",
                                "steps": [
                                    {"name": "gpu", "kind": "dcgm",
                                     "command": ["sh", "-c", f"cat {bad_gpu}; exit 226"]},
                                    {"name": "hello", "command": ["echo", "fine"]}]}))
    out = tmp_path / "results"
    assert runner.main(["--spec", str(spec), "--out", str(out)]) == 1
    results = SuiteResult.model_validate_json((out / "results.json").read_text())
    ticket = Ticket(
        id="val-gpu-017-20261130", node="gpu-017", summary=summarize(results),
        identity={"instance_id": "i-0abc123", "serial": "1654123000002", "host": "hv-42"},
        faults=({"fault": "gpu.xid_48", "at": "2026-11-29T10:00:00+00:00"},
                {"fault": "gpu.xid_48", "at": "2026-11-30T02:00:00+00:00"}),
        escalation=("reboot", "reset_gpu", "migrate"), results=results,
        created="2026-11-30T03:00:00+00:00")
    return ticket, out


def test_v2_the_ticket_text_shows_node_identity_faults_escalation_results_and_logs(
        failed_run: tuple[Ticket, Path]) -> None:
    ticket, out = failed_run
    assert ticket.summary.startswith("gpu-017 failed hardware validation: gpu (dcgmi diag: "
                                     "memory Fail on GPU 1")
    sink = GithubSink(repo="acme/hw", api_url="http://127.0.0.1:1")
    title, body = sink.texts(ticket, out, "/tickets/val-gpu-017-20261130.logs.tar.gz")
    assert title.startswith("[slurm-heal] gpu-017 failed hardware validation")
    for words in ("`gpu-017`", "peer `gpu-018`", "instance_id: `i-0abc123`",
                  "serial: `1654123000002`", "fault=gpu.xid_48, at=2026-11-29T10:00:00",
                  "reboot → reset_gpu → migrate", "| gpu (dcgm) | **fail** |",
                  "memory Fail on GPU 1", "double bit ECC", "| hello (command) | **pass** |",
                  'fail_on=["Fail"]', "gpu.log",
                  "/tickets/val-gpu-017-20261130.logs.tar.gz"):
        assert words in body, words


def test_v2_webhook_retries_a_503_and_sends_the_ticket_once_with_its_idempotency_key(
        server: Server, failed_run: tuple[Ticket, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    monkeypatch.setenv("HOOK_TOKEN", "s3cret")
    server.script = [(503, {"busy": True}), (200, {"id": "T-77"})]
    [sink] = sinks_from([{"kind": "webhook", "url": server.url + "/hooks/hw",
                          "token_env": "HOOK_TOKEN", **FAST}])
    assert sink.file(ticket, out) == "T-77"
    assert len(server.requests) == 2  # the 503, then the retry
    sent = server.requests[-1]
    assert sent["path"] == "/hooks/hw"
    assert sent["headers"]["Idempotency-Key"] == "val-gpu-017-20261130"
    assert sent["headers"]["Authorization"] == "Bearer s3cret"
    body = sent["body"]
    assert body["node"] == "gpu-017" and body["identity"]["instance_id"] == "i-0abc123"
    assert body["results"]["steps"][0]["outcome"] == "fail"
    assert body["logs"] == str(out)
    assert list(body["log_tails"]) == ["gpu"]  # failed steps only
    assert body["log_tails"]["gpu"] == (out / "gpu.log").read_text()[-4096:]


def test_v2_webhook_body_is_capped_by_dropping_the_log_tails(
        server: Server, failed_run: tuple[Ticket, Path]) -> None:
    ticket, out = failed_run
    (out / "gpu.log").write_text("x" * 100_000)
    sink = WebhookSink(url=server.url, max_body_bytes=5000, backoff="0s")
    body = sink.body(ticket, out)
    assert body["log_tails"] == {} and body["log_tails_dropped"] is True
    assert len(json.dumps(body)) <= 5000


def test_v2_github_issue_from_the_templates_with_the_token_from_the_environment(
        server: Server, failed_run: tuple[Ticket, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    monkeypatch.setenv("GH_HW_TOKEN", "ghp_test")
    server.script = [(429, {"message": "slow down"}),
                     (201, {"number": 12, "html_url": "https://github.example/acme/hw/issues/12"})]
    template = tmp_path / "issue.md.j2"
    template.write_text("Node {{ ticket.node }} ({{ ticket.identity.serial }}): "
                        "{% for s in results.steps %}{{ s.name }}={{ s.outcome }} {% endfor %}"
                        "logs at {{ logs }}\n")
    [sink] = sinks_from([{"kind": "github", "repo": "acme/hw", "api_url": server.url,
                          "token_env": "GH_HW_TOKEN", "labels": ["hardware", "gpu"],
                          "title": "HW: {{ ticket.node }}", "template": str(template),
                          **FAST}])
    assert sink.file(ticket, out) == "https://github.example/acme/hw/issues/12"
    assert len(server.requests) == 2
    sent = server.requests[-1]
    assert sent["path"] == "/repos/acme/hw/issues"
    assert sent["headers"]["Authorization"] == "Bearer ghp_test"
    assert sent["headers"]["Accept"] == "application/vnd.github+json"
    assert sent["body"] == {"title": "HW: gpu-017", "labels": ["hardware", "gpu"],
                            "body": f"Node gpu-017 (1654123000002): gpu=fail hello=pass "
                                    f"logs at {out}\n"}


def test_v2_jira_issue_returns_the_key_with_basic_auth_from_the_environment(
        server: Server, failed_run: tuple[Ticket, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    monkeypatch.setenv("JIRA_TOKEN", "atl-token")
    monkeypatch.setenv("JIRA_USER", "ops@example.org")
    server.script = [(500, b"<html>oops</html>"),
                     (201, {"id": "10042", "key": "HW-42", "self": server.url + "/x"})]
    [sink] = sinks_from([{"kind": "jira", "url": server.url, "project": "HW",
                          "issuetype": "Hardware", "user_env": "JIRA_USER", **FAST}])
    assert sink.file(ticket, out) == "HW-42"
    sent = server.requests[-1]
    assert sent["path"] == "/rest/api/2/issue"
    auth = base64.b64decode(sent["headers"]["Authorization"].removeprefix("Basic ")).decode()
    assert auth == "ops@example.org:atl-token"
    fields = sent["body"]["fields"]
    assert fields["project"] == {"key": "HW"} and fields["issuetype"] == {"name": "Hardware"}
    assert fields["summary"].startswith("[slurm-heal] gpu-017 failed hardware validation")
    text = fields["description"]  # Jira wiki markup
    assert "h3. Escalation\nreboot -> reset_gpu -> migrate" in text
    assert "* instance_id: {{i-0abc123}}" in text
    assert "|gpu (dcgm)|*fail*|dcgmi diag: memory Fail on GPU 1" in text
    assert fields["labels"] == ["hardware", "slurm-heal"]


def test_v2_a_garbage_answer_is_a_clear_error_and_the_other_sinks_still_file(
        server: Server, failed_run: tuple[Ticket, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test")
    garbage = Server((200, b"<html>proxy login</html>"))
    try:
        sinks = sinks_from([
            {"kind": "github", "repo": "acme/hw", "api_url": garbage.url, **FAST},
            {"kind": "webhook", "url": server.url + "/hook", **FAST},
            {"kind": "directory", "path": str(tmp_path / "tickets")},
        ])
        filed = dict(file_all(sinks, ticket, out))
    finally:
        garbage.close()
    error = filed["github"]
    assert isinstance(error, TicketError)
    assert "the answer is not JSON" in str(error) and "/repos/acme/hw/issues" in str(error)
    # The directory sink went first: the ticket and its logs are on disk ...
    doc = json.loads(Path(str(filed["directory"])).read_text())
    assert doc["id"] == ticket.id and doc["results"]["outcome"] == "fail"
    archive = tmp_path / "tickets" / f"{ticket.id}.logs.tar.gz"
    with tarfile.open(archive) as tar:
        assert f"{ticket.id}/gpu.log" in tar.getnames()
    # ... and the webhook points at that archive.
    assert filed["webhook"] == server.url + "/hook"
    assert server.requests[-1]["body"]["logs"] == str(archive)


def test_v2_a_refusal_is_not_retried_and_a_missing_token_or_dead_server_is_named(
        server: Server, failed_run: tuple[Ticket, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    server.script = [(401, {"message": "Bad credentials"})]
    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    [gh] = sinks_from([{"kind": "github", "repo": "acme/hw", "api_url": server.url, **FAST}])
    with pytest.raises(TicketError, match=r"HTTP 401: .*Bad credentials"):
        gh.file(ticket, out)
    assert len(server.requests) == 1
    monkeypatch.delenv("GITHUB_TOKEN")
    with pytest.raises(TicketError, match="environment variable GITHUB_TOKEN is not set"):
        gh.file(ticket, out)
    dead = Server((200, {}))
    dead.close()
    [hook] = sinks_from([{"kind": "webhook", "url": dead.url, "retries": 1, **FAST}])
    with pytest.raises(TicketError, match=r"webhook sink http://127\.0\.0\.1:\d+: ConnectionError"):
        hook.file(ticket, out)


@pytest.mark.parametrize(("item", "key", "words"), [
    ({"kind": "github", "repo": "acme/hw", "token": "ghp_x"}, "validation.tickets[0].token",
     "never written in the file"),
    ({"kind": "github", "repo": "acme"}, "validation.tickets[0].repo", "should match"),
    ({"kind": "jira", "url": "https://j", "project": "hw"}, "validation.tickets[0].project",
     "should match"),
    ({"kind": "webhook", "url": "https://h", "retry": 3}, "validation.tickets[0].retry",
     "Extra inputs"),
    ({"kind": "github", "repo": "a/b", "template": "/nonexistent/t.j2"},
     "validation.tickets[0].template", "cannot read the template"),
    ({"kind": "jira", "url": "https://j", "project": "HW", "title": "{{ ticket.node "},
     "validation.tickets[0].title", "title does not compile"),
])
def test_v2_a_bad_ticket_sink_is_refused_at_load_naming_the_key(
        item: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        sinks_from([item], "policy.toml")
    assert str(err.value).startswith(f"policy.toml: {key}: "), str(err.value)


def test_v2_bad_ticket_sinks_are_refused_when_the_validation_section_loads() -> None:
    from slurm_heal.validation.suite import validation_from
    with pytest.raises(ConfigError, match=r"^policy\.toml: validation\.tickets\[1\]\.token: "):
        validation_from({"tickets": [{"kind": "directory", "path": "/var/lib/slurm-heal/tickets"},
                                     {"kind": "jira", "url": "https://j", "project": "HW",
                                      "token": "secret"}]}, "policy.toml")
    loaded = validation_from({"tickets": [{"kind": "webhook", "url": "https://h/x"}]})
    assert [s.kind for s in sinks_from(loaded.tickets)] == ["webhook"]


def test_v2_a_template_naming_an_unknown_field_is_a_clear_error_and_the_directory_keeps_it(
        failed_run: tuple[Ticket, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticket, out = failed_run
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test")
    template = tmp_path / "bad.md.j2"
    template.write_text("{{ ticket.rack }}\n")  # compiles, but a ticket has no rack
    sinks = sinks_from([{"kind": "github", "repo": "acme/hw", "api_url": "http://127.0.0.1:9",
                         "template": str(template), **FAST},
                        {"kind": "directory", "path": str(tmp_path / "tickets")}])
    filed = dict(file_all(sinks, ticket, out))
    assert isinstance(filed["github"], TicketError)
    assert "the template does not render" in str(filed["github"]) and "rack" in str(
        filed["github"])
    assert Path(str(filed["directory"])).is_file()
