"""The gcp provider (google-cloud-compute, REST transport) against a local Compute Engine
endpoint speaking the API's JSON shapes (tests/emulators.py `ComputeEngine`). SPEC L2, S6."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from slurm_heal.errors import ConfigError, ProviderRefused
from slurm_heal.providers import make_provider
from slurm_heal.providers.gcp import GcpProvider, request_id
from slurm_heal.types import Action
from tests.emulators import ComputeEngine


@pytest.fixture
def gce() -> Iterator[ComputeEngine]:
    with ComputeEngine() as fake:
        yield fake


def _provider(gce: ComputeEngine, tmp_path: Path, **kw: object) -> GcpProvider:
    return GcpProvider(project="hpc-prod", zone="us-central1-a", api_endpoint=gce.url,
                       credentials=AnonymousCredentials(), state_dir=tmp_path, backoff=0.01,
                       **kw)  # type: ignore[arg-type]


def _finish(p: GcpProvider, key: str) -> str:
    for _ in range(10):
        op = p.status(key)
        assert op is not None
        if op.finished:
            return op.status
    return "running"


def test_reboot_is_instances_reset_with_a_request_id_from_the_key(
        gce: ComputeEngine, tmp_path: Path) -> None:
    p = _provider(gce, tmp_path)
    op = p.submit("gpu01", Action.REBOOT, "r-g1:act:0")
    assert op.status == "running" and "RUNNING" in op.detail
    assert _finish(p, "r-g1:act:0") == "succeeded"
    assert gce.executed == [("reset", "gpu01")]
    assert gce.calls[0][2] == request_id("r-g1:act:0", "0:reset")


def test_migrate_reports_the_host_as_faulty(gce: ComputeEngine, tmp_path: Path) -> None:
    """The platform's own "this host is bad, move me" for GPU VMs."""
    p = _provider(gce, tmp_path, instances={"gpu01": "us-east5-b/a3-node-7"})
    p.submit("gpu01", Action.MIGRATE, "r-g2:act:0")
    assert _finish(p, "r-g2:act:0") == "succeeded"
    assert gce.executed == [("reportHostAsFaulty", "a3-node-7")]


def test_migrate_falls_back_to_stop_and_start_where_report_is_refused(tmp_path: Path) -> None:
    with ComputeEngine(report_host_as_faulty=False) as gce:
        p = _provider(gce, tmp_path)
        op = p.submit("gpu01", Action.MIGRATE, "r-g3:act:0")
        assert "reportHostAsFaulty refused" in op.detail
        assert _finish(p, "r-g3:act:0") == "succeeded"
        assert gce.executed == [("stop", "gpu01"), ("start", "gpu01")]


def test_a_lost_answer_is_resent_with_the_same_request_id_and_runs_once(
        gce: ComputeEngine, tmp_path: Path) -> None:
    """SPEC S6: Compute Engine deduplicates by requestId; a retry cannot reset twice."""
    p = _provider(gce, tmp_path)
    gce.answer_next.append(503)
    p.submit("gpu01", Action.POWER_CYCLE, "r-g4:act:0")
    assert _finish(p, "r-g4:act:0") == "succeeded"
    assert gce.executed == [("stop", "gpu01"), ("start", "gpu01")]
    stops = [c for c in gce.calls if c[0] == "stop"]
    assert len(stops) == 1  # the 503 was answered before the method ran
    p2 = _provider(gce, tmp_path / "other")  # a replica without our records
    (tmp_path / "other").mkdir(exist_ok=True)
    p2.submit("gpu01", Action.POWER_CYCLE, "r-g4:act:0")
    assert gce.executed == [("stop", "gpu01"), ("start", "gpu01")]  # same requestId


def test_rebuild_recreates_from_the_group_template_or_is_refused(
        gce: ComputeEngine, tmp_path: Path) -> None:
    p = _provider(gce, tmp_path)
    assert not p.supports(Action.REBUILD)
    with pytest.raises(ProviderRefused, match="instance_group_manager"):
        p.submit("gpu01", Action.REBUILD, "r-g5:act:0")
    p = _provider(gce, tmp_path, instance_group_manager="a3-mig")
    p.submit("gpu01", Action.REBUILD, "r-g6:act:0")
    assert _finish(p, "r-g6:act:0") == "succeeded"
    assert gce.executed == [("recreateInstances", "a3-mig")]


def test_config_names_the_missing_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="provider.zone: is required"):
        make_provider({"type": "gcp", "project": "p"}, state_dir=tmp_path)
    with pytest.raises(ConfigError, match="provider.fault_behavior"):
        make_provider({"type": "gcp", "project": "p", "zone": "z",
                       "fault_behavior": "BROKEN"}, state_dir=tmp_path)
