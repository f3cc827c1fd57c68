"""InfiniBand, host connectivity and disk space detectors (SPEC D6, D8).

The InfiniBand tests read the real /sys/class/infiniband capture of an H100 node where it
lives (``../shared/fixtures/real``); variants (a port down, a slow port, counters that
grew) are made by copying it into a temp dir and editing the copy.
"""

from __future__ import annotations

import os
import shutil
import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.checks import config, state
from slurm_heal.checks.detectors import disk, infiniband, network
from slurm_heal.errors import ConfigError
from tests.realdata import MISSING, REAL

IB = REAL / "sys-class-infiniband-h100"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)

needs_real = pytest.mark.skipif(
    not IB.is_dir() and os.environ.get("CI") != "true",
    reason=MISSING)


def ib_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "ib"
    shutil.copytree(IB, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def evaluate(base: Path, counters: dict[str, list[float]] | None = None,
             now: datetime = NOW, **kw: object) -> tuple[list, dict[str, list[float]]]:
    return infiniband.evaluate(infiniband.gather(str(base)), counters or {}, now, "gpu07",
                               **kw)  # type: ignore[arg-type]


@needs_real
def test_the_real_h100_tree_is_eight_healthy_ndr_ports() -> None:
    ports = infiniband.gather(str(IB))
    ib_ports = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib_ports) == 8 and {p.rate_gbps for p in ib_ports} == {400.0}
    found, counters = evaluate(IB, expected_rate=400, expected_ports=8)
    # port_rcv_errors is 14 on mlx5_0 over the port's life: a baseline, not a fault.
    assert found == [] and counters["mlx5_0/1:port_rcv_errors"][1] == 14


@needs_real
def test_the_roce_bond_is_not_judged_as_infiniband() -> None:
    found, _ = evaluate(IB, expected_rate=400)
    assert all(f.evidence[0].data["device"] != "mlx5_bond_0" for f in found)


@needs_real
def test_a_port_not_active_is_a_link_down(tmp_path: Path) -> None:
    base = ib_copy(tmp_path)
    (base / "mlx5_4/ports/1/state").write_text("1: DOWN\n")
    (base / "mlx5_4/ports/1/phys_state").write_text("3: Disabled\n")
    found, _ = evaluate(base)
    (f,) = found
    assert (f.fault, f.evidence[0].data["device"]) == ("ib.link_down", "mlx5_4")
    assert "DOWN" in f.summary and "Disabled" in f.summary


@needs_real
def test_a_vanished_adapter_is_a_link_down(tmp_path: Path) -> None:
    base = ib_copy(tmp_path)
    shutil.rmtree(base / "mlx5_9")
    (f,) = evaluate(base, expected_ports=8)[0]
    assert f.fault == "ib.link_down" and f.evidence[0].data == {"present": 7, "expected": 8}


@needs_real
def test_a_port_below_its_expected_rate_is_degraded(tmp_path: Path) -> None:
    base = ib_copy(tmp_path)
    (base / "mlx5_1/ports/1/rate").write_text("200 Gb/sec (2X NDR)\n")
    (f,) = evaluate(base, expected_rate=400)[0]
    assert (f.fault, f.evidence[0].data["rate_gbps"]) == ("ib.link_degraded", 200.0)


@needs_real
def test_error_counters_are_judged_by_their_growth_per_minute(tmp_path: Path) -> None:
    base = ib_copy(tmp_path)
    _, counters = evaluate(base)
    (base / "mlx5_0/ports/1/counters/symbol_error").write_text("150\n")
    found, counters = evaluate(base, counters, now=NOW + timedelta(minutes=5))
    (f,) = found
    assert f.fault == "ib.link_degraded"
    assert f.evidence[0].data.items() >= {"counter_name": "symbol_error", "previous": 0,
                                          "counter": 150, "per_minute": 30.0}.items()
    # No further growth: the port is fine again.
    assert evaluate(base, counters, now=NOW + timedelta(minutes=10))[0] == []


# ------------------------------------------------------------------ host connectivity

def test_an_endpoint_unreachable_for_the_threshold_is_a_fault() -> None:
    results = {"storage:2049": "[Errno 111] Connection refused", "ctld:6817": ""}
    found, since = network.evaluate(results, {}, NOW, 120.0, "gpu07")
    assert found == [] and since == {"storage:2049": NOW.timestamp()}
    found, since = network.evaluate(results, since, NOW + timedelta(seconds=130), 120.0,
                                    "gpu07")
    (f,) = found
    assert f.fault == "host.unreachable" and f.evidence[0].data["endpoint"] == "storage:2049"
    # Reachable again: forgotten.
    assert network.evaluate({"storage:2049": ""}, since, NOW, 120.0, "gpu07") == ([], {})


def test_probe_tells_a_listening_port_from_a_closed_one() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        up = f"127.0.0.1:{srv.getsockname()[1]}"
        down = f"127.0.0.1:{closed.getsockname()[1]}"
        res = network.probe((up, down), 1.0)
    finally:
        srv.close()
        closed.close()
    assert res[up] == "" and res[down]


def test_a_malformed_endpoint_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="network.endpoints.*'storage' is not HOST:PORT"):
        config.parse_config({"network": {"endpoints": ["storage"]}}, "check.toml")


# ------------------------------------------------------------------ disk (D8)

def test_low_disk_space_is_a_record_only_warning() -> None:
    usage = [disk.Usage("/", 100 * 10**9, 3 * 10**9), disk.Usage("/scratch", 10**12, 5 * 10**11)]
    (f,) = disk.evaluate(usage, NOW, "gpu07", min_free_percent=5.0)
    assert (f.fault, f.evidence[0].data["path"], f.evidence[0].data["free_percent"]) == \
        ("disk.low_space", "/", 3.0)
    assert disk.evaluate(usage, NOW, "gpu07", min_free_percent=5.0, min_free_gb=2) == []


def test_disk_gather_reads_statvfs_under_the_replay_root(tmp_path: Path) -> None:
    (u,) = disk.gather(("/", "/nonexistent"), lambda p: str(tmp_path) + p)
    assert u.path == "/" and 0 < u.free <= u.total


# ------------------------------------------------------------------ counter state

def test_rate_per_minute_needs_a_previous_sample_and_a_growing_counter() -> None:
    t = NOW.timestamp()
    assert state.rate_per_minute(None, 5, t) is None
    assert state.rate_per_minute([t - 120, 10], 70, t) == 30.0
    assert state.rate_per_minute([t - 120, 10], 3, t) is None  # reset
    assert state.rate_per_minute([t, 10], 70, t) is None  # no time passed


def test_detector_counter_state_of_the_wrong_shape_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / state.FILE).write_text('{"v": 1, "boot_id": "b", "nvidia_state": '
                                       '{"counters": {"x": "many"}}}')
    st, existed = state.load(str(tmp_path), "b")
    assert not existed and "nvidia_state" not in st
    assert any(p.name.startswith("state.json.corrupt-") for p in tmp_path.iterdir())


# ------------------------------------------------------------------ configuration

def test_the_documented_example_config_parses_to_its_defaults() -> None:
    """Every key shown in the config module's docstring is a real key with that default."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    doc = config.__doc__ or ""
    example = doc[doc.index("[check]"):]
    example = "\n".join(line.split("#")[0].rstrip() if not line.lstrip().startswith("[")
                        else line for line in example.splitlines())
    parsed = config.parse_config(tomllib.loads(example), "doc")
    assert parsed == config.CheckConfig(source_file="doc")


@pytest.mark.parametrize("key,value", [("source", "cuda"), ("smi_format", "json"),
                                       ("dcgm", "maybe")])
def test_an_unknown_nvidia_choice_is_a_config_error_naming_the_key(key: str,
                                                                   value: str) -> None:
    with pytest.raises(ConfigError, match=f"nvidia.{key}.*unknown value '{value}'"):
        config.parse_config({"nvidia": {key: value}}, "check.toml")
