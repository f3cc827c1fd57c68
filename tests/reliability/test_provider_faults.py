"""A provider on a bad day (issue "trust under faults"; SPEC S6, L5, house style 6).

Real HTTP on 127.0.0.1 against the provider simulator, whose fault injection plays the
bad server: an answer trickled one byte at a time, nested 100,000 levels deep,
truncated, of the wrong shape, a reset connection, 429 with Retry-After, 5xx, and a
response lost after the action ran. Every call ends within its overall deadline, every
malformed answer is a ProviderError (never a RecursionError or a hang), retries are
bounded, and no idempotency key ever runs its action twice (the simulator's count).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import extra
from slurm_heal.config import policy_from_dict
from slurm_heal.controller import Controller
from slurm_heal.errors import ProviderError, ProviderTimeout
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.openstack import OpenStackProvider, nova_request_id
from slurm_heal.providers.simulator import COMPUTE_PREFIX, SimulatorServer
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.store import Store
from slurm_heal.types import Action, Alert, Severity

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(port=0, duration=0.05) as server:
        yield server


def _http(sim: SimulatorServer, sleeps: list[float] | None = None, **kw: float) -> HttpProvider:
    opts: dict[str, float] = {"connect_timeout": 1.0, "read_timeout": 1.0, "attempts": 3,
                              "backoff": 0.01, "call_timeout": 10.0, **kw}
    return HttpProvider(sim.url, sleep=(sleeps.append if sleeps is not None
                                        else lambda s: None),
                        **opts)  # type: ignore[arg-type]


def test_a_trickling_server_cannot_hold_a_call_past_its_deadline(sim: SimulatorServer) -> None:
    """House style 6: one byte every 0.4 s keeps each read within its timeout, so only
    an overall deadline ends the call. (Before: the call lasted as long as the server
    trickled, 94 s in the attack, every node blocked behind it.)"""
    sim.set_faults(trickle=1, trickle_every=0.4)
    provider = _http(sim, attempts=1, call_timeout=1.5)
    with pytest.raises(ProviderTimeout, match="deadline of 1.5s"):
        provider.status("r-1:act:0")
    provider.close()


def test_a_deeply_nested_answer_is_a_provider_error_and_the_retry_runs_nothing_twice(
        sim: SimulatorServer) -> None:
    """An answer nested 100,000 levels deep is a ProviderError naming it (before: a
    RecursionError that killed the daemon); asking again with the same key returns the
    operation the server already started, and the action ran once."""
    sim.set_faults(deep_json=1)
    provider = _http(sim, attempts=1)
    with pytest.raises(ProviderError, match="nested too deeply"):
        provider.submit("gpu07", Action.REBOOT, "r-2:act:0")
    op = provider.submit("gpu07", Action.REBOOT, "r-2:act:0")
    assert op.key == "r-2:act:0"
    assert sim.wait_idle(5) and sim.stats()["executed"] == {"r-2:act:0": 1}
    provider.close()


@pytest.mark.parametrize("fault", ["truncate", "reset", "lose_response"])
def test_a_cut_off_answer_is_retried_with_the_same_key_and_runs_once(
        sim: SimulatorServer, fault: str) -> None:
    """SPEC S6: a truncated answer, a reset connection and a response lost after the
    action ran are retried (bounded) with the same Idempotency-Key: one operation."""
    sim.set_faults(**{fault: 1})
    sleeps: list[float] = []
    provider = _http(sim, sleeps)
    op = provider.submit("gpu07", Action.REBUILD, "r-3:act:0")
    assert op.key == "r-3:act:0" and len(sleeps) == 1
    assert sim.wait_idle(5) and sim.stats()["executed"] == {"r-3:act:0": 1}
    provider.close()


def test_a_wrong_shape_is_a_provider_error_naming_it(sim: SimulatorServer) -> None:
    sim.set_faults(wrong_shape=1)
    provider = _http(sim, attempts=1)
    with pytest.raises(ProviderError, match="expected a JSON object with 'operation'"):
        provider.submit("gpu07", Action.REBOOT, "r-4:act:0")
    provider.close()


def test_429_waits_as_long_as_retry_after_says_then_succeeds(sim: SimulatorServer) -> None:
    sim.set_faults(error_429=2, retry_after=0.05)
    sleeps: list[float] = []
    provider = _http(sim, sleeps, attempts=4)
    provider.submit("gpu07", Action.REBOOT, "r-5:act:0")
    assert sleeps == [0.05, 0.05]
    assert sim.wait_idle(5) and sim.stats()["executed"] == {"r-5:act:0": 1}
    provider.close()


def test_5xx_is_retried_a_bounded_number_of_times_then_a_clear_error(
        sim: SimulatorServer) -> None:
    sim.set_faults(error_5xx=10)
    sleeps: list[float] = []
    provider = _http(sim, sleeps, attempts=3)
    with pytest.raises(ProviderError, match="gave up after 3 tries: HTTP 503"):
        provider.submit("gpu07", Action.REBOOT, "r-6:act:0")
    assert len(sleeps) == 2 and sim.stats()["executed"] == {}
    provider.close()


def test_retries_stop_when_the_deadline_leaves_no_time(sim: SimulatorServer) -> None:
    """A Retry-After longer than the call's deadline ends the call at once, clearly."""
    sim.set_faults(error_429=5, retry_after=30)
    sleeps: list[float] = []
    provider = _http(sim, sleeps, attempts=5, call_timeout=2.0)
    with pytest.raises(ProviderTimeout, match="no time for another try"):
        provider.status("r-7:act:0")
    assert sleeps == []
    provider.close()


def _openstack(sim: SimulatorServer, tmp_path: Path, **kw: float) -> OpenStackProvider:
    return OpenStackProvider(auth_url=sim.url, username="u", password="p", project_name="x",
                             compute_url=sim.url + COMPUTE_PREFIX, state_dir=tmp_path,
                             read_timeout=1.0, backoff=0.01,
                             sleep=lambda s: None, **kw)  # type: ignore[arg-type]


def test_openstack_deep_or_trickled_answers_are_provider_errors(sim: SimulatorServer,
                                                                tmp_path: Path) -> None:
    """The same guards on the Nova path: a nested server list is a ProviderError, a
    trickled token answer ends at the deadline; a later submit runs the action once."""
    sim.host_of("gpu07")
    provider = _openstack(sim, tmp_path, call_timeout=1.5, attempts=1)
    sim.set_faults(trickle=1, trickle_every=0.4)
    with pytest.raises(ProviderTimeout, match="deadline"):
        provider.submit("gpu07", Action.REBOOT, "r-8:act:0")
    # A deep answer to the token request (keystoneauth reads its catalog).
    sim.set_faults(trickle=0, deep_json=1)
    with pytest.raises(ProviderError, match="nested too deeply"):
        provider.submit("gpu07", Action.REBOOT, "r-8:act:0")
    op = provider.submit("gpu07", Action.REBOOT, "r-8:act:0")
    assert op.key == "r-8:act:0"
    assert sim.wait_idle(5)
    assert sim.stats()["executed"] == {nova_request_id("r-8:act:0"): 1}
    provider.close()


def test_a_malformed_answer_is_an_error_for_that_node_only(sim: SimulatorServer,
                                                          tmp_path: Path) -> None:
    """SPEC S6, L1: in one controller cycle the act of gpu01 gets a 100,000-deep answer:
    that effect is left in flight (asked about by key next cycle), the cycle goes on and
    gpu02's act runs; afterwards each key ran its action exactly once."""
    now = T0
    cluster = MemorySlurm([("gpu01", "a"), ("gpu02", "b")], clock=lambda: now)
    for name in ("gpu01", "gpu02"):
        a = Alert(node=name, fault="gpu.xid.48", severity=Severity.CRITICAL, summary="",
                  first_seen=T0 - timedelta(hours=1), last_seen=T0, detector="kernel_log")
        cluster.set_extra(name, extra.KEY, extra.our_section([a], T0))
    provider = _http(sim, attempts=1)
    policy = policy_from_dict({"approvals": {"default": "auto"},
                               "safety": {"concurrency": 4, "one_per_pool": False},
                               "capacity": {"min_available_percent": 0}})
    store = Store(tmp_path)
    ctl = Controller(slurm=cluster, provider=provider, store=store, policy=policy,
                     clock=lambda: now)
    first = ctl.cycle()  # both cordoned
    assert sorted(e.effect.node for e in first.executed if e.effect.kind == "cordon") == [
        "gpu01", "gpu02"]
    sim.set_faults(deep_json=1)  # the next answer: the first act of the next cycle
    now += timedelta(seconds=30)
    report = ctl.cycle()
    acts = {e.effect.node: e for e in report.executed if e.effect.kind == "act"}
    assert sorted(acts) == ["gpu01", "gpu02"]
    assert sorted(str(e.outcome) for e in acts.values()) == ["None", "running"]
    unknown = next(e for e in acts.values() if e.outcome is None)
    assert "nested too deeply" in unknown.detail
    for _ in range(4):  # the next cycles ask by key; nothing is sent twice
        sim.wait_idle(5)
        now += timedelta(seconds=30)
        ctl.cycle()
    assert sim.stats()["executed"] == {e.effect.key: 1 for e in acts.values()}
    provider.close()
