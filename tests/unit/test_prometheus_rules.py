"""Prometheus' own checks of what slurm-heal ships for it (issue 38, SPEC O4): the
alerting rules in contrib/prometheus/ pass `promtool check rules` and their tests
`promtool test rules`; the daemon's /metrics passes `promtool check metrics`; the Grafana
dashboard's time-to-repair panels show a day with three repairs (evaluated by promtool).

promtool is Debian's (`apt-get install prometheus`); without it these tests skip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from slurm_heal.metrics import DEPRECATED_NAMES, METRIC_NAMES, Metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "contrib" / "prometheus" / "slurm-heal.rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "slurm-heal.rules.test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "slurm-heal.json"


def _promtool(*args: str, stdin: str | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return subprocess.run([tool, *args], input=stdin, capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd)


def test_promtool_checks_the_alerting_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_promtool_runs_the_rules_tests() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_promtool_rules_tests_can_fail(tmp_path: Path) -> None:
    """A stale-heartbeat threshold moved from 10 to 30 minutes makes the tests fail."""
    rules = tmp_path / RULES.name
    rules.write_text(RULES.read_text().replace("> 600)", "> 1800)"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    done = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0 and "SlurmHealHeartbeatStale" in done.stdout + done.stderr


def test_the_rules_name_only_metrics_the_daemon_serves() -> None:
    text = RULES.read_text()
    names = set(re.findall(r"\bslurm_heal_[a-z_]+", text))
    assert names
    served = set(METRIC_NAMES) - set(DEPRECATED_NAMES)
    assert {n.removesuffix("_total") for n in names} <= {n.removesuffix("_total")
                                                          for n in served}, names - served
    for alert in ("SlurmHealControllerDown", "SlurmHealLeaderMissing",
                  "SlurmHealBreakerOpen", "SlurmHealRemediationsFailing",
                  "SlurmHealHeartbeatStale"):
        assert f"alert: {alert}\n" in text


def _scrape(metrics: Metrics) -> str:
    metrics.cycles.inc()
    metrics.repair.labels("xid79", "reboot").observe(1200)
    metrics.slurm_calls.labels("snapshot").observe(0.2)
    port = metrics.serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()
    finally:
        metrics.close()


def test_promtool_check_metrics_finds_nothing_but_the_deprecated_name() -> None:
    """The _count gauge (issue 38) is served one release more beside its new name; that
    name is all promtool says; `[metrics] deprecated_names = false` leaves it nothing."""
    full = _promtool("check", "metrics", stdin=_scrape(Metrics()))
    problems = [ln for ln in (full.stdout + full.stderr).splitlines() if ln.strip()]
    assert problems == ['slurm_heal_breaker_count non-histogram and non-summary metrics '
                        'should not have "_count" suffix'], problems
    clean = _promtool("check", "metrics", stdin=_scrape(Metrics(deprecated_names=False)))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert not (clean.stdout + clean.stderr).strip()


def _panel_exprs(title_words: str) -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    panel = next(p for p in doc["panels"] if title_words in p["title"])
    return [t["expr"] for t in panel["targets"]]


def test_the_time_to_repair_panel_shows_a_day_with_three_repairs(tmp_path: Path) -> None:
    """Three repairs in a day (at 6, 12 and 18 h, each 10-15 minutes): each quantile query
    of the panel, as Grafana sends it over a 24 h dashboard ($__range = 1d), has a value at
    the end of the day; the rate over $__rate_interval (4m at a 1m scrape) it used to have
    has none there (NaN: Grafana draws nothing)."""
    exprs = _panel_exprs("Time to repair")
    assert len(exprs) == 2 and all("$__range" in e and "$__rate_interval" not in e
                                   for e in exprs)
    series = []
    for le, values in (("300", "0x1440"), ("600", "0x1440"),
                       ("900", "0x360 1x360 2x360 3x360"), ("+Inf", "0x360 1x360 2x360 3x360")):
        series.append({"series": 'slurm_heal_time_to_repair_seconds_bucket{fault="xid79",'
                                 f'action="reboot",le="{le}"}}', "values": values})
    tests = [{"expr": f"count(({e.replace('$__range', '1d')}) >= 0)", "eval_time": "1439m",
              "exp_samples": [{"labels": "{}", "value": 1}]} for e in exprs]
    old = exprs[0].replace("increase(", "rate(").replace("$__range", "4m")
    tests.append({"expr": f"count(({old}) >= 0)", "eval_time": "1439m", "exp_samples": []})
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}
    (tmp_path / "day.yml").write_text(json.dumps(spec))  # JSON is YAML
    done = _promtool("test", "rules", "day.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_panel_rates_a_rarely_moving_series_over_the_rate_interval() -> None:
    doc = json.loads(DASHBOARD.read_text())
    rare = ("slurm_heal_time_to_repair_seconds", "slurm_heal_provider_call",
            "slurm_heal_notify_")
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            if any(r in expr for r in rare):
                assert "$__rate_interval" not in expr, (panel["title"], expr)
