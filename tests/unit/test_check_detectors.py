"""The node check's detectors (issue 21): one tuple of built-ins from which the
configuration and the runner are derived, each an object of the `Detector` protocol
imported only when it runs on the node (issue 26), and third-party detectors through
the ``slurm_heal.detectors`` entry point group (docs/checks.md "Third-party detectors")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_heal import frozen
from slurm_heal.checks import config, detector, runner

REPO = Path(__file__).resolve().parents[2]


def test_the_builtins_are_checkconfigs_sections_in_their_order() -> None:
    names = [n for n, _ in frozen.fields_of(config.CheckConfig)
             if n not in (*config.TOP_KEYS, "source_file", "plugins")]
    assert names == list(config.SECTIONS) == [s.name for s in config.BUILTINS]
    cfg = config.CheckConfig()
    for spec, settings in cfg.detectors():
        assert type(settings) is spec.settings
        assert cfg.section(spec.name) is settings
    with pytest.raises(KeyError):
        cfg.section("no-such-detector")


def test_every_builtin_is_a_detector_of_the_protocol_its_spec_names() -> None:
    for spec in config.BUILTINS:
        det: detector.Detector[Any] = spec.load()
        assert det.name == spec.name
        assert det.settings is spec.settings
        assert det.modes == spec.settings().modes
        assert callable(det.gather) and callable(det.evaluate)
        assert bool(getattr(det, "tool_hang_is_finding", False)) == spec.tool_hang_is_finding
        keys = [n for n, _ in frozen.fields_of(spec.settings)]
        assert all(k in keys for k in config.COMMON_KEYS), spec.name


def _healthy_root(root: Path) -> Path:
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    (root / "proc/uptime").write_text("100.0 10.0\n")
    (root / "dev/kmsg").write_text("6,1,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: up\n")
    return root


def _check(root: Path, *args: str, pythonpath: str = "",
           code: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SLURM_HEAL_ROOT=str(root), PATH=str(root / "bin"),
               PYTHONPATH=os.pathsep.join(p for p in (pythonpath, str(REPO)) if p))
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "slurm_heal.checks"]
    return subprocess.run([*argv, "--dry-run", "--json", "--node", "n1", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_detector_with_nothing_to_look_at_is_unsupported_and_never_imported(
        tmp_path: Path) -> None:
    """SPEC D2/D3 on a node without GPUs, InfiniBand or endpoints: their detectors say
    unsupported (the same words as before) without their modules being imported."""
    root = _healthy_root(tmp_path / "root")
    code = ("import sys, json\nfrom slurm_heal.checks import config, runner\n"
            "r = runner.run_check(config.CheckConfig(), node_name='n1', dry_run=True)\n"
            "mods = [m for m in ('slurm_heal.checks.detectors.nvidia', "
            "'slurm_heal.checks.detectors.amd', 'slurm_heal.checks.detectors.gpu', "
            "'slurm_heal.checks.detectors.infiniband', 'slurm_heal.checks.detectors.network')"
            " if m in sys.modules]\n"
            "print(json.dumps({'mods': mods, 'st': {s.name: [s.status, s.message] "
            "for s in r.statuses}}))\n")
    res = _check(root, code=code)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["mods"] == []
    st = out["st"]
    assert st["nvidia"] == ["unsupported", "no NVIDIA driver and no nvidia-smi on this node"]
    assert st["amd"] == ["unsupported", "no amdgpu driver and no amd-smi/rocm-smi on this node"]
    assert st["infiniband"][0] == "unsupported" and "no InfiniBand adapter" in st["infiniband"][1]
    assert st["network"] == ["unsupported", "no endpoints configured ([network] endpoints)"]
    assert st["kernel_log"] == ["ok", ""] and st["mounts"] == ["ok", ""]


PLUGIN = '''
from slurm_heal.frozen import dataclass
from slurm_heal.types import Evidence, Finding, Severity
from slurm_heal.checks import paths


@dataclass(frozen=True, slots=True)
class FanSettings:
    enabled: bool = True
    timeout: float = 5.0
    modes: tuple[str, ...] = ("healthcheck", "agent")
    min_rpm: int = 1000


class Fans:
    name = "fans"
    settings = FanSettings
    modes = FanSettings().modes

    def gather(self, cfg, st, node, now):
        return int(paths.read_text(paths.host_path("/run/fan_rpm")).strip() or 0)

    def evaluate(self, cfg, st, node, now, rpm):
        if rpm >= cfg.section("fans").min_rpm:
            return [], {"fans_seen": rpm}
        return [Finding(fault="gpu.thermal", severity=Severity.WARNING,
                        summary=f"fan at {rpm} rpm", detector="fans", node=node,
                        evidence=(Evidence(source="fan", text=str(rpm)),))], {}


DETECTOR = Fans()
NOT_ONE = object()
'''


def _install_plugin(site: Path, target: str = "fanplug:DETECTOR") -> None:
    """A distribution as pip would leave it: the module and its dist-info."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "fanplug.py").write_text(PLUGIN)
    info = site / "fanplug-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fanplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[slurm_heal.detectors]\nfans = {target}\n")


def test_a_third_party_detector_runs_through_its_entry_point(tmp_path: Path) -> None:
    root = _healthy_root(tmp_path / "root")
    (root / "run").mkdir()
    (root / "run/fan_rpm").write_text("300\n")
    site = tmp_path / "site"
    _install_plugin(site)
    conf = tmp_path / "check.toml"
    conf.write_text("[fans]\nmin_rpm = 500\n")
    res = _check(root, "--check-config", str(conf), pythonpath=str(site))
    assert res.returncode == 1, res.stderr
    (f,) = json.loads(res.stdout)
    assert (f["fault"], f["detector"], f["summary"]) == ("gpu.thermal", "fans", "fan at 300 rpm")
    (root / "run/fan_rpm").write_text("900\n")
    res = _check(root, "--check-config", str(conf), pythonpath=str(site))
    assert res.returncode == 0 and json.loads(res.stdout) == []
    # its settings are validated like a built-in's, the error naming file and key
    conf.write_text("[fans]\nmin_rpm = \"fast\"\n")
    res = _check(root, "--check-config", str(conf), pythonpath=str(site))
    err = json.loads(res.stdout)["error"]
    assert res.returncode == 2 and "fans.min_rpm" in err["message"] \
        and "expected int" in err["message"]


def test_an_unknown_section_names_the_installed_detectors_and_a_bad_one_names_itself(
        tmp_path: Path) -> None:
    root = _healthy_root(tmp_path / "root")
    site = tmp_path / "site"
    _install_plugin(site)
    conf = tmp_path / "check.toml"
    conf.write_text("[fanz]\n")
    res = _check(root, "--check-config", str(conf), pythonpath=str(site))
    msg = json.loads(res.stdout)["error"]["message"]
    assert res.returncode == 2 and "unknown section" in msg and msg.endswith("disk, gpud, fans)")
    _install_plugin(site, "fanplug:NOT_ONE")
    conf.write_text("[fans]\n")
    res = _check(root, "--check-config", str(conf), pythonpath=str(site))
    msg = json.loads(res.stdout)["error"]["message"]
    assert res.returncode == 2 and "'fanplug:NOT_ONE'" in msg and "is not a Detector" in msg


def test_without_a_third_party_section_entry_points_are_never_looked_up(
        tmp_path: Path) -> None:
    root = _healthy_root(tmp_path / "root")
    code = ("import sys\nfrom slurm_heal.checks import fastcli\nc = fastcli.main(sys.argv[1:])\n"
            "print('importlib.metadata' in sys.modules, file=sys.stderr)\nsys.exit(c)\n")
    res = _check(root, code=code)
    assert res.returncode == 0 and res.stderr.strip().endswith("False")


def test_the_runner_takes_its_detectors_from_the_config() -> None:
    """No second list of detectors in the runner: its statuses follow config.BUILTINS."""
    assert not hasattr(runner, "REGISTRY") and not hasattr(runner, "DETECTORS")
