"""systemd's notify protocol (sd_notify(3)), on a plain datagram socket: no dependency.

The controller's unit is ``Type=notify`` with ``WatchdogSec=`` (contrib/systemd, issue 38).
systemd passes the socket to send to in ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the
abstract namespace) and, when the unit has a watchdog, ``$WATCHDOG_USEC`` (and
``$WATCHDOG_PID``, the process it is meant for). The daemon says ``READY=1`` once its
config is read and it is about to cycle, ``WATCHDOG=1`` whenever its loop goes round (each
heartbeat it writes, and while it waits between cycles or stands by), ``STATUS=`` in
words (what `systemctl status` shows), and ``STOPPING=1`` when asked to stop. A loop
stuck in a cycle stops the ``WATCHDOG=1``s and systemd restarts the controller.

Outside systemd (no ``$NOTIFY_SOCKET``) every call does nothing; a socket that cannot be
reached is never an error of the daemon: the message is dropped, as sd_notify does.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

ENV_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"


def _address(env: Mapping[str, str]) -> str | None:
    where = env.get(ENV_SOCKET, "")
    if not where or where[0] not in "/@":  # systemd's vsock: addresses are not spoken here
        return None
    return "\0" + where[1:] if where[0] == "@" else where


def notify(*fields: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``fields`` (``"READY=1"``, ``"STATUS=..."``) as one message; True when sent.
    A newline inside a value would start another field: it is sent as a space."""
    address = _address(os.environ if env is None else env)
    if address is None or not fields:
        return False
    message = "\n".join(f.replace("\n", " ") for f in fields).encode("utf-8", "replace")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            sock.sendto(message, address)
    except OSError:
        return False
    return True


def watchdog_seconds(env: Mapping[str, str] | None = None) -> float | None:
    """The watchdog's period systemd set for this process (``WatchdogSec=``), or None
    when there is none, it is meant for another process, or it cannot be read."""
    env = os.environ if env is None else env
    try:
        usec = int(env.get(ENV_WATCHDOG_USEC, ""))
    except ValueError:
        return None
    pid = env.get(ENV_WATCHDOG_PID, "")
    if pid and pid != str(os.getpid()):
        return None
    return usec / 1e6 if usec > 0 else None
