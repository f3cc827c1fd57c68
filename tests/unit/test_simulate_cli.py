"""`slurm-heal simulate` as an operator runs it (issue 3, docs/simulate.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_heal.cli import cli
from slurm_heal.errors import ScenarioError
from slurm_heal.simulation import parse_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def sim(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["simulate", *args])
    return res.exit_code, res.stdout, res.stderr


def records(name: str) -> list[dict[str, object]]:
    code, out, err = sim(str(SCENARIOS / name), "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_json_output_is_one_record_per_decision_in_time_order() -> None:
    recs = records("e1_third_reboot_becomes_rebuild.json")
    assert all(list(r) == ["at", "node", "remediation", "action", "phase", "rule", "why"]
               for r in recs)
    assert [r["at"] for r in recs] == sorted(r["at"] for r in recs)


def test_output_shows_the_third_reboot_becoming_a_rebuild() -> None:
    """SPEC E1."""
    recs = records("e1_third_reboot_becomes_rebuild.json")
    done = [r["action"] for r in recs if r["phase"] == "done"]
    assert done[:3] == ["reboot", "reboot", "rebuild"]
    assert any(r["phase"] == "escalated" and r["rule"] == "E1" for r in recs)


def test_output_shows_a_migrate_downgraded_to_rebuild_without_evidence() -> None:
    """SPEC E3."""
    recs = records("e3_migrate_without_evidence_is_rebuild.json")
    assert any(r["phase"] == "escalated" and r["rule"] == "E3" and r["action"] == "rebuild"
               for r in recs)


def test_output_shows_the_breaker_stopping_automatic_actions() -> None:
    """SPEC S5."""
    recs = records("s5_breaker_stops_automatic.json")
    held = [r for r in recs if r["phase"] == "blocked" and r["rule"] == "S5"]
    assert held and held[0]["node"] == "gpu03"


def test_readable_timeline_without_json() -> None:
    code, out, _ = sim(str(SCENARIOS / "s4_one_per_pool.json"))
    assert code == 0
    assert "[S4]" in out and "gpu02" in out and not out.lstrip().startswith("{")


@pytest.mark.parametrize(("doc", "why"), [
    ("[]", "JSON object"),
    ("{not json", "not valid JSON"),
    ('{"start": "2026-01-05T00:00:00Z", "nodes": []}', "nodes"),
    ('{"start": "yesterday", "nodes": [{"name": "a"}]}', "start"),
    ('{"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}], '
     '"events": [{"at": "+1m", "type": "alert", "node": "b", "fault": "gpu.xid.48"}]}',
     "unknown node 'b'"),
    ('{"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}], '
     '"events": [{"at": "+1m", "type": "explode", "node": "a"}]}', "unknown type"),
    ('{"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}], '
     '"events": [{"at": "+1m", "type": "alert", "node": "a", "fault": "no.such"}]}',
     "unknown fault id"),
    ('{"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}], '
     '"config": {"waiting": {"max_wait": "48h"}}}', "waiting.max_wait"),
])
def test_a_malformed_scenario_exits_2_with_the_reason(tmp_path: Path, doc: str, why: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(doc)
    code, out, err = sim(str(f))
    assert code == 2 and why in err and out == ""


def test_absolute_times_work_as_well_as_offsets() -> None:
    sc = parse_scenario({"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}],
                         "events": [{"at": "2026-01-05T01:00:00Z", "type": "clear", "node": "a",
                                     "fault": "gpu.xid.48"}], "until": "+1d12h"})
    assert sc.events[0].at.hour == 1 and sc.until.day == 6 and sc.until.hour == 12
    with pytest.raises(ScenarioError, match="until is before start"):
        parse_scenario({"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "a"}],
                        "until": "2026-01-01T00:00:00Z"})


BASE: dict[str, Any] = {"start": "2026-01-05T00:00:00Z",
                        "nodes": [{"name": "gpu01"}, {"name": "gpu02"}]}


@pytest.mark.parametrize(("patch", "where"), [
    ({"events": [{"at": "+1m", "type": "job", "node": "gpu01", "id": "abc", "ends": "+1h"}]},
     "events[0].id"),
    ({"events": [{"at": "+99999999999d", "type": "clear", "node": "gpu01",
                  "fault": "gpu.xid.48"}]}, "events[0].at"),
    ({"events": [{"at": "+999999999d", "type": "clear", "node": "gpu01",
                  "fault": "gpu.xid.48"}]}, "events[0].at"),
    ({"expect": 5}, "expect"),
    ({"expect_not": [5]}, "expect_not"),
    ({"sim": {"action_duration": ["reboot", "5m"]}}, "sim.action_duration"),
    ({"sim": {"action_duration": {"reboot": "99999999999d"}}}, "sim"),
    ({"events": [{"at": "+1m", "type": "approve", "node": "gpu01", "remediation": 5}]},
     "events[0].remediation"),
    ({"events": [{"at": "+1m", "type": "approve", "node": "gpu01", "by": ["alice"]}]},
     "events[0].by"),
    ({"config": {"safety": {"cooldown": "99999999999d"}}}, "safety.cooldown"),
])
def test_malformed_scenario_values_are_a_clear_error(patch: dict[str, Any], where: str) -> None:
    """A scenario is operator input: every bad value is a ScenarioError naming where it is
    (exit 2 from the CLI), never a traceback."""
    with pytest.raises(ScenarioError, match=re.escape(where)):
        parse_scenario({**BASE, **patch})
