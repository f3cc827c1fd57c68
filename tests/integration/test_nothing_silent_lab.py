"""SPEC O6 Nothing silent on the real Slurm lab (issue 25 items 1, 2): the operator's own
malformed drain (`scontrol update ... reason="heal-request: reboot detector=ibmön id=ü1 x"`)
and the README's detector request with no alert, under `slurm-heal daemon` as a process,
read back by `slurm-heal status` and `explain` as an operator runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from slurm_heal.models import mark
from tests.integration.test_daemon_lab import Heal, heal  # noqa: F401  (the fixture)
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

BAD = "heal-request: reboot detector=ibmön id=ü1 x"
REQUEST = "heal-request: reboot detector=ibmon id=4711 port 1 flapping"


def _cli(lab: Lab, h: Heal, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", *args, "--json",
                           "--state-dir", str(h.state_dir)], env=lab.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_a_malformed_drain_and_a_request_without_evidence_are_said_on_a_real_lab(
        lab: Lab, heal: Heal) -> None:  # noqa: F811
    lab.scontrol("update", "nodename=gpu03", "state=drain", f"reason={BAD}")
    lab.scontrol("update", "nodename=gpu02", "state=drain", f"reason={REQUEST}")
    heal.start_daemon()
    heal.wait(lambda: any(r.data.blocked == mark("P1") for r in heal.rems("gpu02")),
              what="gpu02's request waiting for evidence")
    heal.wait(lambda: "request.malformed" in heal.logs(), what="the malformed request noticed")
    status = _cli(lab, heal, "status")
    assert status["counts"]["drained_by_others"] >= 1, status["counts"]
    [bad] = [f for f in status["foreign"] if f["node"] == "gpu03"]
    assert "ibmön" in bad["problem"] and bad["reason"] == BAD, bad
    [waiting] = [f for f in status["in_flight"] if f["node"] == "gpu02"]
    assert "waits for a confirmed alert on gpu02: SPEC P1" in waiting["waiting_for"]
    explained = _cli(lab, heal, "explain", "gpu03")
    assert [a["fault"] for a in explained["alerts"]] == ["request.malformed"]
    assert "ibmön" in explained["alerts"][0]["summary"]
    # notified once (the daemon's log notifier: one line per notice), nothing done
    logs = "\n".join(p.read_text(errors="replace") for p in heal.tmp.glob("daemon-*.log"))
    assert logs.count("rule=Q1 effect=notify why=request.malformed") == 1, logs
    assert logs.count("rule=P1 effect=notify why=reboot of gpu02") == 1, logs
    assert heal.executed() == {}
