"""SPEC O4: the Grafana dashboard in contrib/grafana/ is built on exactly the metrics the
daemon serves: every metric a query names is one of `slurm_heal.metrics.METRIC_NAMES`
(histogram series by their _bucket/_sum/_count), and every served metric is on it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from slurm_heal.metrics import DEPRECATED_NAMES, METRIC_NAMES

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "slurm-heal.json"
SUFFIXES = ("_bucket", "_sum", "_count")


def _served(name: str) -> str | None:
    if name in METRIC_NAMES:
        return name
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in METRIC_NAMES:
            return name[: -len(suffix)]
    return None


def test_every_dashboard_query_names_a_metric_the_daemon_serves() -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        names = re.findall(r"\bslurm_heal_[a-z_]+", expr)
        assert names, f"a query that names no slurm-heal metric: {expr}"
        for name in names:
            served = _served(name)
            assert served is not None, f"{name} (in {expr!r}) is not served"
            used.add(served)
    # a deprecated name is served one release more, never drawn (issue 38)
    assert used == set(METRIC_NAMES) - set(DEPRECATED_NAMES), \
        f"served but not on the dashboard: {set(METRIC_NAMES) - set(DEPRECATED_NAMES) - used}"
    assert not used & set(DEPRECATED_NAMES)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in doc["panels"])
