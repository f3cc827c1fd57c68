"""Injected faults in the simulation (issue 8 "the suites that would have found them").

The simulated world used to carry out every effect perfectly. Here effects fail, time
out, are carried out with their answer lost, never report, or the simulated daemon dies
between recording an effect and running it (docs/simulate.md "Injected faults"). Two
parts:

- the scenarios in ``tests/scenarios/faults/``, one per fault shape, each with the
  records it must produce; a scenario that shows one of issue 8's defects is marked
  xfail (strict) below until that defect is fixed;
- a property test: random event streams with random injected faults and foreign reasons
  that look like ours ("Reboot ...", "heal ...", "NHC: ...") keep every invariant of
  tests/property (S3, S4, S5, S6, P1, E3, Q2, L3) and never cordon, resume or act on a
  node someone else drained (D5, house style 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slurm_heal.cli import cli
from slurm_heal.errors import ScenarioError
from slurm_heal.models import Phase
from slurm_heal.simulation import (
    FAULT_MODES,
    Cycle,
    Simulation,
    check_expectations,
    load_scenario,
    parse_scenario,
    record_json,
)
from slurm_heal.types import NodeInfo
from tests.property import test_policy_invariants as inv
from tests.reliability.harness import scaled

pytestmark = [pytest.mark.reliability]

FAULTS_DIR = Path(__file__).parent.parent / "scenarios" / "faults"
SCENARIOS = sorted(FAULTS_DIR.glob("*.json"))

# Scenarios that show a defect listed in issue 8; the mark goes when the fix lands (a
# strict xfail that passes fails the run, so nobody forgets).
KNOWN_DEFECTS: dict[str, str] = {}


def _cases() -> list[Any]:
    out = []
    for p in SCENARIOS:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[p.stem])] \
            if p.stem in KNOWN_DEFECTS else []
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _cases())
def test_fault_scenario_produces_its_expected_records(path: Path) -> None:
    """Each fault scenario: its records, S6 (no key twice, one provider operation per
    remediation), and the fault it names really fired."""
    scenario = load_scenario(path)
    sim = Simulation(scenario)
    result = sim.run()
    records = [record_json(d) for d in result.records]
    assert not result.violations  # SPEC S6
    ops_per_rem: dict[str, int] = {}
    for key in sim.ops:
        rid = key.split(":", 1)[0]
        ops_per_rem[rid] = ops_per_rem.get(rid, 0) + 1
    assert all(n == 1 for n in ops_per_rem.values()), ops_per_rem  # one action each
    if any(e.type == "fault" for e in scenario.events):
        assert result.faults_fired, "the injected fault never fired: the scenario tests nothing"
    problems = check_expectations(scenario, records)
    timeline = "\n".join(f"{r['at']} {r['node']} {r['action']} {r['phase']} [{r['rule']}] "
                         f"{r['why'][:90]}" for r in records)
    assert not problems, "\n".join(problems) + "\n--- timeline ---\n" + timeline


def test_simulate_command_runs_a_fault_scenario() -> None:
    """`slurm-heal simulate --json` on a fault scenario: exit 0, the records in order."""
    res = CliRunner().invoke(cli, ["simulate", "--json", str(
        FAULTS_DIR / "s6_act_answer_lost_is_asked_not_repeated.json")])
    assert res.exit_code == 0, res.output
    phases = [json.loads(line)["phase"] for line in res.output.splitlines()
              if line.startswith("{") and '"gpu01"' in line]
    assert phases.index("acting") < phases.index("returning") < phases.index("done")


def test_every_fault_mode_has_a_scenario() -> None:
    text = " ".join(p.read_text() for p in SCENARIOS)
    for mode in FAULT_MODES:
        assert f'"mode": "{mode}"' in text, mode


@pytest.mark.parametrize("event, problem", [
    ({"type": "fault", "node": "gpu01", "mode": "explode"}, "events[0].mode"),
    ({"type": "fault", "node": "gpu01", "effect": "reboot", "mode": "fail"}, "events[0].effect"),
    ({"type": "fault", "node": "gpu01", "effect": "cordon", "mode": "never_reports"},
     "needs \"effect\": \"act\""),
    ({"type": "fault", "node": "gpu01", "mode": "fail", "count": 0}, "events[0].count"),
    ({"type": "fault", "node": "gpu01", "mode": "fail", "count": True}, "events[0].count"),
    ({"type": "fault", "node": "gpu01", "mode": "fail", "times": 2}, "unknown key(s) times"),
    ({"type": "fault", "node": "gpu09", "mode": "fail"}, "unknown node"),
])
def test_a_malformed_fault_event_is_an_error_naming_the_key(event: dict[str, Any],
                                                            problem: str) -> None:
    doc = {"start": "2026-01-05T00:00:00Z", "nodes": [{"name": "gpu01", "pool": "a"}],
           "events": [dict(event, at="+0s")]}
    with pytest.raises(ScenarioError, match=None) as err:
        parse_scenario(doc)
    assert problem in str(err.value)


# ------------------------------------------------------------------ property test

# Reasons a person (or another tool) writes that look like ours or like Slurm's own.
LOOKALIKE_REASONS = ["Reboot pending: BIOS update (bob)", "reboot requested by bob",
                     "heal later -- bob", "healthcheck failed (NHC)",
                     "NHC: check_fs_mount: /scratch not mounted", "Not responding",
                     "bad DIMM, do not use -- bob"]
fault_event = st.fixed_dictionaries({
    "type": st.just("fault"), "node": st.sampled_from(inv.NODES),
    "effect": st.sampled_from(["cordon", "act", "poll", "resume", "release", "requeue_jobs",
                               "cancel_jobs", "any"]),
    "mode": st.sampled_from(["fail", "timeout", "lost", "crash"]),
    "count": st.integers(1, 3)})
event = st.one_of(
    inv.event, inv.event, fault_event,
    st.fixed_dictionaries({"type": st.just("drain"), "node": st.sampled_from(inv.NODES),
                           "reason": st.sampled_from(LOOKALIKE_REASONS)}))
timed = st.tuples(st.integers(0, 240), event)


def foreign(n: NodeInfo) -> bool:
    """Someone else's drain. The simulated Slurm never writes a reboot reason of its own,
    so any reason not starting with our prefixes is someone else's."""
    r = n.reason.strip()
    return bool(("DRAIN" in n.states or "DOWN" in n.states) and r
                and not r.startswith(("heal:", "heal-request:")))


class Checker(inv.Checker):
    """tests/property's invariants, plus: nothing disruptive on a foreign node (D5)."""

    def __call__(self, c: Cycle) -> None:
        super().__call__(c)
        by_name = {n.name: n for n in c.view.nodes}
        for e in c.plan.effects:
            if e.kind in ("cordon", "resume", "release", "act", "requeue_jobs", "cancel_jobs",
                          "signal_jobs") and foreign(by_name[e.node]):
                rem = next((r for r in c.state.remediations if r.id == e.remediation), None)
                if e.kind == "act" and rem is not None and rem.phase is Phase.ACTING:
                    continue  # a re-send of an act already under way, not a new one
                self.problems.append(f"{c.at.isoformat()}: D5 {e.kind} of {e.node} drained "
                                     f"by someone else ({by_name[e.node].reason!r})")


AUTO = {"approvals": {"default": "auto"},
        "safety": {"breaker_threshold": 4, "concurrency": 2, "one_per_pool": True},
        "waiting": {"max_wait": "2h"}}


@settings(max_examples=scaled(60, 2000), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(timed, min_size=1, max_size=14), config=inv.policies)
@example(events=[(0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (0, {"type": "fault", "node": "gpu01", "effect": "act", "mode": "lost",
                      "count": 1})], config=AUTO)
@example(events=[(0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (0, {"type": "job", "node": "gpu01", "id": 7, "ends": 60}),
                 (20, {"type": "drain", "node": "gpu01", "reason": "NHC: check_fs_mount: "
                       "/scratch not mounted"})], config=AUTO)
@example(events=[(0, {"type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}),
                 (6, {"type": "drain", "node": "gpu01",
                      "reason": "Reboot pending: BIOS update (bob)"})], config=AUTO)
def test_invariants_hold_under_injected_faults_and_lookalike_reasons(
        events: list[tuple[int, dict[str, Any]]], config: dict[str, Any]) -> None:
    sc = parse_scenario(inv.scenario(events, config))
    check = Checker(sc)
    result = Simulation(sc, on_cycle=check).run()
    assert not result.violations, result.violations  # S6: no key handed out twice
    assert not check.problems, check.problems[:5]
