"""The test suite is hermetic (issue 36 item 10): on a host where slurm-heal is installed
(``/etc/slurm-heal/heal.toml``, ``$SLURM_HEAL_CONFIG``, ``$SLURM_CONF``, a store under
``/var/lib/slurm-heal``) no test reads any of it unless it put it there itself.

The product's hook is ``$SLURM_HEAL_DEFAULT_ROOT`` (`slurm_heal.checks.paths.default`):
the built-in default locations are looked for under it. tests/conftest.py's autouse
fixture points it at an empty directory of each test's own and clears the variables.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from slurm_heal.checks import config as check_config
from slurm_heal.cli import cli
from slurm_heal.location import config_path, slurm_conf_path
from slurm_heal.store import fallback_state_dir

REPO = Path(__file__).resolve().parents[2]
BAD_TOML = "this is [ not toml\n"


def test_no_host_location_reaches_a_test(hermetic_locations: Path) -> None:
    """SPEC I4: inside a test the config, slurm.conf, store and check.toml defaults all lie
    under the test's own empty directory, and no host variable names one."""
    for name in ("SLURM_HEAL_CONFIG", "SLURM_HEAL_STATE_DIR", "SLURM_CONF"):
        assert name not in os.environ, name
    assert config_path(None) is None
    assert fallback_state_dir() == hermetic_locations / "var/lib/slurm-heal"
    assert check_config.load_config(None).source_file == ""
    try:
        slurm_conf_path()
    except Exception as exc:  # SlurmError: the default slurm.conf is not there
        assert str(hermetic_locations / "etc/slurm/slurm.conf") in str(exc)
    else:
        raise AssertionError("a slurm.conf outside the test's directory was found")


def test_default_config_under_the_default_root_is_the_one_read(hermetic_locations: Path) -> None:
    """SPEC I4: the hook moves the built-in default only: a heal.toml at the default
    place (here under the test's root) is what every command reads, as on a real host."""
    conf = hermetic_locations / "etc/slurm-heal/heal.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text(BAD_TOML)
    assert config_path(None) == conf
    result = CliRunner().invoke(cli, ["status", "--json"])
    assert result.exit_code != 0 and str(conf) in result.output, result.output


def test_an_installed_host_does_not_fail_the_unit_tests(tmp_path: Path) -> None:
    """SPEC I4, issue 36 item 10: with the host's defaults holding a broken heal.toml and
    check.toml, and $SLURM_HEAL_CONFIG / $SLURM_CONF naming broken files, the tests that
    failed on such a host (store location, CLI grammar) still pass."""
    host = tmp_path / "host"
    for name in ("etc/slurm-heal/heal.toml", "etc/slurm-heal/check.toml",
                 "etc/slurm/slurm.conf"):
        (host / name).parent.mkdir(parents=True, exist_ok=True)
        (host / name).write_text(BAD_TOML)
    env = dict(os.environ, SLURM_HEAL_DEFAULT_ROOT=str(host),
               SLURM_HEAL_CONFIG=str(host / "etc/slurm-heal/heal.toml"),
               SLURM_CONF=str(host / "etc/slurm/slurm.conf"),
               SLURM_HEAL_STATE_DIR=str(host / "var/lib/slurm-heal"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slurm",
         "tests/unit/test_admin_store_location.py", "tests/unit/test_cli_grammar.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
