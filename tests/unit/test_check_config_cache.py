"""check.toml parsed once (issue 26): the parsed document is kept in the node's state dir
with the file's text, so a run whose check.toml did not change skips the TOML parser; a
changed file (even one byte, the same size) is parsed again, a bad one is never kept,
and what a run sees is the same either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_heal.checks import config, paths
from slurm_heal.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path))
    Path(paths.host_path(paths.STATE_DIR)).mkdir(parents=True)
    conf = Path(paths.host_path(paths.CONFIG_FILE))
    conf.parent.mkdir(parents=True)
    return conf


def _cache() -> dict[str, object]:
    data: dict[str, object] = json.loads(
        Path(paths.host_path(paths.STATE_DIR), config.CACHE).read_text())
    return data


def test_an_unchanged_file_is_read_from_the_cache_with_the_same_result(node: Path) -> None:
    node.write_text('[mounts]\nrw = ["/", "/scratch"]\n[kernel_log]\nhold = "30m"\n')
    first = config.load_config(None)
    assert _cache()["data"] == {"mounts": {"rw": ["/", "/scratch"]},
                                "kernel_log": {"hold": "30m"}}
    assert config.load_config(None) == first
    assert first.mounts.rw == ("/", "/scratch") and first.kernel_log.hold == 1800.0
    # a run in a fresh interpreter with the file unchanged never imports the TOML parser
    code = ("import sys\nfrom slurm_heal.checks import config\nc = config.load_config(None)\n"
            "print(c.mounts.rw, 'tomllib' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=True, timeout=60)
    assert res.stdout.split("\n")[0] == "('/', '/scratch') False"


def test_a_changed_file_of_the_same_size_is_parsed_again(node: Path) -> None:
    node.write_text('[mounts]\nrw = ["/a"]\n')
    assert config.load_config(None).mounts.rw == ("/a",)
    node.write_text('[mounts]\nrw = ["/b"]\n')  # same size, maybe the same mtime tick
    assert config.load_config(None).mounts.rw == ("/b",)
    assert _cache()["text"] == '[mounts]\nrw = ["/b"]\n'


def test_a_bad_file_is_never_kept_and_says_its_error_every_run(node: Path) -> None:
    node.write_text('[mounts]\nrw = ["/a"]\n')
    config.load_config(None)
    node.write_text("[mounts]\nrw = 5\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"mounts\.rw.*expected list of strings"):
            config.load_config(None)
    assert _cache()["text"] == '[mounts]\nrw = ["/a"]\n'
    node.write_text("[mounts\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="not valid TOML"):
            config.load_config(None)


def test_a_value_json_cannot_hold_is_not_kept_and_still_judged(node: Path) -> None:
    node.write_text("[mounts]\nrw = 1979-05-27\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"mounts\.rw"):
            config.load_config(None)
    assert not Path(paths.host_path(paths.STATE_DIR), config.CACHE).exists()


def test_without_the_state_dir_nothing_is_kept(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_HEAL_ROOT", str(tmp_path))
    conf = tmp_path / "check.toml"
    conf.write_text('[mounts]\nrw = ["/a"]\n')
    assert config.load_config(str(conf)).mounts.rw == ("/a",)
    assert not Path(paths.host_path(paths.STATE_DIR)).exists()


@pytest.mark.parametrize(("text", "says"), [
    ('[network]\nendpoints = ["storage:' + "9" * 5000 + '"]\n', r"network\.endpoints.*is not HOST:PORT"),
    ('[network]\nendpoints = ["storage:²"]\n', r"network\.endpoints.*is not HOST:PORT"),
    ("[infiniband]\nports = " + "9" * 5000 + "\n", r"ports: line 2: the number is 5000"),
])
def test_a_port_of_5000_digits_is_a_config_error_naming_the_key(
        node: Path, text: str, says: str) -> None:
    """Issue 34 item 6 (SPEC I1): never int()'s ValueError (exit 1, "Exceeds the limit
    (4300 digits)"): a ConfigError naming the file and the key, the check's exit 2."""
    node.write_text(text)
    with pytest.raises(ConfigError, match=says):
        config.load_config(None)


def test_the_policy_and_the_token_file_name_a_number_too_large_for_python(
        tmp_path: Path) -> None:
    """Issue 34 item 6: heal.toml and the API's token file, the same way."""
    from slurm_heal.api.auth import parse_tokens
    from slurm_heal.config import load_policy

    heal = tmp_path / "heal.toml"
    heal.write_text("[controller]\ninterval = " + "1" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"heal\.toml: interval: line 2: the number"):
        load_policy(str(heal))
    with pytest.raises(ConfigError, match=r"tokens: x: line 1: the number"):
        parse_tokens("x = " + "1" * 5000, "tokens")
