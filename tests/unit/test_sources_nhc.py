"""SPEC D13, D5, S8 (issue 39): NHC's own drains, remediated when the policy opts in.

NHC's check names and failure messages come from NHC's own source (the vendored
``lbnl-nhc-9c4a38c`` in ../shared/vendor, read in place with tarfile): a reason is built
the way NHC writes it (``die 1 "$FUNCNAME:  ..."``, and node-mark-offline's ``NHC:``
leader). The life cycle runs on the controller rig (the real controller, the in-memory
Slurm, the provider simulator over HTTP)."""

from __future__ import annotations

import re
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import reasons
from slurm_heal.config import policy_from_dict
from slurm_heal.errors import ConfigError
from slurm_heal.models import Phase
from slurm_heal.sources import nhc
from slurm_heal.types import NodeInfo
from tests.fakes import controller_rig
from tests.lab import vendor_tarball

NAME = "lbnl-nhc-9c4a38c"
MAP = {"check_hw_ib": "ib.link_down", "check_fs_mount": "fs.readonly"}


@cache
def nhc_source() -> dict[str, str]:
    """NHC's scripts and helpers by path inside the tarball (skips where it is absent)."""
    tarball = vendor_tarball(f"{NAME}.tar.xz")
    if tarball is None:
        pytest.skip(f"the NHC source {NAME}.tar.xz is not in ../shared/vendor beside the "
                    "clone nor in $LAB_VENDOR_DIR: make it with `git clone "
                    f"https://github.com/mej/nhc && git -C nhc archive --prefix={NAME}/ "
                    f"9c4a38c | xz > DIR/{NAME}.tar.xz` and set LAB_VENDOR_DIR=DIR")
    out = {}
    with tarfile.open(tarball) as tar:
        for m in tar.getmembers():
            if m.isfile() and (m.name.endswith(".nhc") or m.name.endswith("node-mark-offline")):
                f = tar.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read().decode(errors="replace")
    return out


def nhc_checks() -> set[str]:
    return {m for text in nhc_source().values()
            for m in re.findall(r"^function (check_[a-z0-9_]+)", text, re.M)}


def nhc_reason(check: str) -> str:
    """The reason NHC drains with when ``check`` fails: its first ``die`` message with
    $FUNCNAME filled in, after node-mark-offline's leader."""
    leader = re.search(r'^LEADER="([^"]+)"', nhc_source()["helpers/node-mark-offline"], re.M)
    assert leader is not None
    for text in nhc_source().values():
        body = re.search(rf"^function {check}\b.*?^}}", text, re.M | re.S)
        if body:
            die = re.search(r'die 1 "(\$FUNCNAME:[^"]+)"', body.group(0))
            assert die is not None, f"{check} has no die message"
            return f"{leader.group(1)} {die.group(1).replace('$FUNCNAME', check)}"
    raise AssertionError(f"NHC has no {check}")


def test_the_checks_the_docs_map_are_nhcs_own() -> None:
    assert set(MAP) <= nhc_checks(), set(MAP) - nhc_checks()
    assert len(nhc_checks()) > 30


@pytest.mark.parametrize("check", sorted(MAP))
def test_nhcs_reason_names_its_check(check: str) -> None:
    reason = nhc_reason(check)
    assert reason.startswith("NHC: " + check + ":"), reason
    assert nhc.parse(reason) is not None and nhc.parse(reason)[0] == check  # type: ignore[index]
    conf = policy_from_dict({"sources": {"nhc": {"enabled": True, "map": MAP}}}).sources.nhc
    assert nhc.mapped_fault(reason, conf) == MAP[check]


@pytest.mark.parametrize("reason", ["maintenance by alice", "NHC: Script timed out.",
                                    "heal-request: reboot detector=x", ""])
def test_a_reason_that_names_no_nhc_check_is_not_nhcs(reason: str) -> None:
    conf = policy_from_dict({"sources": {"nhc": {"enabled": True, "map": MAP}}}).sources.nhc
    assert nhc.mapped_fault(reason, conf) is None
    node = NodeInfo(name="gpu01", states=frozenset({"IDLE", "DRAIN"}), reason=reason)
    assert not nhc.taken_over(node, conf)


@pytest.mark.parametrize(("section", "words"), [
    ({"enabled": True}, "maps no NHC check"),
    ({"map": {"hw_ib": "ib.link_down"}}, "is not an NHC check name"),
    ({"map": {"check_hw_ib": "IB down"}}, "is not a fault id"),
])
def test_a_bad_nhc_section_is_refused(section: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"sources": {"nhc": section}})
    assert "sources.nhc" in str(err.value) and words in str(err.value), err.value


POLICY = {"approvals": {"default": "auto"}, "capacity": {"min_available_percent": 0},
          "safety": {"one_per_pool": False, "concurrency": 4}}


def test_a_node_nhc_drained_is_repaired_checked_and_resumed_when_opted_in(
        tmp_path: Path) -> None:
    """D13: NHC's check_hw_ib drain → ib.link_down from nhc → our cordon takes the drain
    over (NHC no longer owns it) → reboot → the node's check passes (L5) → resumed."""
    reason = nhc_reason("check_hw_ib")
    policy = {**POLICY, "sources": {"nhc": {"enabled": True, "map": MAP}}}
    with controller_rig(tmp_path, [("gpu01", "a"), ("gpu02", "a")], policy) as rig:
        rig.cluster.drain("gpu01", reason)
        rig.cycle()
        [rem] = rig.rems("gpu01")
        assert (rem.fault, rem.detector, rem.origin) == ("ib.link_down", "nhc", "alert")
        proposed = next(s for s in rem.steps if s.phase == "proposed")
        assert "from nhc" in proposed.why and "check_hw_ib" in proposed.why, proposed.why
        node = rig.cluster.node("gpu01")
        assert reasons.owner(node.reason) == "ours", node.reason  # taken over
        for _ in range(20):
            rig.cycle()
            if rig.rems("gpu01")[0].phase.terminal:
                break
        [rem] = rig.rems("gpu01")
        assert rem.phase is Phase.DONE, [(s.phase, s.why) for s in rem.steps]
        node = rig.cluster.node("gpu01")
        assert not node.drained and not node.down
        assert rig.rems("gpu02") == []


@pytest.mark.parametrize(("opt_in", "reason"), [
    (False, "check_hw_ib"),  # NHC's drain while the policy does not opt in: D5
    (True, "check_ps_loadavg"),  # an NHC check the policy does not map: D5
    (True, "maintenance: new DIMMs (alice)"),  # a person's own drain: D5, S8
])
def test_a_drain_the_policy_does_not_map_stays_someone_elses(
        tmp_path: Path, opt_in: bool, reason: str) -> None:
    if reason.startswith("check_"):
        reason = nhc_reason(reason)
    policy = {**POLICY, "sources": {"nhc": {"enabled": opt_in, "map": MAP}}}
    with controller_rig(tmp_path, [("gpu01", "a")], policy) as rig:
        rig.cluster.drain("gpu01", reason)
        for _ in range(3):
            rig.cycle()
        assert rig.rems("gpu01") == []
        assert rig.cluster.node("gpu01").reason == reason  # never relabelled
        assert rig.cluster.node("gpu01").drained
