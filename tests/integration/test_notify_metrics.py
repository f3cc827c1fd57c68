"""SPEC O3, O4, D7, D8, P2, O2: an end-to-end remediation tells people through Apprise
(its generic JSON webhook target, ``json://``, to a real HTTP receiver on 127.0.0.1) with
the alert's evidence unchanged, and ``/metrics`` scraped over real HTTP serves every
metric with the right values afterwards.

The real engine, store, controller cycle, http provider and provider simulator against
the in-process simulated cluster (the rig of test_controller_cycle.py)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_heal import extra
from slurm_heal.controller import Controller, Notifier
from slurm_heal.metrics import METRIC_NAMES, Metrics
from slurm_heal.models import Command, Phase
from slurm_heal.notify import Notifications, notify_settings
from slurm_heal.notify.events import EVIDENCE_MARK
from slurm_heal.providers.http import HttpProvider
from slurm_heal.types import Alert, Evidence, Severity
from tests.fakes import Rig
from tests.integration.test_controller_cycle import make_rig


class Receiver:
    """A webhook receiver on 127.0.0.1: every POSTed JSON body, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail_next = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.fail_next:
                    outer.fail_next -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                outer.bodies.append(json.loads(raw))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def titles(self) -> list[str]:
        return [str(b.get("title", "")) for b in self.bodies]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _alert(rig: Rig, node: str, fault: str, severity: Severity, line: str) -> dict[str, Any]:
    """What the node check publishes; returns the published evidence JSON."""
    now = rig.clock()
    a = Alert(node=node, fault=fault, severity=severity, summary=f"{fault} seen",
              first_seen=now, last_seen=now, detector="kernel_log",
              evidence=(Evidence(source="kmsg", text=line, at=now.isoformat(),
                                 data={"xid": 119, "pci": "0000:3b:00"}),))
    section = extra.our_section([a], now)
    rig.cluster.set_extra(node, extra.KEY, section)
    evidence: dict[str, Any] = section["alerts"][0]["evidence"][0]
    return evidence


def _evidence(body: dict[str, Any]) -> list[dict[str, Any]]:
    message = str(body["message"])
    assert EVIDENCE_MARK in message, message
    parsed: list[dict[str, Any]] = json.loads(message.split(EVIDENCE_MARK, 1)[1])
    return parsed


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text.decode()):
        # a family is served even before it has a sample (a labelled counter at zero)
        out.setdefault(fam.name + ("_total" if fam.type == "counter" else ""), [])
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
           **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x
                                                            for k, x in labels.items()))


def test_a_remediation_notifies_with_evidence_and_metrics_serve_its_figures(
        tmp_path: Path, receiver: Receiver) -> None:
    with make_rig(tmp_path) as rig:
        settings = notify_settings({"routes": [{"urls": [receiver.url]}], "backoff": 0.01,
                                    "max_attempts": 5})
        notes = Notifications(settings, rig.store.file.parent)
        metrics = Metrics(store=rig.store, notifications=notes, policy=rig.policy)
        port = metrics.serve("127.0.0.1", 0)
        provider = HttpProvider(rig.sim.url, connect_timeout=2, read_timeout=5, attempts=3,
                                backoff=0.01)
        rig.providers.append(provider)
        ctl = Controller(slurm=metrics.timed(rig.cluster, "slurm"),
                         provider=metrics.timed(provider, "provider"), store=rig.store,
                         policy=rig.policy, clock=rig.clock, notifier=Notifier(rig.notes),
                         observers=[notes, metrics.observe])
        try:
            ev119 = _alert(rig, "gpu01", "gpu.xid.119", Severity.CRITICAL,
                           "NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, Timeout after 6s")
            _alert(rig, "gpu03", "gpu.ecc.dbe", Severity.CRITICAL, "dbe count 1")  # manual
            ev_disk = _alert(rig, "gpu04", "disk.low_space", Severity.WARNING,
                             "/scratch 97% full")  # D8: no action, the support route
            receiver.fail_next = 1  # the first delivery fails: retried with backoff
            rig.run(ctl, 2)
            rig.store.add_command(Command(id="c-p", at=rig.clock(), kind="pause", by="alice",
                                          reason="firmware rollout"))
            rig.run(ctl, 1)
            rig.store.add_command(Command(id="c-u", at=rig.clock(), kind="unpause", by="alice"))
            rig.run(ctl, 30)
            assert rig.rems("gpu01")[0].phase is Phase.DONE
            for _ in range(20):  # the sender, as its thread would (retries included)
                notes.deliver_due()
                if not notes.depth():
                    break
                time.sleep(0.05)
            assert notes.depth() == 0 and notes.errors >= 1 and notes.failed == 0

            by_title = {t: b for t, b in zip(receiver.titles(), receiver.bodies, strict=True)}
            alert = by_title["slurm-heal: gpu.xid.119 on gpu01 (critical)"]
            assert _evidence(alert) == [ev119]  # D7: unchanged
            support = next(b for t, b in by_title.items() if "support: disk.low_space" in t)
            assert _evidence(support) == [ev_disk]  # D8 with its evidence
            approval = next(b for t, b in by_title.items() if "approval needed" in t)
            assert "slurm-heal approve r-" in approval["message"] and "gpu03" in approval["message"]
            assert any("reboot of gpu01 done" in t for t in by_title)
            assert any("paused by alice" in t for t in by_title)
            assert any("unpaused by alice" in t for t in by_title)
            assert len(receiver.titles()) == len(set(receiver.titles()))  # each once

            m = _scrape(port)
            for name in METRIC_NAMES:  # every metric is served
                assert any(s == name or s.startswith(name + "_") for s in m), name
            assert _value(m, "slurm_heal_time_to_repair_seconds_count",
                          fault="gpu.xid.119", action="reboot") == 1
            ttr = _value(m, "slurm_heal_time_to_repair_seconds_sum", fault="gpu.xid.119")
            done = rig.rems("gpu01")[0]
            assert done.alert_first_seen is not None  # fault first seen -> node resumed
            assert ttr == (done.phase_times["done"] - done.alert_first_seen).total_seconds()
            assert _value(m, "slurm_heal_remediations", phase="done", action="reboot") == 1
            assert _value(m, "slurm_heal_approvals_pending") == 1
            assert _value(m, "slurm_heal_alerts", fault="disk.low_space", severity="warning") == 1
            assert _value(m, "slurm_heal_nodes", state="remediating") == 1  # gpu03 proposed
            assert _value(m, "slurm_heal_breaker_open") == 0
            assert _value(m, "slurm_heal_breaker_window_remediations") == 1  # gpu01's (S5)
            assert _value(m, "slurm_heal_breaker_count") == 1  # the old name, one release more
            assert _value(m, "slurm_heal_paused") == 0
            assert _value(m, "slurm_heal_provider_call_duration_seconds_count", call="submit") == 1
            assert _value(m, "slurm_heal_slurm_call_duration_seconds_count", call="snapshot") >= 30
            assert _value(m, "slurm_heal_notify_errors_total") >= 1
            assert _value(m, "slurm_heal_notify_queue_depth") == 0
            assert _value(m, "slurm_heal_store_bytes") == rig.store.file.stat().st_size
            assert _value(m, "slurm_heal_cycles_total") >= 33
        finally:
            metrics.close()
            notes.close()


def test_repeat_failures_per_machine_count_remediations_in_the_escalation_window(
        tmp_path: Path) -> None:
    """SPEC O4, E2: the same machine remediated twice within the window shows; cancelled
    ones do not count."""
    with make_rig(tmp_path) as rig:
        metrics = Metrics(store=rig.store, policy=rig.policy)
        port = metrics.serve("127.0.0.1", 0)
        ctl = Controller(slurm=rig.cluster, provider=HttpProvider(rig.sim.url, attempts=3,
                                                                  backoff=0.01),
                         store=rig.store, policy=rig.policy, clock=rig.clock,
                         notifier=Notifier(rig.notes), observers=[metrics.observe])
        try:
            for _ in range(2):
                _alert(rig, "gpu01", "gpu.xid.119", Severity.CRITICAL, "Xid 119")
                rig.run(ctl, 20)
                rig.clock.advance(hours=1)  # past the cooldown (S2)
            assert [r.phase for r in rig.rems("gpu01")] == [Phase.DONE, Phase.DONE]
            rig.run(ctl, 1)
            m = _scrape(port)
            machine = rig.rems("gpu01")[0].host or "gpu01"
            assert _value(m, "slurm_heal_repeat_failures", machine=machine) == 2
            assert _value(m, "slurm_heal_time_to_repair_seconds_count", fault="gpu.xid.119") == 2
            rig.clock.advance(days=8)  # out of the window (E2)
            rig.run(ctl, 1)
            assert _value(_scrape(port), "slurm_heal_repeat_failures", machine=machine) == 0
        finally:
            metrics.close()
