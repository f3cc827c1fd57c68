"""Issue 34 item 2 (SPEC O5): no web page can write through a person's proxy login.

The documented setup behind a reverse proxy: the proxy authenticates the person (HTTP
Basic, SSO) and adds the user header and its secret to every request it forwards. The
browser sends the person's login with every request to the proxy, a request another
site's page makes it send included. Here, in this process: `serve`'s production WSGI
server, a small forwarding proxy on 127.0.0.1 that adds the headers for "bob" (an
operator) as nginx would after its login, and another site (a page on `localhost`, a
different origin) with the forms a cross-site attacker would use. Headless Chromium
(JavaScript off) opens the other site's page and a person clicks its buttons; nothing
must be queued in the store's inbox. Written for the test, not captured from a site.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import requests

from slurm_heal.api.app import ApiApp
from slurm_heal.api.settings import ApiSettings
from slurm_heal.commands.serve import wsgi_server
from slurm_heal.location import Location
from slurm_heal.models import Pause, State
from slurm_heal.store import Store
from tests.browser.test_console_lab import Browser, browser_ok

pytestmark = [pytest.mark.slow, pytest.mark.browser]
__all__ = ["browser_ok"]  # the fixture, imported for its skip

SECRET = "the-proxy-alone-knows-this-secret"


def _proxy(upstream: tuple[str, int]) -> http.server.ThreadingHTTPServer:
    """A reverse proxy after its login: every request forwarded with the person's name
    and the proxy's secret, the Host the browser asked for passed on (nginx:
    `proxy_set_header Host $host`), the answer passed back."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "keep-alive")}
            headers.update({"X-Remote-User": "bob", "X-Slurm-Heal-Proxy-Secret": SECRET})
            conn = http.client.HTTPConnection(*upstream, timeout=30)
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = _forward

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _other_site(target: str) -> http.server.ThreadingHTTPServer:
    """Another site's page: forms that post to the proxy as a cross-site attacker would
    (no JavaScript needed: a person clicks)."""
    page = f"""<!doctype html><html><body>
<form id="plain" method="post" enctype="text/plain" action="{target}/api/v1/unpause">
  <button type="submit">win a prize</button></form>
<form id="urlenc" method="post" action="{target}/api/v1/pause">
  <input type="hidden" name="reason" value="pwned"><button type="submit">win</button></form>
<form id="console" method="post" action="{target}/controls/unpause">
  <button type="submit">win again</button></form>
</body></html>""".encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _serve_in_thread(server: Any) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def site(browser_ok: None, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Browser, Store, str]]:
    root = tmp_path_factory.mktemp("console-csrf")
    state_dir = root / "state"
    state_dir.mkdir()
    now = datetime.now(timezone.utc)
    store = Store(state_dir)
    with store.transaction() as txn:  # paused by a person: unpause is the attacker's prize
        txn.state = State(paused=True, pause=Pause(paused=True, by="alice", at=now,
                                                   reason="maintenance"))
    (state_dir / "heartbeat").write_text(now.isoformat())
    secret = root / "proxy-secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    settings = ApiSettings(bind="127.0.0.1:0", trusted_proxies=["127.0.0.1"],
                           proxy_secret_file=Path(secret), proxy_users={"bob": "operator"})
    app = ApiApp(settings, Location(state_dir=state_dir, source="test"), slurm=None)
    server = wsgi_server(settings, app)
    server.prepare()
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    proxy = _proxy((server.bind_addr[0], server.bind_addr[1]))
    _serve_in_thread(proxy)
    target = f"http://127.0.0.1:{proxy.server_address[1]}"
    other = _other_site(target)
    _serve_in_thread(other)
    # `localhost` is another origin (and another site) than 127.0.0.1
    b = Browser(f"http://localhost:{other.server_address[1]}")
    try:
        yield b, store, target
    finally:
        b.close()
        for s in (other, proxy):
            s.shutdown()
            s.server_close()
        server.stop()
        serving.join(timeout=10)


@pytest.mark.parametrize("form", ["plain", "urlenc", "console"])
def test_another_sites_form_never_writes_through_the_persons_proxy_login(
        site: tuple[Browser, Store, str], form: str) -> None:
    """A person logged in at the proxy opens another site's page and clicks: an empty
    text/plain form (what the attack on aacb2a0 sent, 202 there), a form with a field, a
    console form without its token. Each is refused (403) and the inbox stays empty."""
    b, store, _target = site
    b.open("/")
    b.submit(f"#{form} button")
    assert "403" in b.driver.page_source or "refused" in b.text(), b.text()
    assert store.load().inbox == (), [c.kind for c in store.load().inbox]
    assert store.load().paused


def test_the_proxy_login_still_writes_from_a_client_that_sends_json(
        site: tuple[Browser, Store, str]) -> None:
    """What the API's own clients send through the proxy still works (a JSON body), and a
    body of another type is 415 with what to send."""
    _b, store, target = site
    got = requests.post(target + "/api/v1/unpause", data="", timeout=10,
                        headers={"Content-Type": "text/plain"})
    assert got.status_code == 415 and "application/json" in got.json()["detail"]
    got = requests.post(target + "/api/v1/unpause", json={"reason": "done"}, timeout=10)
    assert got.status_code == 202, got.text
    [cmd] = store.load().inbox
    assert cmd.by == "bob" and cmd.kind == "unpause"
