"""pyslurm's errors told apart by Slurm's error number, never by their words (issue 21;
SPEC I3). The numbers are slurm/slurm_errno.h's (25.11 and 26.05 alike); the live test
makes real pyslurm 25.11 raise them against the lab."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_heal.errors import NotFound, SlurmError, SlurmUnreachable
from slurm_heal.slurm.pyslurm_backend import classify, slurm_errno
from tests.lab import Lab


class RPCError(Exception):
    """Shaped like pyslurm.RPCError (pyslurm/core/error.pyx): an ``errno`` attribute and
    Slurm's message; written here so the rule is tested where pyslurm is not installed."""

    def __init__(self, errno: int, msg: str) -> None:
        self.errno = errno
        super().__init__(msg)


@pytest.mark.parametrize("code", [1001, 1800, 1805, 5004])
def test_no_controller_reached_is_unreachable_whatever_the_words(code: int) -> None:
    err = classify("Nodes.load", RPCError(code, "something Slurm may reword"))
    assert type(err) is SlurmUnreachable and err.errno == code
    assert str(err) == f"pyslurm Nodes.load: something Slurm may reword (slurm errno {code})"


@pytest.mark.parametrize("code", [2017, 2018])
def test_an_unknown_job_or_node_is_not_found(code: int) -> None:
    assert type(classify("Node.modify", RPCError(code, "Invalid"))) is NotFound


def test_words_alone_no_longer_decide() -> None:
    """A message that reads like an unreachable controller or an unknown node, but whose
    number says otherwise (ESLURM_ACCESS_DENIED 2002) or which has none, is a plain
    SlurmError carrying the number."""
    denied = classify("Node.modify", RPCError(2002, "Unable to contact: node not found"))
    assert type(denied) is SlurmError and denied.errno == 2002
    plain = classify("Jobs.load", RuntimeError("connect failure, not found"))
    assert type(plain) is SlurmError and plain.errno is None
    assert str(plain) == "pyslurm Jobs.load: connect failure, not found"


def test_only_an_integer_errno_counts() -> None:
    class Odd(Exception):
        errno = "1800"

    assert slurm_errno(Odd()) is None
    assert slurm_errno(OSError(111, "Connection refused")) == 111


_CHILD = r"""
import json, os, sys
os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"
from slurm_heal.errors import HealError
from slurm_heal.slurm.pyslurm_backend import PyslurmSlurm, classify
conf, dead = sys.argv[1], sys.argv[2] == "dead"
out = {}
client = PyslurmSlurm(slurm_conf=conf, timeout=5)
if dead:
    try:
        client.nodes()
    except HealError as exc:
        out["nodes"] = [type(exc).__name__, getattr(exc, "errno", None)]
else:
    import pyslurm
    for what, call in (
            ("Node.modify", lambda: pyslurm.Node("nosuchnode").modify(
                pyslurm.Node(state="DRAIN", reason="x"))),
            ("Job.load", lambda: pyslurm.Job.load(987654))):
        try:
            call()
        except Exception as exc:
            err = classify(what, exc)
            out[what] = [type(err).__name__, getattr(exc, "errno", None)]
print(json.dumps(out))
"""


def _child(conf: Path, dead: bool) -> dict[str, list[object]]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(conf), "dead" if dead else "live"],
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    got: dict[str, list[object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return got


@pytest.mark.slurm
def test_real_pyslurm_errors_are_classified_by_their_errno(lab: Lab, tmp_path: Path) -> None:
    """pyslurm 25.11 against the lab: an unknown node (ESLURM_INVALID_NODE_NAME) and job
    (ESLURM_INVALID_JOB_ID) are NotFound; a controller nobody listens on is
    SlurmUnreachable, each by the number pyslurm's RPCError carries."""
    if lab.slurm != "25.11" or importlib.util.find_spec("pyslurm") is None:
        pytest.skip("needs pyslurm (25.11 only): contrib/lab/lab install --slurm 25.11, "
                    "then run with --slurm 25.11")
    live = _child(lab.conf, dead=False)
    assert live == {"Node.modify": ["NotFound", 2018], "Job.load": ["NotFound", 2017]}
    conf = tmp_path / "slurm.conf"
    dead_port = lab.base_port + len(lab.nodes) + 1
    conf.write_text(lab.conf.read_text().replace(f"SlurmctldPort={lab.base_port}",
                                                 f"SlurmctldPort={dead_port}"))
    (name, code), = _child(conf, dead=True).values()
    assert name == "SlurmUnreachable" and code in (1001, 1800), code
