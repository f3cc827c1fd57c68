"""Every section of the policy file is typed (issue 21; SPEC P, O3-O5, V1-V3): the
sections other parts own are read by their models (slurm_heal.sections) when the policy
is loaded, in the words their own readers always used, and config.py stays free of the
parts that own them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_heal.api.settings import api_settings
from slurm_heal.cli import cli
from slurm_heal.config import load_policy, policy_from_dict
from slurm_heal.controller import ControllerSettings, controller_settings
from slurm_heal.errors import ConfigError
from slurm_heal.metrics import MetricsSettings, metrics_settings
from slurm_heal.notify import NotifySettings, notify_settings
from slurm_heal.sections import ApiSettings, ProviderSection
from slurm_heal.validation.suite import Validation, validation_from

HTTP = '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'

# One bad key per section: (section, table, the dotted key, words of why)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("controller", {"interval": "soon"}, "controller.interval", "is not a duration"),
    ("api", {"bind": "nowhere"}, "api.bind", "is not HOST:PORT"),
    ("notify", {"routes": [{"urls": ["json://x"], "min_severity": "loud"}]},
     "notify.routes.0.min_severity", "Input should be 'info', 'warning' or 'critical'"),
    ("metrics", {"prot": 9000}, "metrics.prot", "unknown key"),
    ("validation", {"suites": {"nvidia": [{"name": "a", "command": ["true"], "x": 1}]}},
     "validation.suites.nvidia.0.x", "docs/validation.md lists the keys"),
]
READERS = {"controller": controller_settings, "api": api_settings,
           "notify": notify_settings, "metrics": metrics_settings,
           "validation": validation_from}


def _inline(value: Any) -> str:
    """``value`` as a TOML inline value (tables, arrays, strings, integers)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return json.dumps(value)


def _words(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    return str(exc.value)


@pytest.mark.parametrize(("section", "table", "key", "why"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_key_in_any_section_is_refused_when_the_policy_loads_in_its_readers_words(
        section: str, table: dict[str, Any], key: str, why: str) -> None:
    with pytest.raises(ConfigError) as at_load:
        policy_from_dict({section: table}, "heal.toml")
    assert at_load.value.file == "heal.toml" and at_load.value.key == key
    assert why in str(at_load.value)
    with pytest.raises(ConfigError) as by_reader:
        READERS[section](table, "heal.toml")  # type: ignore[operator]
    assert _words(at_load) == _words(by_reader)


@pytest.mark.parametrize(("section", "table", "key", "why"), BAD, ids=[b[0] for b in BAD])
def test_policy_check_names_the_file_the_key_and_why_for_any_section(
        tmp_path: Path, section: str, table: dict[str, Any], key: str, why: str) -> None:
    f = tmp_path / "heal.toml"
    f.write_text(f"{section} = {_inline(table)}\n" + HTTP)
    result = CliRunner().invoke(cli, ["policy", "check", str(f), "--no-slurm"])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert f"heal.toml: {key}" in line and why in line


def test_the_loaded_sections_are_their_models_and_readers_take_them_as_they_are(
        tmp_path: Path) -> None:
    f = tmp_path / "heal.toml"
    f.write_text(HTTP + '[controller]\ninterval = "10s"\n[metrics]\nport = 9001\n'
                 '[notify]\nbackoff = "1m"\n[validation]\nresults_dir = "/shared/v"\n'
                 '[api]\nbind = "127.0.0.1:8300"\n')
    p = load_policy(f)
    assert isinstance(p.controller, ControllerSettings) and p.controller.interval == 10.0
    assert isinstance(p.metrics, MetricsSettings) and p.metrics.port == 9001
    assert isinstance(p.notify, NotifySettings) and p.notify.backoff == 60.0
    assert isinstance(p.validation, Validation) and p.validation.results_dir == "/shared/v"
    assert isinstance(p.api, ApiSettings) and p.api.port == 8300
    assert controller_settings(p.controller, str(f)) is p.controller
    assert metrics_settings(p.metrics, str(f)) is p.metrics
    assert validation_from(p.validation, str(f)) is p.validation
    assert api_settings(p.api, str(f)).bind == "127.0.0.1:8300"


def test_absent_sections_are_the_defaults_and_no_api_section_is_none() -> None:
    p = policy_from_dict({})
    assert p.controller == ControllerSettings() and p.metrics == MetricsSettings()
    assert p.notify == NotifySettings() and p.validation == Validation()
    assert p.api is None and p.provider == ProviderSection()


def test_a_third_party_provider_section_loads_as_an_envelope_of_its_table() -> None:
    """`provider` stays open: a type no built-in knows, with its own keys, loads; its own
    model reads the table when the provider is built (providers/settings.py)."""
    table = {"type": "acme", "endpoint": "https://acme.example", "retries": 3}
    p = policy_from_dict({"provider": table})
    assert p.provider.kind == "acme" and dict(p.provider.table) == table
    assert ProviderSection.of({"type": 5}).kind is None
    # ... but a table whose type is none is refused when it is loaded, as `policy check`
    # refuses it (issue 33: the loader reads the provider's table as its construction).
    with pytest.raises(ConfigError, match=r"provider\.type: missing or not a string"):
        policy_from_dict({"provider": {"type": 5}})
    from slurm_heal.config import Policy

    assert Policy.model_validate({"provider": table}).provider == p.provider


def test_config_imports_none_of_the_parts_that_own_the_sections() -> None:
    """tests/unit/test_import_layers.py forbids the cycles; this, the weight: loading a
    policy pulls no provider, notifier, metrics server or HTTP client."""
    code = ("import sys, slurm_heal.config; print(sorted(m for m in ('requests', 'apprise', "
            "'prometheus_client', 'slurm_heal.controller', 'slurm_heal.notify', "
            "'slurm_heal.providers', 'slurm_heal.api', 'slurm_heal.metrics') "
            "if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.stdout.strip() == "[]"


def test_status_judges_an_old_heartbeat_by_the_typed_controller_interval() -> None:
    """The overview reads ``policy.controller.interval`` (an attribute now, issue 21): a
    heartbeat that does not carry its interval is judged by the policy's (SPEC O1)."""
    from datetime import datetime, timedelta, timezone

    from slurm_heal.heartbeat import Heartbeat
    from slurm_heal.models import State
    from slurm_heal.readmodel import overview

    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    beat = Heartbeat(at=now - timedelta(hours=3))
    policy = policy_from_dict({"controller": {"interval": "2m"}})
    ov = overview.gather(State(), [], now, heartbeat=beat, policy=policy)
    assert ov.controller is not None and ov.controller.state == "stale"
    assert "expected every 120s" in ov.controller.words
