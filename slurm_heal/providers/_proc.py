"""Run one external program the safe way (house style 6): argv list, never a shell,
a timeout, and the whole process group killed when the timeout passes (a script's
children must not outlive it and act on a node later)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Output kept for the audit record: the tail is what explains a failure.
MAX_OUTPUT = 4000


@dataclass(frozen=True, slots=True)
class ProcResult:
    """What a finished (or killed) program left behind."""

    returncode: int | None  # None when it was killed at the timeout
    output: str  # stdout and stderr together, the last MAX_OUTPUT characters
    timed_out: bool


def _tail(data: bytes | str | None, limit: int = MAX_OUTPUT) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else "..." + text[-limit:]


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
        cwd: str | None = None) -> ProcResult:
    """Run ``argv`` in its own session; kill its process group at ``timeout`` seconds.

    Raises OSError when the program cannot be started at all (missing, not executable).
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=full_env, cwd=cwd, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            # Children that inherited the pipe are dead too (same group), so this returns.
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a child left its group
            proc.kill()
            out = b""
        return ProcResult(None, _tail(out), True)
    return ProcResult(proc.returncode, _tail(out), False)
