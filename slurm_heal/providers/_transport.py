"""One HTTP exchange with a provider under an overall deadline (house style 6).

``requests``' timeout is per socket read: a server that trickles one byte every two
seconds keeps a call alive for as long as it likes (94 s in the attack that found it,
every node blocked behind it). `exchange` bounds the whole exchange — connect, headers
and body — by a deadline: it runs in a worker thread the caller waits for at most the
time left, the body is read a chunk at a time with the deadline checked between
chunks, and the answer is capped in size. An answer that is not what a provider should
send (not JSON, nested deeper than `jsonsafe.MAX_DEPTH`, truncated, too big) is a
`ProviderError` for that call; never a RecursionError or a hang of the daemon.

`retrying` is the one retry loop of the SDK providers (azure, oci, openstack, aws): a
call tried again while a try raises `Retryable`, at most ``attempts`` times within its
deadline, with full-jitter exponential back-off capped at 30 s (`pause`); a server's
``Retry-After`` is honoured, and no pause runs past the deadline. What a provider may try
again is its own to say (SPEC S6: an action only while it certainly did not run).

``requests`` is imported lazily (see providers/http.py).
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from slurm_heal import jsonsafe
from slurm_heal.errors import ProviderError, ProviderTimeout

# No provider answer we read is anywhere near this; more is a broken or hostile server.
MAX_ANSWER = 4 << 20
_CHUNK = 16384
# The longest pause between two tries, whatever the back-off or Retry-After says.
MAX_PAUSE = 30.0


class Deadline:
    """A point in monotonic time a provider call must finish by."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.left() <= 0.0


class TransportError(ProviderError):
    """No (complete) answer: a refused or reset connection, a truncated body. Whether the
    server acted is unknown; the caller may retry with the same idempotency key."""


@dataclass
class Answer:
    """What the server answered (the parts of a ``requests.Response`` we use)."""

    status_code: int
    reason: str
    headers: Mapping[str, str]
    content: bytes = b""
    _json: Any = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not JSON or nests too deeply."""
        return jsonsafe.loads(self.content)


T = TypeVar("T")


@dataclass
class Call(Generic[T]):
    """What `call_within` saw: ``done`` False when the call had not finished in time."""

    done: bool = False
    value: T | None = None
    error: BaseException | None = None  # what the call raised, handed to the caller


def call_within(fn: Callable[[], T], seconds: float, name: str) -> Call[T]:
    """``fn()`` in a daemon worker thread named ``name``, waited for at most ``seconds``.
    A call still running then is left to end by itself (it keeps only its own thread,
    never the daemon); the caller says what that means (a timeout, an unknown outcome)."""
    call: Call[T] = Call()

    def work() -> None:
        try:
            call.value = fn()
        except BaseException as exc:  # handed to the caller's thread  # noqa: BLE001
            call.error = exc
        call.done = True

    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return Call()  # not the worker's own: it may still finish and fill that one in
    return call


class Retryable(ProviderError):
    """One try failed in a way another may mend: nothing ran (or a read may simply be
    asked again). ``retry_after``: the server's Retry-After in seconds; ``timed_out``: the
    try ran out of time (giving up is then a ProviderTimeout); ``final``: no further try
    (a call still running at the deadline)."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 timed_out: bool = False, final: bool = False):
        super().__init__(message)
        self.retry_after, self.timed_out, self.final = retry_after, timed_out, final


class Spent(Exception):  # noqa: N818 - a signal to `retrying`, never seen outside it
    """The deadline was spent before a try: the tries end, the last reason stands."""


def try_within(fn: Callable[[], T], deadline: Deadline, *, who: str, what: str,
               read: bool, classify: Callable[[BaseException], ProviderError],
               unknown: Callable[[str], ProviderError],
               on_timeout: Callable[[], None] | None = None) -> T:
    """One try of an SDK call for `retrying`: ``fn()`` in a worker thread (`call_within`)
    waited for at most what is left of ``deadline``. The deadline spent before the try,
    or a read still running at it: `Retryable` (timed out); an action still running at
    it: ``unknown(message)`` (it may have been sent: never tried again, SPEC S6), after
    ``on_timeout()``; what ``fn`` raised: ``classify(error)``."""
    left = deadline.left()
    if left <= 0:
        raise Retryable(f"{who}: {what}: the deadline of {deadline.seconds:g}s is spent",
                        timed_out=True)
    call = call_within(fn, left, f"{who}-call")
    if not call.done:
        if on_timeout is not None:
            on_timeout()
        message = (f"{who}: {what}: timed out: no complete answer within the deadline "
                   f"of {deadline.seconds:g}s")
        if read:
            raise Retryable(message, timed_out=True)
        raise unknown(message)
    if call.error is not None:
        raise classify(call.error) from call.error
    return cast(T, call.value)


def pause(attempt: int, delay: float | None, deadline: Deadline, *, attempts: int,
          backoff: float, sleep: Callable[[float], None], shorten: bool = False) -> bool:
    """Back off after try ``attempt`` (counted from 0) failed; False when there is no try
    left. ``delay`` is the server's Retry-After, else a full-jitter exponential back-off
    (uniform up to ``backoff * 2**attempt``); either is capped at `MAX_PAUSE`. A pause
    as long as the time left ends the tries, or with ``shorten`` is cut to the time left
    (the next try is still made)."""
    if attempt + 1 >= attempts:
        return False
    if delay is None:
        delay = random.uniform(0, backoff * (2 ** attempt))  # noqa: S311
    delay, left = min(delay, MAX_PAUSE), deadline.left()
    if shorten and left > 0:
        delay = min(delay, left)
    elif delay >= left:
        return False
    sleep(delay)
    return True


def retrying(once: Callable[[Deadline], T], *, deadline: Deadline, attempts: int,
             backoff: float, sleep: Callable[[float], None],
             give_up: Callable[[int, str], str], shorten: bool = False) -> T:
    """``once(deadline)`` until it returns, raises anything but `Retryable`, or the
    tries run out: ``attempts`` of them, a `pause` between two, none past ``deadline``.
    ``once`` says what may be tried again by raising `Retryable` (SPEC S6: an action only
    while it certainly did not run), `Spent` when the deadline ended before the try.

    Giving up raises ProviderTimeout when the last failed try timed out, else
    ProviderError, with ``give_up(tries, last)`` for its message (``last``: the last
    `Retryable`'s message, "" when there was none)."""
    failed: Retryable | None = None
    attempt = 0
    for attempt in range(attempts):
        try:
            return once(deadline)
        except Spent:
            break
        except Retryable as exc:
            failed = exc
            if exc.final or not pause(attempt, exc.retry_after, deadline, attempts=attempts,
                                      backoff=backoff, sleep=sleep, shorten=shorten):
                break
    error = ProviderTimeout if failed is not None and failed.timed_out else ProviderError
    raise error(give_up(attempt + 1, str(failed) if failed is not None else ""))


def exchange(session: Any, method: str, url: str, *, deadline: Deadline,
             timeout: tuple[float, float], what: str, **kwargs: Any) -> Answer:
    """Send one request and read the whole answer before ``deadline``.

    Messages do not repeat ``what`` (the caller's own message does), except for the
    answer-size error, which the caller does not wrap.

    ProviderTimeout when the deadline passes (connect, headers or body, however slowly
    the server trickles), ProviderTimeout/TransportError for requests' own timeouts and
    connection failures, ProviderError for an answer larger than MAX_ANSWER.
    """
    left = deadline.left()
    if left <= 0:
        raise ProviderTimeout(f"timed out: the deadline of {deadline.seconds:g}s is spent")
    cancelled = threading.Event()
    call = call_within(lambda: _send(session, method, url, deadline, cancelled,
                                     (timeout[0], min(timeout[1], left)), what, kwargs),
                       left, "provider-call")
    if not call.done:
        # The worker stops at its next chunk; a server still trickling headers keeps
        # only that thread, never the daemon.
        cancelled.set()
        raise ProviderTimeout(f"timed out: no complete answer within the deadline of "
                              f"{deadline.seconds:g}s")
    if call.error is not None:
        raise call.error
    assert call.value is not None
    return call.value


def plain_reason(exc: BaseException) -> str:
    """What went wrong under a connection error, in plain words ("connection refused",
    "the host name does not resolve", "TLS failed: ..."), found in the chain of causes
    (requests wraps urllib3's MaxRetryError wrapping the socket's error); never the
    wrapper's text (``HTTPConnectionPool(host=...): Max retries exceeded ... [Errno
    111]``, issue 36 item 11)."""
    import socket
    import ssl

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    deepest: OSError | None = None
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ssl.SSLError):
            return f"TLS failed: {err.reason or err.strerror or err}"
        if isinstance(err, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(err, socket.timeout | TimeoutError):
            return "timed out"
        if isinstance(err, OSError) and err.errno is not None and err.strerror:
            deepest = err
        nexts = [err.__cause__, err.__context__, getattr(err, "reason", None), *err.args]
        todo.extend(e for e in nexts if isinstance(e, BaseException))
    if deepest is not None:
        return str(deepest.strerror).lower()
    text = str(exc).split(": ")[-1].strip() or exc.__class__.__name__
    return text[:120]


def connection_words(url: str, exc: BaseException) -> str:
    """``cannot connect to http://host:port: connection refused``: the provider's
    address (no path, no credentials) and `plain_reason`."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    where = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return f"cannot connect to {where}: {plain_reason(exc)}"


def _send(session: Any, method: str, url: str, deadline: Deadline,
          cancelled: threading.Event, timeout: tuple[float, float], what: str,
          kwargs: dict[str, Any]) -> Answer:
    import requests
    import urllib3

    try:
        resp = session.request(method, url, timeout=timeout, stream=True, **kwargs)
    except requests.Timeout as exc:
        raise ProviderTimeout(f"timed out ({exc.__class__.__name__})") from exc
    except (requests.RequestException, OSError, http.client.HTTPException) as exc:
        raise TransportError(f"connection failed: {connection_words(url, exc)}") from exc
    try:
        chunks: list[bytes] = []
        size = 0
        while True:
            if cancelled.is_set() or deadline.expired():
                raise ProviderTimeout(f"timed out: the answer did not arrive within the "
                                      f"deadline of {deadline.seconds:g}s")
            chunk = resp.raw.read1(_CHUNK, decode_content=True)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER:
                raise ProviderError(f"{what}: the answer is larger than {MAX_ANSWER} bytes")
            chunks.append(chunk)
    except (requests.Timeout, urllib3.exceptions.TimeoutError) as exc:
        raise ProviderTimeout("timed out reading the answer") from exc
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError,
            http.client.HTTPException) as exc:
        # A reset mid-answer, a body shorter than its Content-Length.
        raise TransportError(f"the answer was cut off: {plain_reason(exc)}") from exc
    finally:
        resp.close()
    return Answer(status_code=resp.status_code, reason=str(resp.reason or ""),
                  headers=resp.headers, content=b"".join(chunks))
