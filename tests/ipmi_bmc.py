"""A BMC that speaks IPMI 2.0 over LAN (RMCP+) on 127.0.0.1, for the IPMI provider tests:
pyghmi's own BMC server (`pyghmi.ipmi.bmc.Bmc`), run as its own process::

    python -m tests.ipmi_bmc --port P --log FILE --user admin --password secret \
        [--on-reset ARGV_JSON] [--off-delay S] [--refuse-reset]

Every chassis control command it carries out is appended to FILE as one line (``on``,
``off``, ``reset``, ``cycle``, ``shutdown``); ``--on-reset`` runs a command (a JSON argv
list, no shell) after a reset or power on (the lab tests reboot a lab node with it);
``--off-delay`` makes power off take that long, as on real hardware;
``--refuse-reset`` answers a reset with completion code 0xCC (invalid data field), as a
BMC that does not implement it.

Why RAKP-HMAC-SHA1 only: pyghmi's client (1.6) opens a session asking for cipher suite
17 (RAKP-HMAC-SHA256) and falls back to suite 3 (SHA-1) only when the BMC refuses that
with an RMCP+ status code, as real SHA-1-only BMCs do. pyghmi's server instead accepts
any request and answers with SHA-1 algorithms, which the client does not check: it then
computes a SHA-256 RAKP 2 hash, finds 20 bytes where it expects 32 and fails the login
(``struct.error: pack expected 32 items``). So this BMC answers a non-SHA-1 request with
status 0x11 (invalid authentication algorithm), and the client's own fallback logs in.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any

import pyghmi.ipmi.bmc as bmc
from pyghmi.ipmi.private import serversession

RMCP_INVALID_AUTH_ALGORITHM = 0x11
RAKP_HMAC_SHA1 = 1


class Sha1OnlySession(serversession.ServerSession):  # type: ignore[misc]
    """A server session that refuses every authentication algorithm but RAKP-HMAC-SHA1."""

    def create_open_session_response(self, request: bytearray) -> bytearray:
        # RMCP+ Open Session Request: tag, privilege, reserved(2), console session id(4),
        # then the authentication payload: type, reserved(2), length, algorithm, ...
        if request[12] != RAKP_HMAC_SHA1:
            self.clientsessionid = request[4:8]
            return (bytearray([request[0], RMCP_INVALID_AUTH_ALGORITHM, 0, 0])
                    + request[4:8] + bytearray(4))
        response: bytearray = super().create_open_session_response(request)
        return response


class LabBmc(bmc.Bmc):  # type: ignore[misc]
    """A BMC for one machine, powered on."""

    def __init__(self, users: dict[str, str], port: int, log: str,
                 on_reset: list[str] | None, off_delay: float, refuse_reset: bool) -> None:
        super().__init__(users, port=port, address="127.0.0.1")
        self.state, self.log, self.on_reset, self.off_delay = "on", log, on_reset, off_delay
        self.refuse_reset = refuse_reset

    def sessionless_data(self, data: Any, sockaddr: Any) -> Any:
        raw = bytearray(data)
        if len(raw) >= 22 and raw[0] == 6 and raw[2:4] == b"\xff\x07" and raw[4] == 6 \
                and raw[5] == 16:  # IPMI 2.0, payload type RMCP+ Open Session Request
            Sha1OnlySession(self.authdata, self.kg, sockaddr, self.serversocket, raw[16:],
                            self.uuid, bmc=self)
            return None
        return super().sessionless_data(data, sockaddr)

    def _record(self, what: str) -> None:
        with open(self.log, "a") as fh:
            fh.write(what + "\n")

    def _started(self) -> None:
        if self.on_reset:
            subprocess.Popen(self.on_reset, stdin=subprocess.DEVNULL)  # noqa: S603

    def get_power_state(self) -> str:
        return self.state

    def power_off(self) -> None:
        self._record("off")
        if self.off_delay > 0:
            threading.Timer(self.off_delay, lambda: setattr(self, "state", "off")).start()
        else:
            self.state = "off"

    def power_on(self) -> None:
        self._record("on")
        self.state = "on"
        self._started()

    def power_cycle(self) -> None:
        self._record("cycle")
        self.state = "on"
        self._started()

    def power_reset(self) -> None:
        if self.refuse_reset:
            raise NotImplementedError  # pyghmi's Bmc answers 0xCC
        self._record("reset")
        self._started()

    def power_shutdown(self) -> None:
        self._record("shutdown")
        self.state = "off"

    def is_active(self) -> bool:
        return self.state == "on"


def main() -> int:
    parser = argparse.ArgumentParser(prog="ipmi_bmc")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="secret")
    parser.add_argument("--on-reset", default="")
    parser.add_argument("--off-delay", type=float, default=0.0)
    parser.add_argument("--refuse-reset", action="store_true")
    args = parser.parse_args()
    on_reset = json.loads(args.on_reset) if args.on_reset else None
    server = LabBmc({args.user: args.password}, args.port, args.log, on_reset,
                    args.off_delay, args.refuse_reset)
    print(f"ipmi bmc listening on 127.0.0.1:{args.port}", flush=True)
    while True:  # Bmc.listen(), which never returns
        server.listen()
        time.sleep(0.1)  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
