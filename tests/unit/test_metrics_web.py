"""TLS and basic auth on /metrics from a web config file as Prometheus' exporters take it
(issue 38, SPEC O4): real HTTPS scrapes of the daemon's registry served by
`Metrics.serve`, certificates made by openssl, passwords as bcrypt hashes."""

from __future__ import annotations

import base64
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from slurm_heal.configcheck import check_config
from slurm_heal.errors import ConfigError
from slurm_heal.metrics import Metrics
from slurm_heal.webconfig import load
from tests.emulators import self_signed

PASSWORD = "s3cret-scrape"
# what `htpasswd -nBC 4 prometheus` writes ($2y$, as Prometheus' docs show); cost 4: quick
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


def _web(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


@pytest.fixture
def served(tmp_path: Path, certs: tuple[Path, Path]) -> Iterator[tuple[int, Path]]:
    cert, key = certs
    web = load(_web(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                              f"basic_auth_users:\n  prometheus: {HASH}\n"))
    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0, web)
    assert metrics.tls
    yield port, cert
    metrics.close()


def _get(url: str, cafile: Path | None = None, auth: tuple[str, str] | None = None,
         cert: tuple[Path, Path] | None = None) -> tuple[int, bytes, dict[str, str]]:
    ctx = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    if ctx is not None and cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_a_scrape_over_tls_with_the_user_s_password_gets_the_metrics(
        served: tuple[int, Path]) -> None:
    port, cert = served
    url = f"https://127.0.0.1:{port}/metrics"
    status, body, _ = _get(url, cert, ("prometheus", PASSWORD))
    assert status == 200 and b"slurm_heal_build_info{" in body
    # again: the right password is remembered, not re-hashed (same answer)
    assert _get(url, cert, ("prometheus", PASSWORD))[0] == 200


@pytest.mark.parametrize("auth", [None, ("prometheus", "wrong"), ("nobody", PASSWORD),
                                  ("prometheus", "")])
def test_no_or_a_wrong_password_is_401_with_a_challenge(
        served: tuple[int, Path], auth: tuple[str, str] | None) -> None:
    port, cert = served
    status, body, headers = _get(f"https://127.0.0.1:{port}/metrics", cert, auth)
    assert status == 401 and b"slurm_heal" not in body
    assert headers["WWW-Authenticate"].startswith('Basic realm="slurm-heal metrics"')


def test_plain_http_to_the_tls_port_gets_no_metrics(served: tuple[int, Path]) -> None:
    port, _ = served
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()


def test_a_client_that_connects_and_says_nothing_holds_no_scrape_up(
        served: tuple[int, Path]) -> None:
    """The TLS handshake is each connection's own thread's: a silent client (no
    ClientHello) does not stop the accept loop (the scrape's timeout, 5 s, is shorter
    than the 10 s a silent connection is given)."""
    port, cert = served
    with socket.create_connection(("127.0.0.1", port)):
        assert _get(f"https://127.0.0.1:{port}/metrics", cert, ("prometheus", PASSWORD))[0] \
            == 200


def test_client_certificates_when_the_file_requires_them(
        tmp_path: Path, certs: tuple[Path, Path]) -> None:
    cert, key = certs
    client_dir = tmp_path / "client"
    client_dir.mkdir()
    client = self_signed(client_dir)
    web = load(_web(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                              "  client_auth_type: RequireAndVerifyClientCert\n"
                              f"  client_ca_file: {client[0]}\n  min_version: TLS13\n"))
    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0, web)
    try:
        url = f"https://127.0.0.1:{port}/metrics"
        assert _get(url, cert, cert=client)[0] == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _get(url, cert)
    finally:
        metrics.close()


def test_without_a_web_config_metrics_are_plain_http() -> None:
    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0)
    try:
        assert not metrics.tls
        assert b"slurm_heal_leader" in _get(f"http://127.0.0.1:{port}/metrics")[1]
    finally:
        metrics.close()


@pytest.mark.parametrize(("text", "words"), [
    ("http_server_config:\n  http2: false\n", "http_server_config is not served"),
    ("basic_auth_users:\n  prometheus: hunter2\n", "must be a bcrypt hash"),
    ("tls_server_config:\n  cert_file: {cert}\n", "needs cert_file and key_file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: /nonexistent/k\n",
     "key_file: /nonexistent/k is not a readable file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
     "  client_auth_type: RequestClientCert\n", "client_auth_type 'RequestClientCert'"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
     "min_version 'TLS14'"),
    ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  cipher_suites: []\n",
     "cipher_suites is not served"),
    ("tls_server_config:\n  cert_file: {key}\n  key_file: {cert}\n", "cannot be loaded"),
    ("- a list\n", "a web config is a mapping"),
    ("a: [\n", "not YAML"),
])
def test_what_the_web_config_asks_and_is_not_given_is_refused_by_name(
        tmp_path: Path, certs: tuple[Path, Path], text: str, words: str) -> None:
    cert, key = certs
    with pytest.raises(ConfigError) as err:
        load(_web(tmp_path, text.format(cert=cert, key=key)))
    assert words in str(err.value) and "web.yml" in str(err.value)


def test_policy_check_reads_the_web_config_beside_the_config(
        tmp_path: Path, certs: tuple[Path, Path]) -> None:
    cert, key = certs
    config = tmp_path / "heal.toml"
    config.write_text('[provider]\ntype = "http"\nurl = "http://127.0.0.1:9"\n'
                      '[metrics]\nenabled = true\nweb_config = "web.yml"\n')
    _web(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    check_config(config)
    _web(tmp_path, "basic_auth_users:\n  prometheus: plaintext\n")
    with pytest.raises(ConfigError, match="basic_auth_users.prometheus"):
        check_config(config)
    (tmp_path / "web.yml").unlink()
    with pytest.raises(ConfigError, match="cannot read the metrics web config"):
        check_config(config)
