"""SPEC D13 (issue 39): gpud's health states as node findings. gpud's answers are real
ones from its repository (tests/data/real/gpud, origins in SOURCES.md), served by a local
HTTP server on 127.0.0.1 as gpud's local API serves them (``GET /v1/states``)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.checks import present
from slurm_heal.checks.config import CheckConfig, GpudConfig, parse_config
from slurm_heal.checks.detectors import gpud
from slurm_heal.checks.node import Unsupported
from slurm_heal.errors import ConfigError
from slurm_heal.types import Severity

REAL = Path(__file__).resolve().parents[1] / "data" / "real" / "gpud"
XID74 = json.loads((REAL / "gpud-docs-tutorials-xid74-states.json").read_text())
XID48 = json.loads((REAL / "gpud-issue-1072-xid48-states.json").read_text())
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)


@pytest.fixture
def served() -> Iterator[tuple[str, dict[str, Any]]]:
    """gpud's local API on 127.0.0.1: ``box["body"]`` is what /v1/states answers."""
    box: dict[str, Any] = {"body": XID74, "paths": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            box["paths"].append(self.path)
            body = json.dumps(box["body"]).encode()
            self.send_response(200 if self.path == "/v1/states" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", box
    finally:
        server.shutdown()
        server.server_close()


def cfg_for(url: str, **kw: Any) -> CheckConfig:
    return parse_config({"gpud": {"url": url, **kw}}, "check.toml")


def test_gpuds_xid_state_is_the_catalogs_xid_with_gpuds_words_as_evidence(
        served: tuple[str, dict[str, Any]]) -> None:
    """D13, D7: gather reads /v1/states; the Xid in gpud's reason is the fault; gpud's
    state, reason and suggested repair are the evidence, unchanged."""
    url, box = served
    cfg = cfg_for(url)
    seen = gpud.DETECTOR.gather(cfg, {}, "gpu01", NOW)
    assert seen == XID74 and box["paths"] == ["/v1/states"]
    [f], update = gpud.DETECTOR.evaluate(cfg, {}, "gpu01", NOW, seen)
    assert update == {}
    assert (f.fault, f.severity, f.detector, f.node) == (
        "gpu.xid.74", Severity.CRITICAL, "gpud", "gpu01")
    assert "XID 74 (NVLINK Error) detected on PCI:0000:04:00" in f.summary
    assert "gpud suggests REBOOT_SYSTEM" in f.summary
    [ev] = f.evidence
    assert ev.source == "gpud" and ev.data["state"] == XID74[0]["states"][0]
    assert ev.data["component"] == "accelerator-nvidia-error-xid"
    assert ev.data["repair_actions"] == ["REBOOT_SYSTEM"]


def test_a_real_xid_48_that_gpud_sends_to_hardware_inspection() -> None:
    [f] = gpud.evaluate(XID48, GpudConfig(), "gpu01", NOW)
    assert f.fault == "gpu.xid.48" and f.severity is Severity.CRITICAL
    assert "HARDWARE_INSPECTION" in f.summary
    assert "GPU-c44c6e5f-72cf-8200-97c2-f9b9ebcf2dbb" in f.evidence[0].text


def _with(states: list[dict[str, Any]], **change: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(states)
    out[0]["states"][0].update(change)
    return out


@pytest.mark.parametrize("change", [
    {"health": "Healthy"},
    {"health": "Initializing"},
    {"suggested_actions": {"description": "", "repair_actions": ["IGNORE_NO_ACTION_REQUIRED"]}},
])
def test_a_healthy_state_or_one_gpud_says_needs_nothing_is_no_finding(
        change: dict[str, Any]) -> None:
    assert gpud.evaluate(_with(XID74, **change), GpudConfig(), "gpu01", NOW) == []


def test_a_degraded_state_or_a_users_app_to_check_is_a_warning() -> None:
    [f] = gpud.evaluate(_with(XID74, health="Degraded"), GpudConfig(), "gpu01", NOW)
    assert f.severity is Severity.WARNING
    app = {"description": "", "repair_actions": ["CHECK_USER_APP_AND_GPU"]}
    [f] = gpud.evaluate(_with(XID74, suggested_actions=app), GpudConfig(), "gpu01", NOW)
    assert f.severity is Severity.WARNING


def test_a_component_the_table_does_not_map_is_no_finding_until_mapped() -> None:
    plugin = copy.deepcopy(XID74)
    plugin[0]["component"] = "exit-1"
    plugin[0]["states"][0]["reason"] = "error executing state plugin (exit code: 1)"
    assert gpud.evaluate(plugin, GpudConfig(), "gpu01", NOW) == []
    cfg = cfg_for("https://localhost:15132", map=["exit-1=fs.readonly"])
    [f] = gpud.evaluate(plugin, cfg.gpud, "gpu01", NOW)
    assert f.fault == "fs.readonly" and "exit code: 1" in f.summary


def test_an_xid_state_without_a_code_is_the_unknown_xid() -> None:
    [f] = gpud.evaluate(_with(XID74, reason="GPU error"), GpudConfig(), "gpu01", NOW)
    assert f.fault == "gpu.xid.unknown"


@pytest.mark.parametrize("body", [{"component": "x"}, [{"component": "x"}], "[]x"])
def test_an_answer_that_is_not_gpuds_shape_is_an_error(body: Any) -> None:
    with pytest.raises(RuntimeError):
        gpud.evaluate(body, GpudConfig(), "gpu01", NOW)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `gpud` on PATH (present.gpud looks for the program before its port)."""
    prog = tmp_path / "bin" / "gpud"
    prog.parent.mkdir()
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    monkeypatch.setenv("PATH", str(prog.parent))


def test_gpud_not_installed_is_not_looked_for(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path))  # no gpud.service either
    assert present.gpud(CheckConfig(), "gpu01") == (
        "gpud is not installed (no gpud on PATH, no gpud.service)")


def test_gpud_not_answering_is_unsupported_not_a_fault(installed: None) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = cfg_for(f"http://127.0.0.1:{port}", connect_timeout=1)
    with pytest.raises(Unsupported, match="gpud does not answer"):
        gpud.DETECTOR.gather(cfg, {}, "gpu01", NOW)
    assert present.gpud(cfg, "gpu01") == f"gpud is not running (nothing listens on port {port})"


def test_present_finds_gpud_listening_on_its_port(served: tuple[str, dict[str, Any]],
                                                 installed: None) -> None:
    url, _box = served
    assert present.gpud(cfg_for(url), "gpu01") is None
    assert present.gpud(cfg_for("https://gpud.example:15132"), "gpu01") is None  # remote


@pytest.mark.parametrize(("section", "key"), [
    ({"map": ["accelerator-nvidia-ecc"]}, "gpud.map"),
    ({"url": "localhost:15132"}, "gpud.url"),
    ({"verify": True}, "gpud.verify"),
])
def test_a_bad_gpud_section_is_refused_naming_the_key(section: dict[str, Any],
                                                      key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"gpud": section}, "check.toml")
    assert key in str(err.value), err.value
