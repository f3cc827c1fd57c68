"""SPEC E6 through the controller cycle without Slurm (tests/fakes.py's rig: the real
engine, store, http provider and provider simulator): reset_gpu never goes to a cloud
provider that cannot do it as if it had run; where the daemon has no reset job runner,
the provider's refusal fails the step and the reboot follows at once (E1)."""

from __future__ import annotations

from pathlib import Path

from slurm_heal.models import Phase
from slurm_heal.types import Action
from tests.fakes import controller_rig

NODES = [("gpu01", "a"), ("gpu02", "b")]
POLICY = {"approvals": {"default": "auto"}, "escalation": {"gpu_reset": True},
          "safety": {"concurrency": 2, "one_per_pool": False},
          "capacity": {"min_available_percent": 0}}


def test_a_reset_the_provider_refuses_fails_and_the_reboot_follows_at_once(
        tmp_path: Path) -> None:
    with controller_rig(tmp_path, NODES, POLICY) as rig:
        rig.alert("gpu01", "gpu.xid.119")
        ctl = rig.controller()
        assert ctl.gpu_reset is None  # no reset runner: the provider is asked
        rig.run(ctl, 40)
        first, second = rig.rems("gpu01")[:2]
        assert first.action is Action.RESET_GPU and first.phase is Phase.FAILED
        act = [a for a in first.attempts if a.effect == "act"][0]
        assert act.outcome == "failed" and "reset_gpu" in act.detail, act
        assert second.action is Action.REBOOT and second.escalated_from is Action.RESET_GPU
        assert second.phase is Phase.DONE, second.steps[-1]
        assert rig.cluster.history("gpu01") == ["reboot"]  # the reset never ran as a reboot
        assert not rig.cluster.node("gpu01").drained
