"""One stage of config validation (issue 33): each section checks itself completely, so
the policy loader (`load_policy`, what `status`, `plan`, `serve` and the daemon read the
file with) refuses what `slurm-heal policy check` refuses, in the same words and with
the same key. Before, the loader passed a route's unknown event kind, a URL Apprise
cannot send to, half a TLS pair and a bad ticket sink, which only the check's
subsystem readers refused.

Left to the check alone, by design: the provider's own table (the provider is built,
dry, to read it) and whether the state directory is usable (the machine, not the file).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slurm_heal.config import Policy, load_policy
from slurm_heal.configcheck import check_config
from slurm_heal.errors import ConfigError
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
]


@pytest.mark.parametrize(("key", "words", "toml"), BAD, ids=[b[0] for b in BAD])
def test_the_loader_refuses_what_the_check_refuses_in_the_same_words(
        tmp_path: Path, key: str, words: str, toml: str) -> None:
    f = tmp_path / "heal.toml"
    f.write_text(toml + HTTP)
    with pytest.raises(ConfigError) as loaded:
        load_policy(f)
    with pytest.raises(ConfigError) as checked:
        check_config(f, build_provider=False)
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
    assert check_config(f, build_provider=False).policy == policy


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
