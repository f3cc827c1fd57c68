"""/metrics follows Prometheus' conventions (issue 38, SPEC O4): no gauge takes a suffix
Prometheus reserves (``slurm_heal_breaker_count`` was one; its replacement is served and
the old name still, one release), a ``slurm_heal_build_info`` with the version, a
``slurm_heal_leader``, and the process_* and python_* families every exporter serves.
Read from the daemon's own registry as Prometheus' text format."""

from __future__ import annotations

import platform

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_heal import __version__
from slurm_heal.metrics import DEPRECATED_NAMES, METRIC_NAMES, Metrics

RESERVED = ("_count", "_sum", "_bucket", "_total", "_created", "_info")


def _families(metrics: Metrics) -> dict[str, object]:
    """Each family the registry serves, by the name its samples carry (a counter's
    with _total), as the daemon's registry builds it."""
    return {f.name + ("_total" if f.type == "counter" else ""): f
            for f in metrics.registry.collect()}


def _samples(metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_no_gauge_of_ours_takes_a_reserved_suffix_but_the_deprecated_one() -> None:
    families = _families(Metrics())
    ours = {n: f for n, f in families.items() if n.startswith("slurm_heal_")}
    bad = sorted(n for n, f in ours.items() if getattr(f, "type", "") == "gauge"
                 and n.endswith(RESERVED) and n not in DEPRECATED_NAMES
                 and n != "slurm_heal_build_info")
    assert bad == []
    assert DEPRECATED_NAMES == {"slurm_heal_breaker_count":
                                "slurm_heal_breaker_window_remediations"}
    for old, new in DEPRECATED_NAMES.items():
        assert old in ours and new in ours and new in METRIC_NAMES
        assert "Deprecated" in str(getattr(ours[old], "documentation", ""))


def test_build_info_leader_and_the_process_families_are_served() -> None:
    metrics = Metrics()
    samples = _samples(metrics)
    assert samples["slurm_heal_build_info"] == [
        ({"version": __version__, "python": platform.python_version()}, 1.0)]
    assert samples["slurm_heal_leader"] == [({}, 0.0)]  # not leading yet
    metrics.leader.set(1)
    assert _samples(metrics)["slurm_heal_leader"] == [({}, 1.0)]
    assert samples["process_resident_memory_bytes"][0][1] > 0
    assert samples["process_start_time_seconds"][0][1] > 0
    assert "process_cpu_seconds_total" in samples and "process_open_fds" in samples
    assert samples["python_info"][0][0]["version"] == platform.python_version()
    assert "python_gc_collections_total" in samples

