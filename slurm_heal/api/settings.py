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
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from slurm_heal.config import Duration, read_section
from slurm_heal.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8250
Role = Literal["viewer", "operator"]
# Names of people and robots as they appear in the audit record.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")

class ApiSettings(BaseModel):
    """Everything ``serve`` needs besides the store (found as every command finds it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bind: str = f"{DEFAULT_HOST}:{DEFAULT_PORT}"  # HOST:PORT ([v6]:PORT for IPv6)
    tokens: Path | None = None  # the token file (see auth.py); relative to the config file
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Reverse proxies (addresses or networks) whose user header is believed.
    trusted_proxies: tuple[str, ...] = ()
    proxy_user_header: str = "X-Remote-User"
    # Roles of the people the proxy names; anyone else it names gets proxy_default_role
    # ("none": refused).
    proxy_users: dict[str, Role] = Field(default_factory=dict)
    proxy_default_role: Literal["viewer", "operator", "none"] = "viewer"
    # Issue 22: the secret a trusted proxy adds to every request (a file only it and
    # serve may read); without it, the user header is never believed.
    proxy_secret_file: Path | None = None
    proxy_secret_header: str = "X-Slurm-Heal-Proxy-Secret"
    session_ttl: Duration = timedelta(hours=12)  # a console login lasts this long
    # Issue 22 item 7: the WSGI server's bounded worker pool, and how long a request may
    # go without sending (and a keep-alive connection may idle) before it is closed.
    threads: int = Field(default=16, ge=1, le=256)
    timeout: Duration = timedelta(seconds=10)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(minutes=10):
            raise ValueError("must be between 1s and 10m")
        return value

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: str) -> str:
        split_bind(value)
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network") from None
        return value

    @field_validator("proxy_user_header", "proxy_secret_header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9-]{1,64}$", value):
            raise ValueError(f"{value!r} is not an HTTP header name")
        return value

    @field_validator("proxy_users")
    @classmethod
    def _users(cls, value: dict[str, Role]) -> dict[str, Role]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"{name!r} is not a user name (letters, digits, . _ @ + -)")
        return value

    @property
    def host(self) -> str:
        return split_bind(self.bind)[0]

    @property
    def port(self) -> int:
        return split_bind(self.bind)[1]

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None and self.tls_key is not None

    def proxies(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies)


def split_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[V6]:PORT``) → (host, port); ValueError says what is wrong."""
    m = re.match(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\s]+)):(?P<port>\d{1,5})$", value)
    if not m:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
    port = int(m.group("port"))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return m.group("v6") or m.group("host"), port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def api_settings(section: dict[str, Any], source: str = "<config>",
                 base: Path | None = None) -> ApiSettings:
    """Validate the ``[api]`` section; ConfigError names the file, the key and why.
    Relative paths are taken relative to ``base`` (the config file's directory)."""
    settings = read_section(ApiSettings, section, file=source, key="api")
    if base is not None:
        fixed = {k: base / v for k in ("tokens", "tls_cert", "tls_key", "proxy_secret_file")
                 if isinstance(v := getattr(settings, k), Path) and not v.is_absolute()}
        settings = settings.model_copy(update=fixed)
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise ConfigError("tls_cert and tls_key go together", file=source, key="api.tls_cert")
    return settings


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
