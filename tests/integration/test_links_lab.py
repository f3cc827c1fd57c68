"""SPEC O7 (issue 40) the whole way on the real lab: the daemon (a process, the real
Slurm lab, the provider simulator) notifies an approval through Apprise (its ``json://``
target, to a receiver on 127.0.0.1) with a signed link to `serve`'s console (another
process, ``[api] public_url``); a person follows the link, logs in, approves there; the
daemon reboots the node, and the audit says the decision came through the console. The
same link, followed again, says the proposal was decided and offers nothing.

The daemon signs with the key it writes into the state directory; `serve` checks with
the same file: the two processes agree on it, as they must in production.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import requests

from slurm_heal.models import Phase
from slurm_heal.notify.events import LINK_MARK
from tests.apiserve import XID119, Serve, make_tokens, manual_config
from tests.integration.test_notify_metrics import Receiver
from tests.lab import Lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _field(html: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert m, f"no {name} on the page"
    return m.group(1)


def test_a_person_approves_from_the_notifications_link_and_the_node_is_rebooted(
        lab_clean: Lab, tmp_path: Path) -> None:
    from slurm_heal.providers.simulator import LabHook, SimulatorServer
    from slurm_heal.slurm.cli import CliSlurm
    from tests.integration.test_daemon_lab import Heal

    lab, node = lab_clean, "gpu02"
    receiver = Receiver()
    port = _free_port()
    public = f"http://127.0.0.1:{port}"
    hook = LabHook(lab.dir, slurm=CliSlurm(slurm_conf=str(lab.conf)))
    with SimulatorServer(port=0, on_action=hook, duration=0.5) as sim:
        heal = Heal(lab, tmp_path, sim)
        heal.config.write_text(
            manual_config(heal.state_dir, lab.conf, sim.url)
            + f'public_url = "{public}"\n\n[notify]\nurls = ["{receiver.url}"]\n'
            'poll = "1s"\n')
        tokens = make_tokens(tmp_path / "tokens.toml")
        heal.baseline()
        heal._watcher.start()
        srv = Serve(["--config", str(heal.config)], tmp_path / "serve.log", env=lab.env,
                    bind=f"127.0.0.1:{port}")
        try:
            srv.start()
            heal.kernel_says(node, XID119)
            assert heal.check(node).returncode == 1
            heal.start_daemon()

            def approval() -> dict[str, Any] | None:
                return next((b for b in receiver.bodies
                             if "approval needed" in str(b.get("title"))
                             and node in str(b.get("title"))), None)

            heal.wait(approval, "the approval notification", timeout=90)
            body = approval()
            assert body is not None
            m = re.search(re.escape(LINK_MARK) + r" (\S+)", body["message"])
            assert m, body["message"]
            link = m.group(1)
            assert link.startswith(f"{public}/remediations/r-") and "?link=" in link
            rid = link.removeprefix(f"{public}/remediations/").split("?")[0]

            s = requests.Session()
            first = s.get(link, timeout=10, allow_redirects=False)
            assert first.status_code == 303 and first.headers["Location"].startswith(
                "/login?next=")  # the console's login applies
            login = s.get(public + first.headers["Location"], timeout=10)
            done = s.post(public + "/login", timeout=10, allow_redirects=False, data={
                "login_csrf": _field(login.text, "login_csrf"), "token": tokens["alice"],
                "next": _field(login.text, "next")})
            assert done.status_code == 303 and public + done.headers["Location"] == link
            page = s.get(link, timeout=10)
            assert "Opening it changed nothing" in page.text
            assert heal.store.load().inbox == ()  # looking decided nothing
            queued = s.post(f"{public}/remediations/{rid}/approve", timeout=10,
                            allow_redirects=False, data={
                                "csrf_token": _field(page.text, "csrf_token"),
                                "idempotency_key": _field(page.text, "idempotency_key"),
                                "link": _field(page.text, "link"),
                                "reason": "from the notification"})
            assert queued.status_code == 303, queued.text

            rem = heal.wait_phase(node, Phase.DONE, timeout=150)
            assert rem.id == rid and rem.approved_by == "alice"
            assert any(st.phase == "approved" and st.by == "alice" and st.why ==
                       "approved by alice via console: from the notification"
                       for st in rem.steps)
            assert list(heal.executed().values()) == [1]  # one reboot

            again = s.get(link, timeout=10)
            assert "already decided" in again.text and "Nothing was done" in again.text
            assert 'name="link"' not in again.text
        finally:
            srv.stop()
            heal.close()
            receiver.close()
