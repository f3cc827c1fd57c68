"""The API on the real lab with the daemon running (SPEC O5, P2, P4, Q1): a fault
proposes a manual remediation, a person approves it with curl, the daemon takes the
approval from the inbox and the node goes through reboot to resume; the audit record
names the token's person; a viewer token cannot approve; a retried approval with the
same Idempotency-Key is one command.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from slurm_heal.models import Phase
from tests.apiserve import XID119, Serve, heal_with_serve
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _curl(srv: Serve, tmp: Path, token: str, path: str, body: dict[str, Any],
          key: str) -> tuple[int, dict[str, Any]]:
    """POST with curl, the token in a header file (not on the command line)."""
    headers = tmp / "curl-headers"
    headers.write_text(f"Authorization: Bearer {token}\nIdempotency-Key: {key}\n"
                       "Content-Type: application/json\n")
    headers.chmod(0o600)
    out = subprocess.run(["curl", "-sS", "-X", "POST", "-H", f"@{headers}", "-d",
                          json.dumps(body), "-w", "\n%{http_code}", srv.url + path],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    text, _, code = out.rpartition("\n")
    return int(code), json.loads(text)


def test_an_approval_with_curl_reaches_the_daemon_and_the_node_is_remediated(
        lab_clean: Lab, tmp_path: Path) -> None:
    lab, node = lab_clean, "gpu02"
    with heal_with_serve(lab, tmp_path) as (heal, srv, tokens):
        heal.kernel_says(node, XID119)
        assert heal.check(node).returncode == 1  # the node check drains it, evidence in Extra
        heal.start_daemon()

        def proposal() -> dict[str, Any] | None:
            items = srv.get("/api/v1/approvals", tokens["victor"]).json()["approvals"]
            return next((i for i in items if i["remediation"]["node"] == node), None)

        heal.wait(proposal, "a proposal waiting for a person in /api/v1/approvals")
        item = proposal()
        assert item is not None
        rid = item["remediation"]["id"]
        # SPEC D7: the alert reaches the person with its evidence unchanged
        (alert,) = item["alerts"]
        assert alert["fault"] == "gpu.xid.119" and "GSP" in alert["explanation"]
        assert any("Xid" in e["text"] and "119" in e["text"] for e in alert["evidence"])
        assert item["remediation"]["action"] == "reboot"
        assert item["remediation"]["approval_rule"] == "P2:default"

        # a viewer token cannot approve
        denied = srv.post(f"/api/v1/remediations/{rid}/approve", tokens["victor"],
                          json={"reason": "looks fine"})
        assert denied.status_code == 403, denied.text
        assert heal.store.load().inbox == ()

        # the operator approves with curl; a retry of the same POST is the same command
        body = {"reason": "GSP timeout, a reboot is fine"}
        code, first = _curl(srv, tmp_path, tokens["alice"],
                            f"/api/v1/remediations/{rid}/approve", body, "approve-gpu02")
        assert code == 202, first
        code, again = _curl(srv, tmp_path, tokens["alice"],
                            f"/api/v1/remediations/{rid}/approve", body, "approve-gpu02")
        assert code == 202 and again["queued"] == first["queued"] and again["replayed"]

        rem = heal.wait_phase(node, Phase.DONE, timeout=150)
        lab.wait_for(lambda: lab.state(node) == {"IDLE"}, timeout=60, what=f"{node} IDLE")
        assert list(heal.executed().values()) == [1]  # one reboot
        # SPEC P4: the audit record names the token's person and keeps the comment
        assert rem.id == rid and rem.approved_by == "alice"
        assert any(s.phase == "approved" and s.by == "alice"
                   and s.why == "approved by alice via api: GSP timeout, a reboot is fine"
                   for s in rem.steps)
        approvals = [s for s in rem.steps if s.phase == "approved"]
        assert len(approvals) == 1  # the retry made no second approval

        # what the CLI shows, the API shows
        hist = srv.get(f"/api/v1/nodes/{node}/history", tokens["victor"]).json()
        assert [(r["id"], r["phase"]) for r in hist["remediations"]] == [(rid, "done")]
        over = srv.get("/api/v1/overview", tokens["victor"]).json()
        assert over["slurm"]["reachable"] and over["counts"]["nodes"] == len(lab.nodes)
        assert over["controller"]["stale"] is False
        missing = srv.get("/api/v1/nodes/gpu999", tokens["victor"])
        assert missing.status_code == 404 and "gpu999" in missing.json()["detail"]
