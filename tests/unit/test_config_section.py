"""The one config-section reader and the one duration syntax (house style 13; issue 21):
every section's problem is a ConfigError naming the file, the dotted key and why."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from slurm_heal.checks.config import parse_config
from slurm_heal.config import Seconds, policy_from_dict, read_section
from slurm_heal.controller import controller_settings
from slurm_heal.errors import ConfigError
from slurm_heal.metrics import metrics_settings
from slurm_heal.notify import notify_settings


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    every: Seconds = 60.0


class _Demo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    port: int = Field(default=1, ge=1, le=65535)
    items: list[_Item] = Field(default_factory=list)


@pytest.mark.parametrize(("raw", "message"), [
    ({"port": 0}, "heal.toml: demo.port: Input should be greater than or equal to 1"),
    ({"colour": 1}, "heal.toml: demo.colour: unknown key (Extra inputs are not permitted; "
                    "docs/policy.md lists the keys)"),
    ({"items": [{"name": "a"}, {"name": "b", "every": "soon"}]},
     "heal.toml: demo.items[1].every: 'soon' is not a duration (use e.g. \"30s\", \"30m\", "
     "\"2h\", \"7d\")"),
    ({"port": "x", "items": [{}]},
     "heal.toml: demo.port: Input should be a valid integer, unable to parse string as an "
     "integer (and 1 more problem(s))"),
    (7, "heal.toml: demo: expected a table, got 7"),
])
def test_a_bad_section_names_the_file_the_key_and_why(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_section(_Demo, raw, file="heal.toml", key="demo")
    assert str(err.value) == message
    assert err.value.file == "heal.toml" and err.value.key == message.split(": ")[1]


def test_a_missing_section_is_the_defaults_and_positions_may_be_dotted() -> None:
    assert read_section(_Demo, None, file="f", key="demo") == _Demo()
    with pytest.raises(ConfigError, match=r"^f: demo\.items\.0\.name: Field required$"):
        read_section(_Demo, {"items": [{}]}, file="f", key="demo", index=".")


@pytest.mark.parametrize(("value", "seconds"), [(30, 30.0), (2.5, 2.5), ("30s", 30.0),
                                               ("10m", 600.0), ("1h", 3600.0)])
def test_controller_interval_takes_the_duration_syntax_and_bare_seconds(
        value: Any, seconds: float) -> None:
    """One duration convention: "30s"/"10m" as everywhere, bare seconds as existing files
    have them."""
    assert controller_settings({"interval": value}, "heal.toml").interval == seconds


@pytest.mark.parametrize(("raw", "message"), [
    ({"interval": "soon"}, "heal.toml: controller.interval: 'soon' is not a duration"),
    ({"interval": "2h"}, "heal.toml: controller.interval: Input should be less than or "
                         "equal to 3600"),
    ({"interval": True}, "heal.toml: controller.interval: True is not a duration"),
    ({"intervall": 5}, "heal.toml: controller.intervall: unknown key"),
])
def test_a_bad_controller_interval_says_why_in_our_words(raw: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(ConfigError) as err:
        controller_settings(raw, "heal.toml")
    assert str(err.value).startswith(message), str(err.value)


def test_notify_backoff_follows_the_same_rule() -> None:
    s = notify_settings({"backoff": "1m", "max_backoff": "2h", "poll": 5}, "heal.toml")
    assert (s.backoff, s.max_backoff, s.poll) == (60.0, 7200.0, 5.0)
    with pytest.raises(ConfigError, match=r"^heal\.toml: notify\.backoff: '30 sec' is not a "
                                          "duration"):
        notify_settings({"backoff": "30 sec"}, "heal.toml")


def test_check_toml_hold_follows_the_same_rule() -> None:
    assert parse_config({"kernel_log": {"hold": "30m"}}).kernel_log.hold == 1800.0
    assert parse_config({"kernel_log": {"hold": 3600}}).kernel_log.hold == 3600.0
    with pytest.raises(ConfigError) as err:
        parse_config({"kernel_log": {"hold": "an hour"}}, "check.toml")
    assert str(err.value).startswith("check.toml: kernel_log.hold: 'an hour' is not a duration")
    with pytest.raises(ConfigError, match=r"kernel_log\.hold: must be positive"):
        parse_config({"kernel_log": {"hold": "0s"}}, "check.toml")


def test_a_policy_knob_still_needs_its_unit() -> None:
    """SPEC S2: `cooldown = 30` stays refused (it reads as minutes to a person); only the
    settings that were always seconds take a bare number."""
    with pytest.raises(ConfigError, match=r"safety\.cooldown: 30 is a bare number"):
        policy_from_dict({"safety": {"cooldown": 30}}, "heal.toml")


def test_the_sections_of_the_policy_are_tables_of_toml_values() -> None:
    """The pass-through sections are typed (a table of TOML values), so `controller = 5`
    is refused when the file loads, naming the key."""
    with pytest.raises(ConfigError, match=r"^heal\.toml: metrics: Input should be a valid "
                                          "dictionary"):
        policy_from_dict({"metrics": 5}, "heal.toml")
    assert metrics_settings({"port": 9000}, "heal.toml").port == 9000
