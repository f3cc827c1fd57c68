"""One stage of config validation (issue 33): each section checks itself completely, so
the policy loader (`load_policy`, what `status`, `plan`, `serve` and the daemon read the
file with) refuses what `slurm-heal policy check` refuses, in the same words and with
the same key. Before, the loader passed a route's unknown event kind, a URL Apprise
cannot send to, half a TLS pair and a bad ticket sink, which only the check's
subsystem readers refused.

The provider's table too (issue 33): the loader reads it as the check's dry construction
of the provider does (its type, its own model, what spans its keys), so the check builds
the provider here and still says nothing the loader did not. Left to the check alone, by
design: what only the machine tells, whether the state directory is usable, a provider's
script runs, its secret file or clouds.yaml reads, its SDK or a third party's type is
installed (a type no built-in knows loads: test_typed_sections).
"""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal.config import Policy, load_policy
from slurm_heal.configcheck import check_config
from slurm_heal.errors import ConfigError, HealError
from slurm_heal.sections import ProviderSection, Section

HTTP = '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'

BAD = [
    ("notify.routes[0].kinds", "unknown event kind 'alerts'",
     '[notify]\n[[notify.routes]]\nurls = ["json://127.0.0.1:1/x"]\nkinds = ["alerts"]\n'),
    ("notify.urls", "Apprise does not understand this URL: (not a URL)",
     '[notify]\nurls = ["notaurl"]\n'),
    ("notify.routes[1].urls", "Apprise does not understand this URL",
     '[notify]\n[[notify.routes]]\nurls = ["json://127.0.0.1:1/x"]\n'
     '[[notify.routes]]\nurls = ["nope://x"]\n'),
    ("api.tls_cert", "tls_cert and tls_key go together", '[api]\ntls_cert = "c.pem"\n'),
    ("validation.tickets[0].kind", "unknown ticket sink kind 'pager'",
     '[validation]\ntickets = [{kind = "pager"}]\n'),
    ("validation.tickets[0].token", "a token is never written in the file",
     '[validation]\ntickets = [{kind = "github", repo = "a/b", token = "s3cret"}]\n'),
    ("validation.tickets[0].repo", "String should match pattern",
     '[validation]\ntickets = [{kind = "github", repo = "not a repo"}]\n'),
    ("validation.tickets[0].title", "title does not compile",
     '[validation]\ntickets = [{kind = "github", repo = "a/b", title = "{{ x"}]\n'),
    ("validation.tickets[1].colour", "unknown key",
     '[validation]\ntickets = [{kind = "directory", path = "/t"}, '
     '{kind = "directory", path = "/t", colour = "red"}]\n'),
    ("controller.hot_retention", "must be a positive duration",
     '[controller]\nhot_retention = "0s"\n'),
    # The provider's own table (issue 33): each written with its own [provider].
    ("provider.type", "missing or not a string; one of: ", '[provider]\nurl = "http://x"\n'),
    ("provider.state_dir", "must be a path string",
     '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\nstate_dir = 3\n'),
    ("provider.url", "is required", '[provider]\ntype = "http"\n'),
    ("provider.read_timeout", "must be at least",
     '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\nread_timeout = "0s"\n'),
    ("provider.colour", "unknown key",
     '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\ncolour = "red"\n'),
    ("provider.actions", "'fly' is not one of",
     '[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\nactions = ["fly"]\n'),
    ("provider.nextstate", "would let Slurm return the node to service",
     '[provider]\ntype = "slurm"\nnextstate = "resume"\n'),
    ("provider.duration", "only applies to an embedded simulator (no url)",
     '[provider]\ntype = "simulator"\nurl = "http://127.0.0.1:9"\nduration = "2s"\n'),
    ("provider.scripts.fly", "not an action; one of",
     '[provider]\ntype = "exec"\nscripts = {fly = "/bin/true"}\n'),
    ("provider.aws_secret_access_key", "AWS credentials never go in this file",
     '[provider]\ntype = "aws"\naws_secret_access_key = "x"\n'),
    ("provider.password", "never in this file: use password_file",
     '[provider]\ntype = "redfish"\npassword = "x"\n'),
    ("provider.fault_behavior", "is not a reportHostAsFaulty behavior",
     '[provider]\ntype = "gcp"\nproject = "p"\nzone = "z"\nfault_behavior = "SOON"\n'),
    ("provider.reboot", "must be \"hard\" or \"soft\"",
     '[provider]\ntype = "openstack"\nreboot = "warm"\n'),
]


@pytest.mark.parametrize(("key", "words", "toml"), BAD, ids=[b[0] for b in BAD])
def test_the_loader_refuses_what_the_check_refuses_in_the_same_words(
        tmp_path: Path, key: str, words: str, toml: str) -> None:
    f = tmp_path / "heal.toml"
    f.write_text(toml if "[provider]" in toml else toml + HTTP)
    with pytest.raises(ConfigError) as loaded:
        load_policy(f)
    with pytest.raises(ConfigError) as checked:
        check_config(f)  # the provider built, dry, as the daemon would
    assert str(loaded.value) == str(checked.value)
    assert str(loaded.value).startswith(f"{f}: {key}: "), str(loaded.value)
    assert words in str(loaded.value)


def test_good_sections_still_load(tmp_path: Path) -> None:
    f = tmp_path / "heal.toml"
    f.write_text('[notify]\n[[notify.routes]]\nurls = ["json://127.0.0.1:1/x"]\n'
                 'kinds = ["alert", "breaker"]\n'
                 '[api]\ntls_cert = "c.pem"\ntls_key = "k.pem"\n'
                 '[validation]\ntickets = [{kind = "github", repo = "acme/hw"}, '
                 '{kind = "directory", path = "/t"}]\n'
                 '[controller]\nhot_retention = "21d"\n' + HTTP)
    policy = load_policy(f)
    assert policy.notify.routes[0].kinds == ["alert", "breaker"]
    assert policy.controller.hot_retention == timedelta(days=21)
    assert check_config(f).policy == policy


def test_every_section_has_the_one_base() -> None:
    """House style 13: one section base (frozen, no unknown keys); the provider's
    envelope aside (its table is the provider's own model's)."""
    for name, info in Policy.model_fields.items():
        kind = info.annotation
        models = [t for t in getattr(kind, "__args__", (kind,)) if isinstance(t, type)]
        for model in models:
            if model is ProviderSection or not hasattr(model, "model_fields"):
                continue
            assert issubclass(model, Section), f"{name}: {model.__name__}"


# Whether the SDK is installed is the check's alone (above): without openstacksdk (the
# openstack extra, Python >= 3.11) building the provider stops at the missing package.
NEEDS_OPENSTACK = pytest.mark.skipif(
    importlib.util.find_spec("openstack") is None,
    reason="openstacksdk is not installed (the openstack extra needs Python >= 3.11): "
           "building the provider stops at the missing package first")
PROVIDER_BAD = [pytest.param(*b, id=b[0],
                             marks=[NEEDS_OPENSTACK] if 'type = "openstack"' in b[2] else [])
                for b in BAD if "[provider]" in b[2]]


@pytest.mark.parametrize(("key", "words", "toml"), PROVIDER_BAD)
def test_the_loader_says_what_building_the_provider_says(
        tmp_path: Path, key: str, words: str, toml: str) -> None:
    """The loader's words for a provider's table are the construction's own (the one
    place each is said, providers/settings.py), not a second reading of the table."""
    from slurm_heal.config import tomllib  # tomli on 3.10, as the package reads TOML
    from slurm_heal.configcheck import dry_provider

    f = tmp_path / "heal.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError) as loaded:
        load_policy(f)
    with pytest.raises(HealError) as built:  # the construction alone, no loader before it
        dry_provider(tomllib.loads(toml)["provider"], str(f))
    assert str(built.value) == str(loaded.value)


def test_every_built_in_type_has_the_table_the_loader_reads() -> None:
    """A type the registry builds in is a type the loader reads the table of (a new one
    left out would load unread, as a third party's does)."""
    from slurm_heal.providerconf import BUILTIN, ProviderSettings
    from slurm_heal.providers import REGISTRY

    assert {n for n, origin in REGISTRY.available().items() if origin == "builtin"} \
        == set(BUILTIN)
    assert all(issubclass(m, ProviderSettings) for m in BUILTIN.values())
