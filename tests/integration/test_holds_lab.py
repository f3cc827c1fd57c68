"""SPEC O6 on the real Slurm lab (issue 32 item 6): a held remediation's `status` names
what holds it, until when and what lifts it, under `slurm-heal daemon` as a process, read
back by `slurm-heal status` (text and --json) and `explain` as an operator runs them.

An Xid 119 (auto-approved by the lab's policy) on gpu01 while a person has paused
slurm-heal: approved and held by the pause (never "approved for 10s"); unpaused, it runs
to done and the hold is gone; the same fault again at once is held by the cooldown (S2),
which says until when.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from slurm_heal.models import Phase, mark
from tests.integration.test_daemon_lab import Heal, heal  # noqa: F401  (the fixture)
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

XID119 = ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, Timeout after 6s of waiting for "
          "RPC response from GPU0 GSP!")


def _cli(lab: Lab, h: Heal, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "slurm_heal.cli", *args, "--config",
                           str(h.config)], env=lab.env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _json(lab: Lab, h: Heal, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(_cli(lab, h, *args, "--json").stdout)
    return out


def test_a_held_remediations_status_names_its_hold_on_a_real_lab(
        lab: Lab, heal: Heal) -> None:  # noqa: F811
    node = "gpu01"
    heal.start_daemon()
    heal.wait(lambda: heal.state_dir.joinpath("heartbeat").exists(), what="the first cycle")
    _cli(lab, heal, "pause", "--reason", "firmware rollout", "--by", "alice")
    heal.wait(lambda: heal.store.load().paused, what="the controller takes the pause")
    heal.kernel_says(node, XID119)
    heal.check(node)
    heal.wait(lambda: any(r.data.blocked == mark("pause") for r in heal.rems(node)),
              what="gpu01 held by the pause")
    text = _cli(lab, heal, "status").stdout
    assert f"{node} reboot (gpu.xid.119) approved, HELD by pause" in text, text
    assert "(`slurm-heal unpause`)" in text, text
    [flying] = [f for f in _json(lab, heal, "status")["in_flight"] if f["node"] == node]
    assert flying["held"]["rule"] == "pause" and flying["held"]["command"] == \
        "slurm-heal unpause", flying
    explained = _cli(lab, heal, "explain", node).stdout
    assert "HELD by pause: slurm-heal is paused" in explained, explained
    assert heal.executed() == {}

    _cli(lab, heal, "unpause", "--by", "alice")
    heal.wait_phase(node, Phase.DONE, timeout=120)
    assert "HELD by" not in _cli(lab, heal, "status").stdout

    heal.kernel_says(node, XID119)  # the same fault again, at once: the cooldown holds it
    heal.check(node)
    heal.wait(lambda: any(r.data.blocked == mark("S2") for r in heal.rems(node)),
              what="gpu01 held by the cooldown", timeout=90)
    text = _cli(lab, heal, "status").stdout
    assert f"{node} reboot (gpu.xid.119) approved, HELD by S2 until " in text, text
    assert "lifts: by itself at" in text and "safety.cooldown = 30m" in text, text
    assert list(heal.executed().values()) == [1]
