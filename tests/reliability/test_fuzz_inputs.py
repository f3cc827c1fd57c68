"""Bad input never crashes slurm-heal: the fuzz suite (issue "trust under faults";
SPEC I2, D1, Q1, P2, ARCHITECTURE house style 10).

Every parser that reads data from outside is fed hypothesis-generated input and may
only answer with our own clear errors (ReasonError, ConfigError, ScenarioError) or a
result, never an uncaught exception: the reason-string and request parser, the Extra
reader, a whole `decide()` cycle fed with fuzzed Extra, the kernel-log parser, the
policy and scenario loaders. Next to the fuzzing, each defect the attack found has a
named scenario test.

Two hypothesis profiles: ``ci`` (the default; modest example counts, the file runs in
well under a minute on two cores) and ``long`` (``SLURM_HEAL_FUZZ=long``: at least
10,000 examples per parser). See tests/reliability/README.md.
"""

from __future__ import annotations

import json
import os
import string
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_heal import extra, reasons
from slurm_heal.checks import config as check_config
from slurm_heal.checks import kernlog, runner
from slurm_heal.cli import cli
from slurm_heal.config import load_policy, node_names, policy_from_dict
from slurm_heal.errors import ConfigError, ReasonError, ScenarioError
from slurm_heal.models import Attempt, Phase, Remediation, State
from slurm_heal.simulation import parse_scenario
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action, ClusterView, NodeInfo, Severity
from tests.policycore import decide

# ------------------------------------------------------------------ hypothesis profiles
settings.register_profile("slurm-heal-fuzz-ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.register_profile("slurm-heal-fuzz-long", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
LONG = os.environ.get("SLURM_HEAL_FUZZ", "ci") == "long"
FUZZ = settings.get_profile("slurm-heal-fuzz-long" if LONG else "slurm-heal-fuzz-ci")
# A whole decide() cycle costs more than one parse: fewer examples in CI.
FUZZ_CYCLE = FUZZ if LONG else settings(FUZZ, max_examples=100)

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
AUTO = policy_from_dict({"approvals": {"default": "auto"}})

# ------------------------------------------------------------------ strategies
_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text(max_size=30))
json_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                           max_leaves=20)
_times = st.sampled_from([
    "2026-01-05T00:00:00+00:00", "2026-01-04T23:00:00Z", "2026-01-05T00:00:00",
    "9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+14:00", "not a time", "",
    "2026-13-01T00:00:00+00:00", "1969-12-31T23:59:59-12:00",
]) | st.text(max_size=30)


# A value of the wrong type, small: what a typo or another tool writes.
_wrong = st.one_of(st.integers(), st.booleans(), st.floats(), st.text(max_size=5),
                   st.lists(st.integers(), max_size=2), st.dictionaries(
                       st.text(max_size=3), st.integers(), max_size=2), st.none())


def _field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that is right half the time, else of a wrong type or anything at all."""
    return st.one_of(good, good, _wrong, json_values)


def _mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A container that is usually right (so the fields inside it get fuzzed too)."""
    return st.one_of(good, good, good, good, _wrong, json_values)


_evidence = st.fixed_dictionaries({"text": _field(st.text(max_size=40))}, optional={
    "source": _field(st.text(max_size=10)),
    "at": _field(_times), "data": _field(st.dictionaries(st.text(max_size=5), _scalars,
                                                         max_size=3))})
_alert = st.fixed_dictionaries({"fault": _field(st.sampled_from(
    ["gpu.xid.79", "gpu.xid.48", "fs.readonly", "disk.low_space", "site.own", ""]))},
    optional={
        "severity": _field(st.sampled_from(["info", "warning", "critical", "fatal"])),
        "summary": _field(st.text(max_size=20)), "detector": _field(st.text(max_size=10)),
        "first_seen": _field(_times), "last_seen": _field(_times),
        "evidence": _mostly(st.lists(_mostly(_evidence), max_size=3))})
_ours = st.fixed_dictionaries({"alerts": _mostly(st.lists(_mostly(_alert), max_size=3))},
                              optional={"v": _field(st.just(1)), "checked_at": _field(_times),
                                        "host": _field(st.text(max_size=8))})
_structured = st.fixed_dictionaries({extra.KEY: _mostly(_ours)}, optional={
    extra.HOST_KEY: _field(st.fixed_dictionaries({}, optional={
        "host": _field(st.text(max_size=8))})),
    "site": json_values})
extras = st.one_of(_structured, _structured, _structured, _structured, st.none(),
                   st.dictionaries(st.text(max_size=12), json_values, max_size=3))


def _node(name: str, ex: Any, reason: str = "", states: tuple[str, ...] = ("IDLE",)
          ) -> NodeInfo:
    return NodeInfo(name=name, states=frozenset(states), reason=reason, partitions=("a",),
                    extra=ex)


def _good_extra(fault: str = "gpu.xid.48", since: datetime = T0) -> dict[str, Any]:
    return {extra.KEY: extra.our_section([], since) | {"alerts": [{
        "fault": fault, "severity": "critical", "summary": "", "detector": "kernel_log",
        "first_seen": since.isoformat(), "last_seen": since.isoformat(), "evidence": []}]}}


# ================================================================== Extra (defect 3)
BAD_EXTRA = [
    ({"alerts": 7}, "slurm_heal.alerts"),
    ({"alerts": [{"fault": "gpu.xid.48", "evidence": 5}]}, "slurm_heal.alerts[0].evidence"),
    ({"alerts": [{"fault": "gpu.xid.48", "evidence": [{"data": "x"}]}]},
     "slurm_heal.alerts[0].evidence[0].data"),
    ({"checked_at": "2026-01-05T00:00:00"}, "slurm_heal.checked_at"),
    ({"alerts": [{"fault": "gpu.xid.48", "first_seen": "9999-12-31T23:59:59+00:00"}]},
     "slurm_heal.alerts[0].first_seen"),
    ({"alerts": [{"fault": 79}]}, "slurm_heal.alerts[0].fault"),
    ({"alerts": [{"fault": "gpu.xid.48", "severity": ["critical"]}]},
     "slurm_heal.alerts[0].severity"),
    ({"checked_at": 1767225600}, "slurm_heal.checked_at"),
]


@pytest.mark.parametrize(("ours", "field"), BAD_EXTRA, ids=[f for _, f in BAD_EXTRA])
def test_a_wrong_type_in_extra_names_the_field_and_yields_no_alerts(ours: dict[str, Any],
                                                                    field: str) -> None:
    """SPEC I2: the Extra reader validates every field of our key; it never raises."""
    data = extra.read_check_data("gpu01", {extra.KEY: ours}, T0)
    assert data.problem is not None and data.problem.startswith(field + ":")
    assert data.alerts == () and data.checked_at is None


@pytest.mark.parametrize(("ours", "field"), BAD_EXTRA, ids=[f for _, f in BAD_EXTRA])
def test_one_nodes_bad_extra_is_an_alert_and_every_other_node_is_decided(
        ours: dict[str, Any], field: str) -> None:
    """SPEC I2, D7: `decide()` on a cluster where one node's Extra has a wrong type does
    not raise; that node gets a record-only alert naming the field, the healthy node with
    a real alert is remediated as usual. (Before: TypeError/AttributeError out of
    decide(), the daemon died and systemd restarted it into the same crash.)"""
    view = ClusterView(nodes=(_node("gpu01", {extra.KEY: ours}),
                              _node("gpu02", _good_extra())))
    plan = decide(view, State(), T0, AUTO)
    bad = [r for r in plan.records if r.node == "gpu01"]
    assert [(r.phase, r.rule) for r in bad] == [("alert", "I2")]
    assert extra.UNREADABLE in bad[0].why and field in bad[0].why
    assert not any(e.node == "gpu01" for e in plan.effects)
    assert [(e.kind, e.node) for e in plan.effects] == [("cordon", "gpu02")]


def test_unreadable_extra_is_no_news_not_a_cleared_alert() -> None:
    """SPEC L4, I2: a proposed remediation is not withdrawn because someone wrote junk
    into the node's Extra: the alert did not clear, its data cannot be read."""
    rem = Remediation(id="r-1", node="gpu01", fault="gpu.xid.48", action=Action.REBOOT,
                      phase=Phase.PROPOSED, severity=Severity.CRITICAL, created=T0,
                      updated=T0, data={"evidence_fault": "gpu.xid.48",
                                        "approval_pending": "P2:default"})
    junk = _node("gpu01", {extra.KEY: {"alerts": 7}})
    plan = decide(ClusterView(nodes=(junk,)), State(remediations=(rem,)),
                  T0 + timedelta(minutes=1), policy_from_dict({}))
    assert not any(r.phase == "withdrawn" for r in plan.records)


def test_the_unreadable_alert_is_recorded_once_while_it_lasts() -> None:
    """The record-only alert is not repeated every cycle (state.data keeps what was noted)."""
    view = ClusterView(nodes=(_node("gpu01", {extra.KEY: {"alerts": 7}}),))
    plan = decide(view, State(), T0, AUTO)
    state = State(data=plan.data or {})
    again = decide(view, state, T0 + timedelta(minutes=1), AUTO)
    assert [r.rule for r in plan.records] == ["I2"] and again.records == ()


def test_extra_deeply_nested_is_not_json_for_us() -> None:
    """A 100,000-deep Extra is not a crash (RecursionError) but foreign text."""
    assert extra.parse_extra("[" * 100_000 + "]" * 100_000) is None
    assert extra.parse_extra('{"slurm_heal": ' + "[" * 100 + "]" * 100 + "}") is None


@FUZZ
@given(extras)
def test_fuzz_the_extra_reader_never_raises(ex: Any) -> None:
    data = extra.read_check_data("gpu01", ex, T0)
    assert isinstance(data, extra.CheckData)
    if data.problem is not None:
        assert data.alerts == () and data.checked_at is None
    for a in data.alerts:
        assert a.first_seen.tzinfo is not None and a.first_seen - T0 <= extra.MAX_AHEAD


@FUZZ
@given(st.text(max_size=200))
def test_fuzz_raw_extra_text_never_raises(raw: str) -> None:
    parsed = extra.parse_extra(raw)
    assert parsed is None or isinstance(parsed, dict)
    extra.read_check_data("gpu01", parsed, T0)


@FUZZ_CYCLE
@given(st.lists(extras, min_size=2, max_size=4),
       st.sampled_from([(), ("IDLE", "DRAIN"), ("DOWN",), ("ALLOCATED",)]),
       st.integers(min_value=0, max_value=3 * 86400))
def test_fuzz_a_whole_decide_cycle_with_fuzzed_extra(exs: list[Any], states: tuple[str, ...],
                                                     offset: int) -> None:
    """SPEC I2: a decide() cycle over nodes whose Extra is anything, twice (the second
    on the state the first produced), never raises; the healthy node is still decided."""
    nodes = [_node(f"gpu{i:02d}", ex, states=states or ("IDLE",)) for i, ex in enumerate(exs)]
    nodes.append(_node("good01", _good_extra()))
    view = ClusterView(nodes=tuple(nodes))
    now = T0 + timedelta(seconds=offset)
    # gpu00 is coming back from a reboot: its checked_at decides the L5 health check.
    acted = T0 - timedelta(minutes=10)
    back = Remediation(id="r-back", node="gpu00", fault="gpu.xid.48", action=Action.REBOOT,
                       phase=Phase.RETURNING, created=acted, updated=acted,
                       attempts=(Attempt(key="r-back:act:0", effect="act",
                                         action=Action.REBOOT, started=acted, outcome="ok",
                                         finished=acted),),
                       data={"evidence_fault": "gpu.xid.48", "act_done": acted.isoformat()})
    plan = decide(view, State(remediations=(back,)), now, AUTO)
    assert any(e.kind == "cordon" and e.node == "good01" for e in plan.effects) or \
        any(r.node == "good01" and r.phase == "blocked" for r in plan.records)
    state = State(remediations=(back, *plan.updates), data=plan.data or {})
    decide(view, state, now + timedelta(minutes=5), AUTO)


# ================================================================== reasons (Q1)
_reason_words = st.sampled_from(["heal-request:", "heal:", "reboot", "rebuild", "migrate",
                                 "remove", "none", "power_cycle", "detector=ib", "id=7",
                                 "id=", "rem=r-1", "by=controller", "x=y", "gpu.xid.79",
                                 "Reboot", "NHC:", "=", "id=a b"]) | st.text(max_size=12)


@FUZZ
@given(st.lists(_reason_words, max_size=8).map(" ".join) | st.text(max_size=120))
def test_fuzz_reason_and_request_parser_only_raises_reason_error(reason: str) -> None:
    """SPEC Q1: a reason string is a request, our marker, or foreign; a malformed one is a
    ReasonError naming what is wrong, never another exception."""
    for check in (reasons.is_ours, reasons.is_request, reasons.is_slurm_reboot):
        assert isinstance(check(reason), bool)
    for parse in (reasons.parse_request, reasons.parse_marker):
        try:
            parse(reason)
        except ReasonError as exc:
            assert str(exc)


# ================================================================== kernel log (D1, defect 12)
XID79 = "2,901,130223456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, " \
        "GPU has fallen off the bus.\n"
BAD_RECORDS = {
    "20-digit timestamp": "2,900,99999999999999999999,-;NVRM: Xid (PCI:0000:3b:00): 48, "
                          "pid=1, name=x, DBE\n",
    "5000-digit sequence": "2," + "9" * 5000 + ",130,-;NVRM: Xid (PCI:0000:3b:00): 48, x\n",
    "5000-digit Xid code": "2,900,130,-;NVRM: Xid (PCI:0000:3b:00): " + "7" * 5000 + ", x\n",
    "5000-digit pid": "2,900,130,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=" + "1" * 5000
                      + ", name=x, y\n",
    "huge hung-task pid": "6,900,130,-;INFO: task python:" + "9" * 4400
                          + " blocked for more than 120 seconds.\n",
}


@pytest.mark.parametrize("bad", sorted(BAD_RECORDS))
def test_a_record_that_cannot_be_parsed_is_skipped_and_counted(bad: str) -> None:
    """SPEC D1: an unparsable record is skipped and counted; the Xid 79 after it is found.
    (Before: OverflowError / ValueError out of the scan.)"""
    res = kernlog.scan((BAD_RECORDS[bad] + XID79).encode())
    assert res.skipped == 1 and bad and res.skipped_sample
    assert [e.fault for e in res.events] == ["gpu.xid.79"]


class _Root:
    def __init__(self, root: Path) -> None:
        (root / "dev").mkdir(parents=True)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
        (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
        (root / "proc/uptime").write_text("1000.0 1000.0\n")
        self.kmsg = root / "dev/kmsg"
        self.kmsg.write_text("6,1,100,-;IPv6: link becomes ready\n")

    def append(self, text: str) -> None:
        with self.kmsg.open("a") as fh:
            fh.write(text)


@pytest.mark.parametrize("bad", sorted(BAD_RECORDS))
def test_one_bad_kernel_record_never_blinds_the_check(bad: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D1, O1: the node check survives a record it cannot parse: the kernel-log
    detector reports ok, its cursor moves past the record, and a real Xid 79 appended on
    a later run is reported. (Before: the detector failed on every later run.)"""
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    root = _Root(tmp_path / "root")
    slurm = MemorySlurm([("gpu01", "gpu")], clock=lambda: T0)
    cfg = check_config.CheckConfig()

    def run() -> runner.CheckResult:
        return runner.run_check(cfg, node_name="gpu01", client=slurm, now=T0)

    root.append(BAD_RECORDS[bad])
    first = run()
    status = {s.name: s.status for s in first.statuses}
    assert status["kernel_log"] == "ok", first.statuses
    root.append(XID79)
    second = run()
    assert {s.name: s.status for s in second.statuses}["kernel_log"] == "ok"
    assert [a.fault for a in second.alerts] == ["gpu.xid.79"]
    assert slurm.node("gpu01").drained


_kmsg_lines = st.one_of(
    st.builds(lambda p, s, u, m: f"{p},{s},{u},-;{m}", st.integers(0, 7),
              st.integers(0, 10**25), st.integers(0, 10**25),
              st.sampled_from(["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, off the bus",
                               "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action "
                               "changed from 0x0 (None) to 0x1 (GPU Reset Required)",
                               "INFO: task a:1 blocked for more than 9 seconds.",
                               "watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [x:1]",
                               "rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
                               "XFS (sda1): Shutting down filesystem",
                               "NVRM: GPU at PCI:0000:3b:00: GPU-1234",
                               "0000:3b:00.0: GPU has fallen off the bus."])),
    st.builds(lambda n, m: f"[{n}.000001] {m}", st.integers(0, 10**25),
              st.sampled_from(["NVRM: Xid (PCI:0000:3b:00): 79, x", "soft lockup - CPU#1 "
                               "stuck for 1s!"])),
    st.text(alphabet=string.printable, max_size=80).map(
        lambda t: "NVRM: Xid (PCI:0000:3b:00): " + t),
    st.text(max_size=80),
)


@FUZZ
@given(st.lists(_kmsg_lines, max_size=8))
def test_fuzz_the_kernel_log_parser_never_raises(lines: list[str]) -> None:
    """SPEC D1: any bytes in, events and a skipped count out; latching the events (the
    wall-time arithmetic) never raises either."""
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    res = kernlog.scan(data, now=T0)
    assert res.skipped + res.lines <= len(lines) + data.count(b"\n")
    kernlog.latch({}, res.events, kernlog.GpuMap(), T0, T0 - timedelta(days=1),
                  severity_of=lambda f: Severity.WARNING, explanation_of=lambda f: f,
                  recovery_of=lambda t: None)


# ================================================================== policy (defect 14)
def test_policy_check_on_deeply_nested_arrays_is_a_config_error(tmp_path: Path) -> None:
    """A 500-level nested array is a clear error with exit 2, not a RecursionError."""
    path = tmp_path / "policy.toml"
    path.write_text("x = " + "[" * 500 + "]" * 500 + "\n")
    res = CliRunner().invoke(cli, ["policy", "check", str(path)])
    assert res.exit_code == 2 and "nested" in res.stderr and "Traceback" not in res.output
    path.write_text("[provider]\nx = " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match="nested"):
        load_policy(path)


def test_a_huge_host_list_is_refused_without_expanding_it(tmp_path: Path) -> None:
    """SPEC P2: `nodes = "gpu[1-99999999]"` is a clear error naming the key, at once
    (before: 6.2 GB and over a minute, expanded again on every match)."""
    path = tmp_path / "policy.toml"
    path.write_text('[[approvals.rules]]\nnodes = "gpu[1-99999999]"\nmode = "auto"\n')
    res = CliRunner().invoke(cli, ["policy", "check", str(path)])
    assert res.exit_code == 2
    assert "approvals.rules[0].nodes" in res.stderr and "99,999,999 nodes" in res.stderr
    with pytest.raises(ValueError, match="more than"):
        node_names("a[1-1000],b[1-1000]x[1-1000]")


def test_a_host_list_is_expanded_once() -> None:
    """Matching a rule does not expand its host list again (cached, bounded)."""
    node_names.cache_clear()
    for _ in range(3):
        assert "gpu07" in node_names("gpu[01-16]")
    assert node_names.cache_info().misses == 1


_policy_keys = st.sampled_from(["approvals", "waiting", "safety", "escalation", "pools",
                                "mode", "persistence", "default", "rules", "max_wait",
                                "ladder", "nodes", "fault", "bogus"])
policies = st.recursive(
    _scalars | st.sampled_from(["30m", "25h", "gpu[1-99999999]", "gpu[01-04]", "auto",
                                "reboot", "never", "manual"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_policy_keys, inner,
                                                                max_size=4),
    max_leaves=12)


@FUZZ
@given(st.dictionaries(_policy_keys, policies, max_size=4))
def test_fuzz_the_policy_loader_only_raises_config_error(doc: dict[str, Any]) -> None:
    try:
        policy_from_dict(doc)
    except ConfigError as exc:
        assert str(exc)


@FUZZ
@given(st.text(max_size=200) | st.sampled_from(["x = " + "[" * 600 + "]" * 600,
                                                '[[approvals.rules]]\nnodes = "a[1-9999999]"\n'
                                                'mode = "auto"\n', "[approvals]\ndefault = 5\n"]))
def test_fuzz_policy_toml_text_only_raises_config_error(text: str) -> None:
    """`load_policy` on any text: a Policy or a ConfigError naming the file."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_policy(path)
        except ConfigError as exc:
            assert str(path) in str(exc)


# ================================================================== scenarios (defect 14)
BASE: dict[str, Any] = {
    "start": "2026-01-05T00:00:00Z", "config": {"approvals": {"default": "auto"}},
    "nodes": [{"name": "gpu01", "pool": "a"}, {"name": "gpu02", "pool": "a"}],
    "events": [{"at": "+1m", "type": "alert", "node": "gpu01", "fault": "gpu.xid.48"}],
    "until": "+1h",
}


def _with_event(**event: Any) -> dict[str, Any]:
    return {**BASE, "events": [*BASE["events"], {"at": "+2m", "node": "gpu01", **event}]}


BAD_SCENARIOS: dict[str, tuple[Any, str]] = {
    "deep JSON": (None, "nested too deeply"),
    "action bogus on approve": (_with_event(type="approve", action="bogus"),
                                "events[1].action"),
    "evidence data a list": (_with_event(type="alert", fault="gpu.xid.48",
                                         evidence=[{"source": "x", "data": [1]}]),
                             "events[1].evidence[0].data"),
    "node a list": (_with_event(type="alert", fault="gpu.xid.48", node=["gpu01"]),
                    "events[1]: unknown node"),
    "job id superscript two": (_with_event(type="job", id="²", ends="+1h"), "events[1].id"),
    "9999999d": (_with_event(type="job", id=1, ends="+9999999d"), "too far away"),
    "9999999d action duration": ({**BASE, "sim": {"action_duration": {"reboot": "9999999d"}}},
                                 "sim"),
    "evidence true": (_with_event(type="alert", fault="gpu.xid.48", evidence=True),
                      "events[1].evidence"),
    "events 5": ({**BASE, "events": 5}, "events must be a list"),
    "start in year 9999": ({**BASE, "start": "9999-12-31T23:00:00Z"}, "9000"),
}


@pytest.mark.parametrize("shape", sorted(BAD_SCENARIOS))
def test_simulate_on_a_bad_scenario_is_a_clear_error_not_a_traceback(shape: str,
                                                                      tmp_path: Path) -> None:
    """`slurm-heal simulate` on each shape the attack found exits 2 with a
    ScenarioError naming the key (before: exit 1 with a traceback)."""
    doc, words = BAD_SCENARIOS[shape]
    path = tmp_path / "scenario.json"
    path.write_text("[" * 100_000 + "]" * 100_000 if doc is None else json.dumps(doc))
    res = CliRunner().invoke(cli, ["simulate", str(path)])
    assert res.exit_code == 2, res.output
    assert words in res.stderr and "Traceback" not in res.output


def test_many_nodes_are_read_in_linear_time() -> None:
    """The duplicate-name check is a set lookup: 20,000 nodes parse at once (a list scan
    made this quadratic), and a duplicate is still named."""
    nodes = [{"name": f"n{i}", "pool": "a"} for i in range(20_000)]
    sc = parse_scenario({**BASE, "nodes": nodes, "events": []})
    assert len(sc.nodes) == 20_000
    with pytest.raises(ScenarioError, match="n7' appears twice"):
        parse_scenario({**BASE, "nodes": [*nodes, {"name": "n7"}], "events": []})


_event_types = st.sampled_from(["alert", "clear", "job", "approve", "deny", "cancel",
                                "request", "action_fails", "reset_breaker", "pause",
                                "unpause", "drain", "resume", "bogus"])
_events = st.fixed_dictionaries(
    {"type": _field(_event_types), "at": _field(st.sampled_from(["+1m", "+5m", "+30m",
                                                                "+9999999d", "-1m"]))},
    optional={"node": _field(st.sampled_from(["gpu01", "gpu02", "nope"])),
              "fault": _field(st.sampled_from(["gpu.xid.48", "gpu.xid.79", "x"])),
              "action": _field(st.sampled_from(["reboot", "rebuild", "bogus", "remove"])),
              "id": _field(st.sampled_from([1, "7", "²", -1, 10**40])),
              "ends": _field(st.sampled_from(["+10m", "+2h", "+9999999d"])),
              "evidence": _field(st.lists(_field(_evidence), max_size=2)),
              "severity": _field(st.sampled_from(["critical", "warning", "nope"])),
              "detector": _field(st.sampled_from(["ib", "a b"])),
              "by": _field(st.just("alice")), "reason": _field(st.just("ops: fan"))})
scenarios = st.fixed_dictionaries(
    {"start": _field(st.just("2026-01-05T00:00:00Z")),
     "nodes": _field(st.just([{"name": "gpu01", "pool": "a"}, {"name": "gpu02"}])),
     "events": _field(st.lists(_events, max_size=5))},
    optional={"until": _field(st.sampled_from(["+1h", "+2h"])),
              "config": _field(st.just({"approvals": {"default": "auto"}})),
              "sim": _field(st.fixed_dictionaries({}, optional={
                  "interval": _field(st.sampled_from(["30s", "5m", "0s"])),
                  "action_duration": _field(st.just({"reboot": "2m"}))}))})


@FUZZ_CYCLE
@given(scenarios)
def test_fuzz_scenarios_load_and_simulate_or_say_why(doc: dict[str, Any]) -> None:
    """A scenario either runs through the real decide() or is a ScenarioError: never an
    uncaught exception, in the loader or in the run."""
    from slurm_heal.simulation import simulate

    try:
        sc = parse_scenario(doc)
    except ScenarioError as exc:
        assert str(exc)
        return
    try:
        simulate(sc)
    except ScenarioError as exc:
        assert str(exc)


def test_a_first_seen_in_year_9999_does_not_overflow_decide() -> None:
    """SPEC S1: an alert whose first_seen is year 9999 (Extra) is unreadable check data,
    not an OverflowError in the persistence arithmetic of decide()."""
    view = ClusterView(nodes=(_node("gpu01", _good_extra(since=datetime(
        9999, 12, 31, 23, 59, tzinfo=timezone.utc))),))
    plan = decide(view, State(), T0, policy_from_dict({"approvals": {"default": "auto"},
                                                       "safety": {}}))
    assert [(r.phase, r.rule) for r in plan.records] == [("alert", "I2")]


# ================================================================== Slurm's node records (I6)
def test_a_node_record_of_an_unexpected_type_is_a_slurm_error_naming_the_node() -> None:
    """SPEC I6: sinfo output the adapter cannot read is a SlurmError naming the node
    (the daemon skips the cycle), never a TypeError; deep JSON is not a RecursionError."""
    from slurm_heal.errors import SlurmError
    from slurm_heal.slurm.cli import parse_sinfo_json

    doc = {"nodes": [{"name": "gpu01", "state": "IDLE", "state_flags": 5}]}
    with pytest.raises(SlurmError, match="node 'gpu01'"):
        parse_sinfo_json(json.dumps(doc))
    with pytest.raises(SlurmError, match="did not print JSON"):
        parse_sinfo_json("[" * 100_000 + "]" * 100_000)


_sinfo_node = st.fixed_dictionaries(
    {"name": _field(st.sampled_from(["gpu01", "gpu02"]))},
    optional={"state": _field(st.sampled_from(["IDLE", "DOWN*+DRAIN", "MIXED"])),
              "state_flags": _field(st.lists(st.sampled_from(["DRAIN", "REBOOT_ISSUED"]))),
              "reason": _field(st.text(max_size=20)),
              "reason_changed_at": _field(st.integers(0, 2**40)),
              "boot_time": _field(st.integers(0, 2**40) | st.floats()),
              "extra": _field(st.text(max_size=40)),
              "partitions": _field(st.lists(st.text(max_size=5), max_size=2)),
              "features": _field(st.text(max_size=10))})


@FUZZ
@given(st.lists(_sinfo_node, max_size=3))
def test_fuzz_the_sinfo_node_parser_only_raises_slurm_error(nodes: list[Any]) -> None:
    from slurm_heal.errors import SlurmError
    from slurm_heal.slurm.cli import parse_sinfo_json

    try:
        parsed = parse_sinfo_json(json.dumps({"nodes": nodes}))
    except SlurmError as exc:
        assert str(exc)
        return
    for node in parsed:
        extra.read_check_data(node.name, node.extra, T0)
