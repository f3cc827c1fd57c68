"""The policy file (issue 3): TOML in, a frozen Policy out; errors name file, key and why."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal.config import Policy, load_policy, parse_duration, policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.types import Action, Severity

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "policies"


def test_defaults_match_the_documented_values() -> None:
    """docs/policy.md: manual approval, 2h wait, 30m cooldown, 2 repeats in 7d, 10d evidence."""
    p = Policy()
    assert p.approvals.default == "manual"
    assert p.waiting.max_wait == timedelta(hours=2) and p.waiting.at_limit == "requeue"
    assert p.safety.cooldown == timedelta(minutes=30)
    assert p.escalation.repeats == 2 and p.escalation.window == timedelta(days=7)
    assert p.escalation.migrate_evidence_window == timedelta(days=10)
    assert p.escalation.ladder == (Action.REBOOT, Action.REBUILD, Action.MIGRATE)
    assert p.escalation.power_cycle is False and p.mode == "normal"


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("30m", 1800), ("2h", 7200),
                                               ("7d", 604800), ("1d12h", 129600), (90, 90)])
def test_durations(text: str | int, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


def test_the_spec_p2_example_is_a_few_lines(tmp_path: Path) -> None:
    """SPEC P2: auto reboot for Xid 119 and 95, migrate always manual."""
    f = tmp_path / "p.toml"
    f.write_text("""
[[approvals.rules]]
fault = "gpu.xid.119"
mode = "auto"

[[approvals.rules]]
fault = "gpu.xid.95"
mode = "auto"

[[approvals.rules]]
action = "migrate"
mode = "manual"
""")
    p = load_policy(f)
    assert [r.mode for r in p.approvals.rules] == ["auto", "auto", "manual"]


@pytest.mark.parametrize(("doc", "key", "why"), [
    ({"waiting": {"max_wait": "30h"}}, "waiting.max_wait", "24h"),
    ({"waiting": {"max_wait": "soon"}}, "waiting.max_wait", "not a duration"),
    ({"approvals": {"rules": [{"fault": "gpu.*", "mode": "maybe"}]}}, "approvals.rules[0].mode",
     "auto"),
    ({"approvals": {"rules": [{"nodes": "gpu[01-", "mode": "auto"}]}},
     "approvals.rules[0].nodes", "host list"),
    ({"safety": {"cooldown": "-5m"}}, "safety.cooldown", "not a duration"),
    ({"escalation": {"ladder": ["reboot", "remove"]}}, "escalation.ladder", "Q2"),
    ({"escalation": {"ladder": ["reboot", "power_cycle"]}}, None, "E4"),
    ({"approval": {}}, "approval", "unknown key"),
])
def test_a_bad_policy_names_the_file_the_key_and_why(doc: dict[str, object], key: str | None,
                                                      why: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict(doc, source="policy.toml")
    assert str(err.value).startswith("policy.toml")
    assert err.value.key == key and why in str(err.value)


def test_unreadable_and_non_toml_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("approvals = [\n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_policy(bad)


def test_controller_section_is_typed_and_the_provider_table_passes_through() -> None:
    """Issue 21: [controller] is read by its model when the policy loads; [provider] is an
    envelope (its type, and the table the provider's own model reads when built)."""
    p = policy_from_dict({"controller": {"state_dir": "/var/x", "interval": 30},
                          "provider": {"type": "http", "url": "http://127.0.0.1:1"}})
    assert (p.controller.state_dir, p.controller.interval) == ("/var/x", 30.0)
    assert p.provider.kind == "http"
    assert p.provider.table == {"type": "http", "url": "http://127.0.0.1:1"}


def test_persistence_by_fault_glob_beats_severity() -> None:
    """SPEC S1."""
    p = policy_from_dict({"safety": {"persistence": {"gpu.xid.*": "5m", "warning": "20m"}}})
    assert p.safety.persistence_for("gpu.xid.13", Severity.WARNING) == timedelta(minutes=5)
    assert p.safety.persistence_for("fs.readonly", Severity.WARNING) == timedelta(minutes=20)
    assert p.safety.persistence_for("fs.readonly", Severity.CRITICAL) == timedelta(0)


@pytest.mark.parametrize("path", sorted(CONTRIB.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_example_policies_load(path: Path) -> None:
    load_policy(path)
