"""Running external tools from the node check (house style 6).

argv lists only, always a timeout, and on timeout the whole process group is killed,
so a hung ``systemctl`` or ``nvidia-smi`` can never hang the health check.
"""

from __future__ import annotations

from slurm_heal.errors import CheckError
from slurm_heal.frozen import dataclass

TYPE_CHECKING = False  # typing is not imported on the node check's path (issue 26)
if TYPE_CHECKING:
    from typing import Any


class ToolTimeout(CheckError):
    """A tool ran past its timeout and was killed with its process group. Detectors
    for which a hung tool is itself a symptom (nvidia-smi, dcgmi, amd-smi) catch it."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        super().__init__(f"{' '.join(argv)} ran longer than {timeout:g}s; killed")
        self.argv = tuple(argv)
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def which(tool: str) -> str | None:
    """The tool's path on PATH, or None (the detector is then "unsupported"). What
    `shutil.which` answers, without importing shutil (it imports bz2, lzma, fnmatch: a
    cost every check on a node without the tool would pay only to learn it is absent)."""
    import os

    def runnable(path: str) -> bool:
        return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) \
            and not os.path.isdir(path)

    if os.path.dirname(tool):
        return tool if runnable(tool) else None
    search = os.environ.get("PATH")
    if search is None:
        try:
            search = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            search = os.defpath
    for d in search.split(os.pathsep) if search else ():
        path = os.path.join(d or os.curdir, tool)
        if runnable(path):
            return path
    return None


def run(argv: list[str], timeout: float) -> Result:
    """Run ``argv`` with a timeout; CheckError when it cannot start or runs too long."""
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
    except OSError as exc:
        raise CheckError(f"cannot run {argv[0]}: {exc.strerror}") from None
    out, err, timed_out = finish(proc, timeout)
    if timed_out:
        raise ToolTimeout(argv, timeout)
    return Result(tuple(argv), proc.returncode, out, err)


def finish(child: Any, timeout: float) -> tuple[Any, Any, bool]:
    """``child.communicate()`` within ``timeout`` seconds: (stdout, stderr, False); past
    it the child's process group is killed (house style 6: it was started with
    ``start_new_session``) and reaped: (what it printed until then, True)."""
    import os
    import signal
    import subprocess

    try:
        out, err = child.communicate(timeout=timeout)
        return out, err, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = child.communicate()
        return out, err, True
