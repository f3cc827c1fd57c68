"""Each provider owns a pydantic settings model for its ``[provider]`` section, read
through config.read_section (issue 21; docs/providers.md): a problem names the file,
the key and why; a third-party provider comes in through the entry point group
``slurm_heal.providers`` and validates its section the same way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_heal.configcheck import dry_provider
from slurm_heal.errors import ConfigError
from slurm_heal.providers.http import HttpSettings, SimulatorSettings
from slurm_heal.providers.settings import read_provider_section
from slurm_heal.types import Action


@pytest.mark.parametrize(("cfg", "message"), [
    ({"type": "http"}, "policy.toml: provider.url: is required"),
    ({"type": "http", "url": "http://x", "attempts": "3"},
     "policy.toml: provider.attempts: must be an integer >= 1, not '3'"),
    ({"type": "http", "url": "http://x", "attempts": True},
     "policy.toml: provider.attempts: must be an integer >= 1, not True"),
    ({"type": "http", "url": "http://x", "read_timeout": 0},
     "policy.toml: provider.read_timeout: must be at least 0.001s, not 0"),
    ({"type": "http", "url": "http://x", "backoff": "soon"},
     "policy.toml: provider.backoff: 'soon' is not a duration "
     '(use e.g. "30s", "30m", "2h", "7d")'),
    ({"type": "http", "url": "http://x", "token_file": ""},
     "policy.toml: provider.token_file: must be a non-empty string, not ''"),
    ({"type": "http", "url": "http://x", "actions": "reboot"},
     "policy.toml: provider.actions: must be a list of actions"),
    ({"type": "http", "url": "http://x", "colour": 1},
     "policy.toml: provider.colour: unknown key (Extra inputs are not permitted; "
     "docs/providers.md lists the keys)"),
    ({"type": "gcp", "project": "p"}, "policy.toml: provider.zone: is required"),
    ({"type": "aws", "instances": {"gpu01": 7}},
     'policy.toml: provider.instances: must be a table of name = "string"'),
    ({"type": "openstack", "live": "yes"},
     "policy.toml: provider.live: must be true or false, not 'yes'"),
    ({"type": "redfish", "bmcs": {"gpu01": {"address": "https://b"}},
      "reboot_types": ["Kick"]},
     "policy.toml: provider.reboot_types: must be a list of ForceRestart, "
     "GracefulRestart, PowerCycle"),
])
def test_a_bad_provider_key_is_named_with_the_file_and_why(
        cfg: dict[str, object], message: str) -> None:
    """What `slurm-heal check-config` says (the daemon reads the section the same way);
    the cloud types are read before their SDK is looked for."""
    from slurm_heal.providers import aws, gcp, openstack, redfish

    models = {"http": HttpSettings, "gcp": gcp.GcpSettings, "aws": aws.AwsSettings,
              "openstack": openstack.OpenStackSettings, "redfish": redfish.RedfishSettings}
    with pytest.raises(ConfigError) as info:
        read_provider_section(models[str(cfg["type"])], cfg, file="policy.toml")
    assert str(info.value) == message
    if cfg["type"] == "http":  # and the same through the check the operator runs
        with pytest.raises(ConfigError) as again:
            dry_provider(cfg, "policy.toml")
        assert str(again.value) == message


def test_durations_take_units_or_bare_seconds_and_the_defaults_stand() -> None:
    s = read_provider_section(HttpSettings, {"type": "http", "url": "https://p",
                                             "read_timeout": "2m", "connect_timeout": 4,
                                             "actions": ["reboot"]})
    assert (s.read_timeout, s.connect_timeout, s.attempts, s.backoff) == (120.0, 4.0, 5, 0.5)
    assert s.actions == frozenset({Action.REBOOT})
    sim = read_provider_section(SimulatorSettings, {"type": "simulator"})
    assert (sim.url, sim.port, sim.duration) == (None, 0, 1.0)


def test_a_third_party_provider_is_loaded_from_its_entry_point_with_its_own_settings(
        tmp_path: Path) -> None:
    """docs/providers.md "Third-party providers": a tiny installed distribution (its
    dist-info on sys.path) registers ``tiny``; make_provider builds it from its section,
    validated by the plugin's own ProviderSettings model."""
    (tmp_path / "tinyplug.py").write_text(textwrap.dedent('''
        from slurm_heal.providers.base import Operation
        from slurm_heal.providers.settings import ProviderSettings, Text, read_provider_section
        from slurm_heal.types import Action

        class TinySettings(ProviderSettings):
            greeting: Text = "hello"

        class Tiny:
            name = "tiny"

            def __init__(self, settings):
                self.settings = settings

            def supports(self, action):
                return action is Action.REBOOT

            def submit(self, node, action, key):
                return Operation(id="op-" + key, key=key, node=node, action=action,
                                 status="succeeded", detail=self.settings.greeting)

            def status(self, key):
                return None

        def make(cfg, *, slurm, state_dir):
            return Tiny(read_provider_section(TinySettings, cfg))
    '''))
    dist = tmp_path / "tinyplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[slurm_heal.providers]\ntiny = tinyplug:make\n")
    code = textwrap.dedent('''
        import json, sys
        sys.path.insert(0, sys.argv[1])
        from slurm_heal.errors import ConfigError
        from slurm_heal.providers import available_providers, make_provider
        from slurm_heal.types import Action
        p = make_provider({"type": "tiny", "greeting": "hi there"})
        op = p.submit("gpu01", Action.REBOOT, "k1")
        try:
            make_provider({"type": "tiny", "greting": "typo"})
            bad = ""
        except ConfigError as exc:
            bad = str(exc)
        print(json.dumps({"origin": available_providers()["tiny"], "name": p.name,
                          "detail": op.detail, "reboot": p.supports(Action.REBOOT),
                          "bad": bad}))
    ''')
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    got = json.loads(out[-1])
    assert got == {"origin": "plugin tinyplug:make", "name": "tiny", "detail": "hi there",
                   "reboot": True,
                   "bad": "provider.greting: unknown key (Extra inputs are not permitted; "
                          "docs/providers.md lists the keys)"}
