"""serve's WSGI server: cheroot, with a request handed to a worker only once it is all
there (SPEC O5; issue 34 item 3).

cheroot hands a connection to a worker as soon as it is accepted or readable, and the
worker then reads the request line and headers with ``timeout`` per read: a client that
sends one byte every few seconds (slowloris), or connects and sends nothing, holds a
worker for as long as it likes, and twenty of them held every worker of the pool. Here
the selector thread gathers each request without blocking (whatever the socket has,
taken at once, into the connection's own read buffer) and gives it to a worker only when
the headers and a body of known length are complete, so a worker never waits on a
client's sending. Three bounds keep what waits small:

* ``request_timeout``: a request must be complete this long after its first byte (one
  total deadline, not per read), else the connection is closed;
* ``timeout``: a connection that sends nothing for this long is closed (as before);
* ``max_client_connections``: connections open at once from one client address; one
  more is answered ``503`` and closed at accept. A trusted proxy is not counted (every
  person behind it shares its address).

A chunked body (no Content-Length) is read by the worker as before, bounded per read by
``timeout``. TLS handshakes still happen at accept, in the selector thread (cheroot's).
"""

from __future__ import annotations

import ipaddress
import re
import selectors
import socket
import ssl
import threading
import time
from typing import Any

from cheroot import server as cheroot_server
from cheroot import wsgi

MAX_HEAD = 64 * 1024  # request line + headers; more is refused (431) at once
MAX_GATHERED_BODY = 1024 * 1024  # a larger declared body is read by the worker
_END = b"\r\n\r\n"
_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\d{1,12})[ \t]*$", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:", re.I | re.M)


def complete(data: bytes) -> bool | None:
    """Whether ``data`` holds a whole request (headers, and a body of declared length
    up to MAX_GATHERED_BODY); None when its head is too large to ever be one."""
    data = data.lstrip(b"\r\n")  # RFC 9112 2.2: empty lines before a request are ignored
    end = data.find(_END)
    if end < 0:
        return None if len(data) > MAX_HEAD else False
    head = data[:end]
    if _CHUNKED.search(head):
        return True  # the worker reads a chunked body (per-read timeout)
    length = _LENGTH.search(head)
    if length is None:
        return True
    size = int(length.group(1))
    return size > MAX_GATHERED_BODY or len(data) - end - len(_END) >= size


class Connection(cheroot_server.HTTPConnection):
    """A connection that says when it is closed (the per-client count) and when its
    current request started (the per-request deadline)."""

    started: float | None = None
    counted: str | None = None
    _closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            counted, self.counted = self.counted, None
            if counted is not None:
                self.server.release(counted)
        super().close()


class Server(wsgi.Server):
    """cheroot's WSGI server with the bounds above."""

    ConnectionClass = Connection

    def __init__(self, *args: Any, request_timeout: float, max_client_connections: int,
                 uncounted: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout
        self.max_client_connections = max_client_connections
        self._uncounted = [ipaddress.ip_network(n, strict=False) for n in uncounted]
        self._clients: dict[str, int] = {}
        self._clients_lock = threading.Lock()

    # ------------------------------------------------------------ per-client bound

    def _counts(self, addr: str) -> bool:
        if self.max_client_connections <= 0:
            return False
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return False  # a Unix socket: no address to count
        return not any(ip in net for net in self._uncounted)

    def _admit(self, conn: Connection) -> bool:
        addr = str(conn.remote_addr or "")
        if not self._counts(addr):
            return True
        with self._clients_lock:
            n = self._clients.get(addr, 0)
            if n >= self.max_client_connections:
                return False
            self._clients[addr] = n + 1
        conn.counted = addr
        return True

    def release(self, addr: str) -> None:
        with self._clients_lock:
            n = self._clients.get(addr, 0) - 1
            if n > 0:
                self._clients[addr] = n
            else:
                self._clients.pop(addr, None)

    def client_connections(self) -> dict[str, int]:
        with self._clients_lock:
            return dict(self._clients)

    # ------------------------------------------------------------ gathering

    def process_conn(self, conn: Connection) -> None:
        """Called by the selector thread for a connection just accepted or readable, and
        by a worker for a kept-alive one with bytes already buffered. Never blocks."""
        if conn.counted is None and not conn.started and not conn.requests_seen:
            if not self._admit(conn):
                _refuse(conn, b"503 Service Unavailable", b"too many connections from "
                        b"this address at once\n")
                return
        try:
            state = self._gather(conn)
        except OSError:
            conn.close()
            return
        if state is None:
            _refuse(conn, b"431 Request Header Fields Too Large",
                    b"the request's head is larger than 64 KiB\n")
        elif state:
            conn.started = None
            conn.last_used = time.time()
            super().process_conn(conn)
        else:
            self._wait(conn)

    def _gather(self, conn: Connection) -> bool | None:
        """Take what the socket has now into the connection's read buffer; whether the
        request is complete (None: never will be). A closed peer raises OSError."""
        rfile = conn.rfile
        sock = conn.socket
        chunks: list[bytes] = []
        sock.settimeout(0.0)
        try:
            while True:
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    break
                if not data:
                    if chunks:
                        break  # answer what came; the close is seen on the next read
                    raise ConnectionResetError("closed by the client")
                chunks.append(data)
                if sum(map(len, chunks)) > MAX_HEAD + MAX_GATHERED_BODY:
                    break
        finally:
            sock.settimeout(self.timeout)
        # cheroot's StreamReader is _pyio's BufferedReader: its unread bytes are
        # _read_buf[_read_pos:] (cheroot's own has_data() reads them the same way).
        with rfile._read_lock:
            buffered = rfile._read_buf[rfile._read_pos:] + b"".join(chunks)
            rfile._read_buf, rfile._read_pos = buffered, 0
        if buffered and conn.started is None:
            conn.started = time.time()
        return complete(buffered) if buffered else False

    def _wait(self, conn: Connection) -> None:
        """Back to the selector until more comes. cheroot's expiry closes a connection
        whose ``last_used`` is older than ``timeout``: set so that it is closed at the
        request's deadline or after ``timeout`` of silence, whichever is first."""
        now = time.time()
        deadline = now + self.timeout
        if conn.started is not None:
            deadline = min(deadline, conn.started + self.request_timeout)
        conn.last_used = deadline - self.timeout
        try:
            # cheroot's ConnectionManager: the selector its own put() registers with
            manager = getattr(self, "_connections")  # noqa: B009 (no stub for it)
            manager._selector.register(conn.socket.fileno(), selectors.EVENT_READ, data=conn)
        except (OSError, ValueError, KeyError):
            conn.close()


def _refuse(conn: Connection, status: bytes, body: bytes) -> None:
    msg = (b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\nContent-Length: "
           + str(len(body)).encode() + b"\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
           + body)
    try:
        conn.socket.settimeout(0.0)
        conn.socket.send(msg)
        conn.socket.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):
        pass
    conn.close()
