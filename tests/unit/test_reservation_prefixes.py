"""SPEC E6, V1, V4: the GPU reset, the validation and the post-repair gate each hold a
node in a maintenance reservation named <prefix><node>. Run together on one node (a reset,
then its gate) they must never share a name: a policy that gives two of them one prefix is
refused, naming the key."""

from __future__ import annotations

import pytest

from slurm_heal import gpureset
from slurm_heal.config import RESET_RESERVATION_PREFIX, policy_from_dict
from slurm_heal.errors import ConfigError

SUITE = {"nvidia": [{"name": "diag", "command": ["dcgmi", "diag", "-r", "1"],
                    "timeout": "2m"}]}


def test_the_defaults_keep_the_reset_validation_and_gate_reservations_apart() -> None:
    policy = policy_from_dict({"escalation": {"gpu_reset": True}, "gate": {"enabled": True, "suites": SUITE}})
    assert gpureset.PREFIX == RESET_RESERVATION_PREFIX  # the one the check compares
    assert policy.gate.reservation_prefix != gpureset.PREFIX


def test_a_gate_prefix_equal_to_the_resets_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"gate": {"enabled": True, "suites": SUITE,
                                   "reservation_prefix": RESET_RESERVATION_PREFIX}})
    words = str(err.value)
    assert "gate.reservation_prefix 'slurm-heal-reset-'" in words and "GPU reset" in words


def test_a_validation_prefix_equal_to_the_gates_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"gate": {"reservation_prefix": "site-hold-"},
                          "validation": {"reservation_prefix": "site-hold-"}})
    words = str(err.value)
    assert "validation.reservation_prefix 'site-hold-'" in words
    assert "gate.reservation_prefix" in words


def test_distinct_site_prefixes_are_accepted() -> None:
    policy = policy_from_dict({"gate": {"reservation_prefix": "site-gate-"},
                               "validation": {"reservation_prefix": "site-validate-"}})
    assert policy.gate.reservation_prefix == "site-gate-"
