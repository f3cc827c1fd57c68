"""Every scenario in tests/scenarios/ runs through the real engine (docs/simulate.md).

Each scenario file cites the SPEC rule it shows and lists the records it must produce
(`expect`, in order) and must not (`expect_not`). The simulation also checks SPEC S6 on
every run: no idempotency key is ever handed out twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_heal.simulation import check_expectations, load_scenario, record_json, simulate

SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.json"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_produces_its_expected_records(path: Path) -> None:
    scenario = load_scenario(path)
    result = simulate(scenario)
    records = [record_json(d) for d in result.records]
    assert not result.violations  # SPEC S6
    problems = check_expectations(scenario, records)
    timeline = "\n".join(f"{r['at']} {r['node']} {r['action']} {r['phase']} [{r['rule']}] "
                         f"{r['why'][:90]}" for r in records)
    assert not problems, "\n".join(problems) + "\n--- timeline ---\n" + timeline


def test_there_is_a_scenario_for_every_engine_rule() -> None:
    text = " ".join(p.read_text() for p in SCENARIOS)
    for rule in ["P1", "P2", "P3", "Q2", "Q3", "Q4", "L4", "L5", "E1", "E2", "E3", "E4", "E5", "E6",
                 "S1", "S2", "S3", "S4", "S5", "S7", "D5", "D8"]:
        assert f"SPEC {rule}" in text or f"/{rule}" in text, rule
