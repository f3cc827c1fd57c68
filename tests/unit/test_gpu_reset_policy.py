"""SPEC E6 in decide(): reset_gpu is the first step of the ladder for the catalog's
RESET_GPU Xids where `escalation.gpu_reset` is on; a refused or failed reset climbs to
reboot at once (E1); one that held and came back climbs like any action. Pure."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal import catalog
from slurm_heal.configcheck import check_config
from slurm_heal.errors import ConfigError
from slurm_heal.models import Phase, State
from slurm_heal.types import Action
from tests.unit.test_policy_engine import T0, alert, node, phases, pol, rem, run

ON = {"escalation": {"gpu_reset": True}}
# NVIDIA's Xid catalog, resolution bucket RESET_GPU (r570; issue 28 lists the same 14).
RESET_GPU_XIDS = (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)


def test_the_catalog_marks_exactly_nvidias_reset_gpu_xids() -> None:
    """SPEC E6: the catalog's reset-able faults are the Xids whose bucket is RESET_GPU."""
    cat = catalog.load()
    marked = sorted(f.xid for f in cat.faults.values() if f.gpu_reset and f.xid is not None)
    assert marked == list(RESET_GPU_XIDS)
    assert not any(f.gpu_reset for f in cat.faults.values() if f.xid is None)
    assert all(cat.get(f"gpu.xid.{x}").action is Action.REBOOT for x in RESET_GPU_XIDS)


@pytest.mark.parametrize(("enabled", "expected"), [(False, Action.REBOOT),
                                                   (True, Action.RESET_GPU)])
def test_xid_119_resets_the_gpu_first_only_with_gpu_reset_on(enabled: bool,
                                                              expected: Action) -> None:
    """SPEC E6: a preview, off by default: off, an Xid 119 reboots as before."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.119")]},
               policy=pol(escalation={"gpu_reset": enabled}))
    assert plan.updates[0].action is expected
    assert plan.updates[0].action_rule == "catalog:gpu.xid.119"


def test_an_xid_whose_resolution_is_a_reboot_is_not_reset() -> None:
    """SPEC E6: only the RESET_GPU bucket (Xid 48 is WORKFLOW_XID_48: a reboot)."""
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.48")]},
               policy=pol(**ON))
    assert plan.updates[0].action is Action.REBOOT


def test_a_failed_reset_climbs_to_reboot_at_once() -> None:
    """SPEC E6/E1: one failed reset (refused by nvidia-smi, or the check still sees the
    Xid) and the next recommendation is the reboot, not a second reset."""
    hist = (rem(phase=Phase.FAILED, action=Action.RESET_GPU, fault="gpu.xid.119",
                at=T0 - timedelta(hours=1)),)
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.119")]},
               State(remediations=hist), policy=pol(**ON))
    (new,) = [u for u in plan.updates if u.id != hist[0].id]
    assert new.action is Action.REBOOT and new.escalated_from is Action.RESET_GPU
    assert new.action_rule == "E1"
    whys = [r.why for r in plan.records if r.rule == "E1"]
    assert whys and "reboot at once (SPEC E6)" in whys[0], whys


def test_a_reset_that_held_once_is_tried_again_then_climbs_like_any_action() -> None:
    """SPEC E1: a reset that fixed the GPU and the Xid came back: reset again (repeats=2);
    after two, the reboot."""
    one = (rem(action=Action.RESET_GPU, fault="gpu.xid.119", at=T0 - timedelta(days=1)),)
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.119")]},
               State(remediations=one), policy=pol(**ON))
    assert [u.action for u in plan.updates if u.id != one[0].id] == [Action.RESET_GPU]
    two = one + (rem(action=Action.RESET_GPU, fault="gpu.xid.119",
                     at=T0 - timedelta(days=2)),)
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.119")]},
               State(remediations=two), policy=pol(**ON))
    assert [u.action for u in plan.updates if u.phase is Phase.APPROVED
            or u.phase is Phase.CORDONED] == [Action.REBOOT]


def test_the_ladder_after_the_reset_is_the_configured_one() -> None:
    """SPEC E1/E6: reset_gpu -> reboot -> rebuild -> migrate; two failed reboots after
    the reset still become a rebuild."""
    hist = (rem(phase=Phase.FAILED, action=Action.RESET_GPU, fault="gpu.xid.119",
                at=T0 - timedelta(hours=5)),
            *(rem(action=Action.REBOOT, fault="gpu.xid.119", at=T0 - timedelta(hours=2 + i))
              for i in range(2)))
    plan = run([node("gpu01"), node("gpu02")], {"gpu01": [alert("gpu01", "gpu.xid.119")]},
               State(remediations=hist), policy=pol(**ON))
    (new,) = [u for u in plan.updates if u.id not in {h.id for h in hist}]
    assert new.action is Action.REBUILD
    assert pol(**ON).escalation.steps == (Action.RESET_GPU, Action.REBOOT, Action.REBUILD,
                                          Action.MIGRATE)
    assert pol().escalation.steps == (Action.REBOOT, Action.REBUILD, Action.MIGRATE)


def test_a_failed_reset_is_not_handed_to_a_person_the_reboot_follows() -> None:
    """SPEC E6/L5: reset_gpu is not the top of the ladder: its failure ends the
    remediation failed, the next recommendation follows E1 (no person yet)."""
    r = rem(phase=Phase.ACTING, action=Action.RESET_GPU, fault="gpu.xid.119")
    r = r.model_copy(update={"attempts": (r.attempts[0].model_copy(update={
        "outcome": "failed", "detail": "nvidia-smi refused the reset (exit 255): In use by "
        "another client"}),)})
    plan = run([node("gpu01", "DRAIN"), node("gpu02", pool="b")],
               {"gpu01": [alert("gpu01", "gpu.xid.119")]}, State(remediations=(r,)),
               T0 + timedelta(minutes=5), pol(**ON))
    failed = [u for u in plan.updates if u.id == r.id]
    assert failed and failed[0].phase is Phase.FAILED
    assert not failed[0].data.handed_to_person
    assert "In use by another client" in failed[0].steps[-1].why
    # the next recommendation, in the same decision: the reboot (E1), no person, no remove
    assert [u.action for u in plan.updates if u.id != r.id][-1] is Action.REBOOT
    assert Action.REMOVE not in [rec.action for rec in plan.records]


def test_reset_gpu_on_the_ladder_needs_the_flag() -> None:
    """SPEC E6: like power_cycle (E4), a preview named on the ladder while off is an error
    naming the key; gpu_reset_timeout is bounded."""
    with pytest.raises(ConfigError, match="gpu_reset"):
        pol(escalation={"ladder": ["reset_gpu", "reboot"]})
    assert pol(escalation={"gpu_reset": True, "ladder": ["reboot", "reset_gpu"]}) \
        .escalation.steps == (Action.REBOOT, Action.RESET_GPU)
    with pytest.raises(ConfigError, match="gpu_reset_timeout"):
        pol(escalation={"gpu_reset": True, "gpu_reset_timeout": "2h"})


def test_policy_check_knows_gpu_reset_and_says_where_the_job_writes(tmp_path: Path) -> None:
    """SPEC E6, I4: `policy check` accepts the keys, refuses a bad one naming it, and warns
    that the job's result needs a directory the nodes share."""
    f = tmp_path / "heal.toml"
    f.write_text('[escalation]\ngpu_reset = true\ngpu_reset_timeout = "30s"\n'
                 '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n')
    report = check_config(f)
    assert report.policy.escalation.gpu_reset
    assert any("escalation.gpu_reset is on" in w and "results_dir" in w
               for w in report.warnings), report.warnings
    f.write_text(f.read_text() + '[validation]\nresults_dir = "/shared/heal"\n')
    assert not [w for w in check_config(f).warnings if "gpu_reset" in w]
    f.write_text('[escalation]\ngpu_rest = true\n')
    with pytest.raises(ConfigError, match="escalation.gpu_rest"):
        check_config(f)


@pytest.mark.parametrize(("action", "held"), [(Action.RESET_GPU, False), (Action.REBOOT, True)])
def test_a_failed_reset_starts_no_cooldown_the_reboot_follows_at_once(action: Action,
                                                                       held: bool) -> None:
    """SPEC E6/S2: "climbs at once": a reset that failed a minute ago holds the reboot
    for no cooldown (the node never went back to service); a failed reboot still does."""
    hist = (rem(phase=Phase.FAILED, action=action, fault="gpu.xid.119",
                at=T0 - timedelta(minutes=1)),)
    plan = run([node("gpu01", "DRAIN"), node("gpu02")],
               {"gpu01": [alert("gpu01", "gpu.xid.119", since=T0 - timedelta(hours=1))]},
               State(remediations=hist), policy=pol(**ON))
    assert (("blocked", "S2") in phases(plan, "gpu01")) is held
    if not held:
        (new,) = [u for u in plan.updates if u.id != hist[0].id]
        assert new.action is Action.REBOOT and new.phase is Phase.CORDONED


def test_the_xid_seen_again_after_the_reset_fails_it_at_once_not_at_the_return_timeout(
        ) -> None:
    """SPEC E6/L5: no boot follows a reset (nothing to wait for): the node check after it
    still sees the Xid, so the reset failed now and the reboot is next."""
    acted = T0 - timedelta(minutes=3)
    r = rem(phase=Phase.RETURNING, action=Action.RESET_GPU, fault="gpu.xid.119", at=acted)
    r = r.model_copy(update={"data": r.data.but(act_done=acted + timedelta(minutes=1))})
    checked = T0 - timedelta(minutes=1)
    plan = run([node("gpu01", "DRAIN", checked=checked), node("gpu02", pool="b")],
               {"gpu01": [alert("gpu01", "gpu.xid.119", since=acted - timedelta(hours=1),
                                seen=checked)]},
               State(remediations=(r,)), policy=pol(**ON))
    failed = [u for u in plan.updates if u.id == r.id]
    assert failed and failed[0].phase is Phase.FAILED, plan.records
    assert "still sees gpu.xid.119" in failed[0].steps[-1].why
    assert [u.action for u in plan.updates if u.id != r.id] == [Action.REBOOT]
