"""The ``[api]`` section of the config file: how `slurm-heal serve` listens and who may
use it (SPEC O5). Options of ``serve`` override it.

Bound to 127.0.0.1 unless configured. A bind to any other address is refused unless the
server speaks TLS itself (``tls_cert`` + ``tls_key``), proxies or not: bearer tokens and
a proxy's secret must never cross a network in clear text. A reverse proxy
(``trusted_proxies``) proves itself with a shared secret it adds to every request
(``proxy_secret_file``, sent in ``proxy_secret_header``): an address alone proves nothing
when any local process can connect from 127.0.0.1 (issue 22).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from slurm_heal.config import read_section
from slurm_heal.errors import ConfigError
from slurm_heal.sections import DEFAULT_HOST as DEFAULT_HOST  # their home (issue 21)
from slurm_heal.sections import DEFAULT_PORT as DEFAULT_PORT
from slurm_heal.sections import NAME as NAME
from slurm_heal.sections import ApiSettings as ApiSettings
from slurm_heal.sections import Role as Role
from slurm_heal.sections import split_bind as split_bind


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def api_settings(section: ApiSettings | dict[str, Any], source: str = "<config>",
                 base: Path | None = None) -> ApiSettings:
    """Validate the ``[api]`` section; ConfigError names the file, the key and why.
    Relative paths are taken relative to ``base`` (the config file's directory)."""
    settings = read_section(ApiSettings, section, file=source, key="api")
    if base is not None:
        fixed = {k: base / v for k in ("tokens", "tls_cert", "tls_key", "proxy_secret_file",
                                       "link_secret_file")
                 if isinstance(v := getattr(settings, k), Path) and not v.is_absolute()}
        settings = settings.model_copy(update=fixed)
    return settings  # (tls_cert and tls_key go together: the section checks that itself)


def check_listen(settings: ApiSettings) -> None:
    """Refuse what must not start: a non-loopback bind in clear text (proxies or not), a
    trusted proxy without a secret to prove itself, or no way to authenticate anyone
    (ConfigError with what to do)."""
    host = settings.host
    if not is_loopback(host) and not settings.tls:
        raise ConfigError(
            f"refusing to listen on {settings.bind} without TLS: bearer tokens, session "
            "cookies and a proxy's secret would cross the network in clear text. Set [api] "
            "tls_cert and tls_key (--tls-cert/--tls-key), or bind to 127.0.0.1 behind a "
            "reverse proxy on this host", key="api.bind")
    if settings.trusted_proxies and settings.proxy_secret_file is None:
        raise ConfigError(
            "a trusted proxy must prove itself: any process on this host can connect from "
            "127.0.0.1 and send the user header. Set [api] proxy_secret_file "
            "(--proxy-secret-file) to a file holding a secret the proxy adds to every "
            f"request as {settings.proxy_secret_header} (docs/api.md)",
            key="api.proxy_secret_file")
    if settings.tokens is None and not settings.trusted_proxies:
        raise ConfigError(
            "no way to tell who is asking: set [api] tokens to a token file (--tokens; "
            "`slurm-heal api-token NAME --file FILE` makes one) or [api] trusted_proxies",
            key="api.tokens")
