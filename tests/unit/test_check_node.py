"""Node problems (SPEC D4): read-only mounts and restart loops; the check config."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal.checks import config, node, runner
from slurm_heal.errors import ConfigError

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
/dev/nvme0n1 /scratch xfs ro,relatime 0 0
/dev/sdb1 /mnt/my\\040data ext4 ro 0 0
"""


def test_a_read_only_mount_that_should_be_writable_is_a_critical_finding() -> None:
    found = node.evaluate_mounts(node.parse_mounts(MOUNTS), ("/", "/scratch"), "n1")
    assert [(f.fault, f.evidence[0].data["mountpoint"]) for f in found] == [
        ("fs.readonly", "/scratch")]


def test_a_mount_not_configured_rw_or_not_mounted_is_not_a_finding() -> None:
    mounts = node.parse_mounts(MOUNTS)
    assert node.evaluate_mounts(mounts, ("/", "/home"), "n1") == []
    assert "/mnt/my data" in mounts


def test_the_last_mount_on_a_point_wins() -> None:
    text = "/dev/sda1 / ext4 rw 0 0\n/dev/sda1 / ext4 ro 0 0\n"
    assert len(node.evaluate_mounts(node.parse_mounts(text), ("/",), "n1")) == 1


SHOW = """\
Id=slurmd.service
LoadState=loaded
NRestarts=7

Id=kubelet.service
LoadState=not-found
NRestarts=0
"""


def test_systemctl_show_output_is_parsed_and_unknown_units_left_out() -> None:
    assert node.parse_systemctl_show(SHOW) == {"slurmd.service": 7}


def _run(samples: list[tuple[int, int]], window: float = 3600, most: int = 3
         ) -> list[str]:
    hist: dict[str, list[list[float]]] = {}
    found = []
    for minute, count in samples:
        found, hist = node.evaluate_restarts(hist, {"slurmd.service": count},
                                             T0 + timedelta(minutes=minute), window, most, "n1")
    return [f.summary for f in found]


def test_restarts_growing_within_the_window_are_a_restart_loop() -> None:
    assert _run([(0, 2), (10, 4), (20, 6)]) == ["slurmd.service restarted 4 times in the last 60 minutes"]


def test_a_few_restarts_or_old_ones_are_not_a_loop() -> None:
    assert _run([(0, 2), (10, 4)]) == []
    assert _run([(0, 0), (90, 5), (200, 6)]) == []


def test_a_counter_reset_starts_the_history_afresh() -> None:
    assert _run([(0, 20), (5, 1), (10, 2)]) == []


def test_config_defaults_and_a_valid_file(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[kernel_log]\nsource = "file"\npath = "/var/log/kern.log"\n'
                 '[services]\nenabled = false\n[mounts]\nrw = ["/", "/scratch"]\n')
    cfg = config.load_config(str(f))
    assert cfg.kernel_log.source == "file" and not cfg.services.enabled
    assert cfg.mounts.rw == ("/", "/scratch")


@pytest.mark.parametrize("text, key", [
    ('[kernel_log]\nsource = "dmesg"\n', "kernel_log.source"),
    ("[mounts]\nrw = '/'\n", "mounts.rw"),
    ("[services]\nwindow = -5\n", "services.window"),
    ('[services]\nmodes = ["always"]\n', "services.modes"),
    ("[gpu]\nenabled = true\n", "gpu"),
    ("[check\n", "not valid TOML"),
])
def test_bad_config_is_an_error_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config.load_config(str(f))


def test_an_explicit_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        config.load_config(str(tmp_path / "missing.toml"))


def test_restart_loop_is_seen_across_check_runs_through_systemctl(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D4 with systemd's NRestarts growing between runs (a stand-in systemctl)."""
    from slurm_heal.checks import runner

    root = tmp_path / "root"
    (root / "run/systemd/system").mkdir(parents=True)  # sd_booted()
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n"
        f"echo Id=slurmd.service; echo LoadState=loaded; echo NRestarts=$(/bin/cat {count})\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))
    monkeypatch.setenv("PATH", str(bin_dir))
    cfg = config.parse_config({"kernel_log": {"enabled": False}})
    results = []
    for minute, n in ((0, 1), (10, 3), (20, 6)):
        count.write_text(str(n))
        results.append(runner.run_check(cfg, node_name="n1", dry_run=True,
                                        now=T0 + timedelta(minutes=minute)))
    assert [r.findings for r in results[:2]] == [[], []]
    (finding,) = results[2].findings
    assert finding.fault == "service.restart_loop" and "slurmd.service" in finding.summary
    assert results[2].exit_code == 1


def test_fewer_gpus_than_configured_is_gpu_missing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D2: 7 of 8 GPUs visible drains the node; no expected count, no check."""
    from slurm_heal.checks import runner

    root = tmp_path / "root"
    for i in range(7):
        (root / f"proc/driver/nvidia/gpus/0000:{i + 16:02x}:00.0").mkdir(parents=True)
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))
    # The driver is "loaded" here without nvidia-smi: the nvidia detector would report
    # check.detector_error (SPEC O1); it is off, this test is about the GPU count (D2).
    off = {"kernel_log": {"enabled": False}, "nvidia": {"enabled": False}}
    cfg = config.parse_config({"gpus": {"expected": 8}, **off})
    result = runner.run_check(cfg, node_name="n1", dry_run=True, now=T0)
    (finding,) = result.findings
    assert finding.fault == "gpu.missing" and finding.summary.startswith("7 of 8 GPUs")
    assert runner.cordons(finding)
    plain = runner.run_check(config.parse_config(off),
                             node_name="n1", dry_run=True, now=T0)
    assert plain.findings == []
    assert [s.status for s in plain.statuses if s.name == "gpus"] == ["unsupported"]


@pytest.mark.parametrize("bad", [
    {"published": "yes"},
    {"published": {"extra": "no", "drained": ""}},
    {"cursor": "file"},
    {"cursor": {"kind": "file", "inode": "12", "offset": 0}},
    {"kernel": {"gpu.xid.79|0000:3b:00": "critical"}},
    {"kernel": {"k": {"fault": "gpu.xid.79", "severity": "fatal", "summary": "s"}}},
    {"alerts": ["gpu.xid.79"]},
    {"gpu_uuids": {"0000:3b:00": 7}},
    {"services": {"slurmd.service": 3}},
    {"findings": {"mounts": [1]}},
    {"boot_id": 7},
])
def test_a_state_file_with_wrong_types_is_set_aside_and_the_check_starts_afresh(
        tmp_path: Path, bad: dict[str, object]) -> None:
    """Valid JSON whose keys hold the wrong types is as corrupt as bad JSON (house
    style 5): it is set aside, never handed to the run, which would crash every time."""
    from slurm_heal.checks import state

    (tmp_path / "state.json").write_text(json.dumps({"v": 1, "boot_id": "b1", **bad}))
    st, existed = state.load(str(tmp_path), "b1")
    assert (st, existed) == (state.empty("b1"), False)
    assert [p.name.split("-")[0] for p in tmp_path.iterdir()] == ["state.json.corrupt"]


def test_a_state_file_the_check_wrote_loads_as_it_was(tmp_path: Path) -> None:
    from slurm_heal.checks import state

    good = state.empty("b1")
    good.update(cursor={"kind": "file", "path": "/var/log/kern.log", "inode": 5, "offset": 9},
                kernel={"gpu.xid.79|0000:3b:00": {
                    "fault": "gpu.xid.79", "severity": "critical", "summary": "off the bus",
                    "first_seen": "t", "last_seen": "t", "count": 1,
                    "evidence": [{"source": "kernel_log", "text": "x", "at": None,
                                  "data": {"pci": "0000:3b:00"}}]}},
                alerts={"gpu.xid.79": "2026-01-05T00:00:00+00:00"},
                services={"slurmd.service": [[1.0, 3]]},
                published={"extra": True, "drained": "heal: x", "boot": "b1"})
    state.save(str(tmp_path), good)
    assert state.load(str(tmp_path), "b1") == (good, True)


def test_a_check_run_survives_a_state_file_with_wrong_types(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reviewer's case end to end: {"v":1,"published":"yes"} crashed every run."""
    from slurm_heal.checks import runner

    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    state_dir = root / "var/lib/slurm-heal/node"
    state_dir.mkdir(parents=True)
    (state_dir / "state.json").write_text('{"v": 1, "boot_id": "b1", "published": "yes"}')
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))
    cfg = config.parse_config({"kernel_log": {"enabled": False}})
    result = runner.run_check(cfg, node_name="n1", dry_run=True, now=T0)
    assert result.exit_code == 0 and result.findings == []


# ------------------------------------------------------------------ GPU count from GRES

GRES = """# Slurm gres.conf
AutoDetect=off
NodeName=gpu[01-16] Name=gpu Type=h100 File=/dev/nvidia[0-7]
NodeName=big01 Name=gpu File=/dev/nvidia[0-3]
NodeName=big01 Name=gpu File=/dev/nvidia[4-7]
NodeName=cpu01 Name=mps Count=100
Name=gpu Count=2 NodeName=tiny[1-2]
"""


@pytest.mark.parametrize("name,expected", [("gpu07", 8), ("big01", 8), ("tiny2", 2),
                                           ("cpu01", None), ("gpu17", None)])
def test_slurms_gres_conf_says_how_many_gpus_a_node_has(name: str,
                                                        expected: int | None) -> None:
    """SPEC D2: fewer GPUs than Slurm's GRES configures."""
    assert node.gres_gpus(GRES, name) == expected


def test_the_gpu_count_comes_from_gres_conf_when_not_configured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path))
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/gres.conf").write_text(GRES)
    for bus in ("18", "2a", "3a"):
        (tmp_path / f"proc/driver/nvidia/gpus/0000:{bus}:00.0").mkdir(parents=True)
    found, _ = runner.run_detector(config.BUILTINS[2], config.CheckConfig(), {}, "gpu07",
                                   datetime.now(timezone.utc))
    (f,) = found
    assert f.fault == "gpu.missing" and f.evidence[0].data == {"visible": 3, "expected": 8}


def test_an_enabled_fabric_manager_that_is_not_running_is_critical_a_disabled_one_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC D12 (issue 37): the fabric manager and IMEX are checked where the site enabled
    them: enabled and failed is a critical alert; installed and disabled (a GB200 compute
    tray, whose NVSwitches are managed off the node) says nothing. A stand-in systemctl
    prints `systemctl show`'s properties (written for this test)."""
    from slurm_heal.checks import runner

    root = tmp_path / "root"
    (root / "run/systemd/system").mkdir(parents=True)  # sd_booted()
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n"
        "printf 'Id=slurmd.service\\nLoadState=loaded\\nNRestarts=0\\nActiveState=active\\n"
        "UnitFileState=enabled\\n\\n'\n"
        "printf 'Id=nvidia-fabricmanager.service\\nLoadState=loaded\\nNRestarts=0\\n"
        "ActiveState=failed\\nUnitFileState=enabled\\n\\n'\n"
        "printf 'Id=nvidia-imex.service\\nLoadState=loaded\\nNRestarts=0\\n"
        "ActiveState=inactive\\nUnitFileState=disabled\\n'\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(root))
    monkeypatch.setenv("PATH", str(bin_dir))
    cfg = config.parse_config({"kernel_log": {"enabled": False}})
    result = runner.run_check(cfg, node_name="n1", dry_run=True, now=T0)
    (finding,) = result.findings
    assert (finding.fault, finding.severity.value) == ("fabric.manager.down", "critical")
    assert "nvidia-fabricmanager.service is enabled but failed" in finding.summary
    assert node.parse_unit_states("Id=nvidia-imex.service\nLoadState=not-found\n") == {}
