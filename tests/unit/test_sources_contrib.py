"""SPEC D13 (issue 39): the shipped Prometheus rules and Alertmanager receiver snippet are
what Prometheus's and Alertmanager's own tools accept and do what docs/sources.md says:
`promtool test rules` over dcgm-exporter's series (the labels of the real page in
tests/data/real/dcgm-exporter), `amtool check-config` over the snippet merged into a
configuration. Skipped with the reason where Debian's prometheus / alertmanager are absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import promstack

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
UUID = "GPU-f809e614-a528-4083-acbf-334600000000"
LABELS = (f'gpu="0",UUID="{UUID}",device="nvidia0",modelName="GRID A100-8C",'
          'Hostname="gpu07"')


def _rules_test(tmp_path: Path) -> Path:
    test = {
        "rule_files": [str(promstack.RULES)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="0",err_msg="No Error"}}',
                 "values": "0 0 79 79 0"},
                # DCGM's "blank" sentinel (no ECC on this GPU) is no error; 2 is
                {"series": f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{LABELS}}}",
                 "values": "9223372036854775794 9223372036854775794 2 2 2"},
                {"series": f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{LABELS}}}",
                 "values": "0 0 0 1 1"},
            ],
            "alert_rule_test": [
                {"eval_time": "15s", "alertname": "GpuXidError", "exp_alerts": []},
                {"eval_time": "15s", "alertname": "GpuEccDoubleBit", "exp_alerts": []},
                {"eval_time": "45s", "alertname": "GpuXidError", "exp_alerts": [{
                    "exp_labels": {"gpu": "0", "UUID": UUID, "device": "nvidia0",
                                   "modelName": "GRID A100-8C", "Hostname": "gpu07",
                                   "err_code": "79", "err_msg": "No Error",
                                   "severity": "critical", "slurm_heal": "1"},
                    "exp_annotations": {
                        "summary": f"GPU 0 ({UUID}) reported Xid 79",
                        "description": "dcgm-exporter on gpu07: DCGM_FI_DEV_XID_ERRORS=79"},
                }]},
                {"eval_time": "60s", "alertname": "GpuXidError", "exp_alerts": []},
                {"eval_time": "45s", "alertname": "GpuRowRemapFailure", "exp_alerts": [{
                    "exp_labels": {"gpu": "0", "UUID": UUID, "device": "nvidia0",
                                   "modelName": "GRID A100-8C", "Hostname": "gpu07",
                                   "severity": "critical", "slurm_heal": "1"},
                    "exp_annotations": {
                        "summary": f"GPU 0 ({UUID}) has a row remapping failure"},
                }]},
                {"eval_time": "30s", "alertname": "GpuEccDoubleBit", "exp_alerts": [{
                    "exp_labels": {"gpu": "0", "UUID": UUID, "device": "nvidia0",
                                   "modelName": "GRID A100-8C", "Hostname": "gpu07",
                                   "severity": "critical", "slurm_heal": "1"},
                    "exp_annotations": {
                        "summary": f"GPU 0 ({UUID}) has 2 uncorrectable ECC errors"},
                }]},
            ],
        }],
    }
    path = tmp_path / "rules.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return path


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: apt-get "
                    "install prometheus)")
def test_the_shipped_rules_fire_on_dcgm_exporters_series_as_documented(
        tmp_path: Path) -> None:
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(promstack.RULES)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 3 rules found" in check.stdout
    run = subprocess.run([PROMTOOL, "test", "rules", str(_rules_test(tmp_path))],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.skipif(AMTOOL is None, reason="amtool is not installed (Debian: apt-get "
                    "install prometheus-alertmanager)")
def test_the_receiver_snippet_is_a_valid_alertmanager_configuration(tmp_path: Path) -> None:
    assert AMTOOL is not None
    token = tmp_path / "slurm-heal.token"
    token.write_text("t\n")
    conf = promstack.alertmanager_config(
        "https://slurm-heal.example:8250/api/v1/sources/alertmanager", token)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(conf))
    run = subprocess.run([AMTOOL, "check-config", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    route = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={path}",
                            "slurm_heal=1", "alertname=GpuXidError"],
                           capture_output=True, text=True, timeout=60)
    assert route.returncode == 0 and route.stdout.split() == ["slurm-heal"], route.stdout
