"""make_provider from a [provider] config section: clear errors naming the key
(house style 7: explicit registry, duplicates rejected, broken plugins listed)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_heal.errors import ConfigError
from slurm_heal.providers import ProviderRegistry, available_providers, make_provider
from slurm_heal.providers.http import HttpProvider
from slurm_heal.providers.script import ExecProvider
from slurm_heal.slurm.memory import MemorySlurm
from slurm_heal.types import Action

DATA = Path(__file__).resolve().parent.parent / "data" / "providers"
# Building an openstack provider says first that openstacksdk is missing (the openstack
# extra needs Python >= 3.11, so a 3.10 install never has it): its keys' words need it.
NEEDS_OPENSTACK = pytest.mark.skipif(
    importlib.util.find_spec("openstack") is None,
    reason="openstacksdk is not installed (the openstack extra needs Python >= 3.11): "
           "building the provider stops at the missing package first")


def test_builtin_types_are_listed() -> None:
    listed = available_providers()
    for name in ("http", "exec", "slurm", "openstack", "simulator", "aws", "gcp", "redfish",
                 "azure", "oci"):
        assert listed[name] == "builtin"


def test_registering_a_name_twice_is_refused() -> None:
    reg = ProviderRegistry()
    reg.register("x", lambda cfg, **kw: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="'x' is already registered"):
        reg.register("x", lambda cfg, **kw: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(("cfg", "key", "problem"), [
    ({}, "provider.type", "missing"),
    ({"type": "vsphere"}, "provider.type", "unknown provider type 'vsphere'"),
    ({"type": "http"}, "provider.url", "is required"),
    ({"type": "http", "url": "ftp://x"}, "provider.url", "http:// or https://"),
    ({"type": "http", "url": "http://x", "read_timeout": "5"}, "provider.read_timeout",
     "'5' is not a duration"),  # one rule for every duration (issue 25 item 6)
    ({"type": "http", "url": "http://x", "colour": 1}, "provider.colour", "unknown key"),
    ({"type": "http", "url": "http://x", "actions": ["remove"]}, "provider.actions",
     "'remove' is not one of"),
    ({"type": "http", "url": "http://x", "token_file": "/nonexistent/t"},
     "provider.token_file", "not a readable file"),
    ({"type": "exec"}, "provider.scripts", "at least one"),
    ({"type": "exec", "scripts": {"fix": str(DATA / "ok.sh")}}, "provider.scripts.fix",
     "not an action"),
    ({"type": "exec", "scripts": {"reboot": "/nonexistent/s"}}, "provider.scripts.reboot",
     "not an executable file"),
    ({"type": "slurm"}, "provider.type", "needs a Slurm client"),
    pytest.param({"type": "openstack", "auth_url": "http://k", "username": "u",
                  "project_name": "p"},
                 "provider.password_file", "exactly one of password and password_file",
                 marks=NEEDS_OPENSTACK),
    pytest.param({"type": "openstack", "auth_url": "http://k", "username": "u",
                  "project_name": "p", "password": "x", "reboot": "gentle"},
                 "provider.reboot", 'must be "hard" or "soft"', marks=NEEDS_OPENSTACK),
    pytest.param({"type": "openstack", "auth_url": "http://k", "username": "u",
                  "project_name": "p", "password": "x", "soft_reboot_timeout": 0},
                 "provider.soft_reboot_timeout", "must be at least 1s",
                 marks=NEEDS_OPENSTACK),
    ({"type": "simulator", "url": "http://x", "duration": 1}, "provider.duration",
     "only applies to an embedded simulator"),
])
def test_bad_config_names_the_key(cfg: dict[str, object], key: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        make_provider(cfg)
    assert info.value.key == key
    assert str(info.value).startswith(key)


def test_http_and_exec_are_built_from_config(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    http = make_provider({"type": "http", "url": "http://127.0.0.1:9", "token_file": str(token),
                          "actions": ["reboot"]})
    assert isinstance(http, HttpProvider)
    assert http.supports(Action.REBOOT) and not http.supports(Action.MIGRATE)
    ex = make_provider({"type": "exec", "scripts": {"reboot": str(DATA / "ok.sh")}},
                       state_dir=tmp_path)
    assert isinstance(ex, ExecProvider)
    assert ex.submit("gpu07", Action.REBOOT, "k").status == "succeeded"
    assert (tmp_path / "exec-provider.json").is_file()


def test_slurm_provider_gets_the_slurm_client() -> None:
    from datetime import datetime, timezone

    cluster = MemorySlurm([("gpu07", "gpu")], clock=lambda: datetime.now(timezone.utc))
    p = make_provider({"type": "slurm"}, slurm=cluster)
    assert p.name == "slurm" and p.supports(Action.REBOOT)


@pytest.mark.parametrize("nextstate", ["RESUME", "resume", "DOWN"])
def test_slurm_provider_refuses_a_nextstate_that_resumes_before_the_health_check(
        nextstate: str) -> None:
    """SPEC L5: RESUME (and DOWN under ReturnToService=2) let Slurm put the node back in
    service before slurm-heal's health check."""
    from datetime import datetime, timezone

    cluster = MemorySlurm([("gpu07", "gpu")], clock=lambda: datetime.now(timezone.utc))
    with pytest.raises(ConfigError, match="SPEC L5"):
        make_provider({"type": "slurm", "nextstate": nextstate}, slurm=cluster)


def test_embedded_simulator_serves_and_stops() -> None:
    p = make_provider({"type": "simulator", "duration": 0})
    try:
        assert p.submit("gpu07", Action.MIGRATE, "k").action == Action.MIGRATE
    finally:
        p.close()  # type: ignore[attr-defined]


def test_a_broken_plugin_is_listed_as_unavailable(tmp_path: Path) -> None:
    """Entry point group slurm_heal.providers: a plugin that fails to import does not
    break the others; it is listed with its error."""
    dist = tmp_path / "brokenplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[slurm_heal.providers]\nbroken = no_such_module_xyz:factory\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from slurm_heal.providers import available_providers as a;"
            "print(a()['broken']); print(a()['http'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert out[0].startswith("unavailable: ModuleNotFoundError")
    assert "no_such_module_xyz" in out[0]
    assert out[1] == "builtin"


def test_importing_providers_does_not_import_requests() -> None:
    """The node-side check imports light modules only; requests loads with a client."""
    code = "import sys, slurm_heal.providers; print('requests' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "False"
