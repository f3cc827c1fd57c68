"""LBNL NHC, built from its public source for the benchmark (issue 26: the node check's
ratio to NHC is measured, not quoted).

The source is the vendored ``lbnl-nhc-9c4a38c.tar.xz`` (commit 9c4a38c of the public NHC
repository, ``git archive --prefix=lbnl-nhc-9c4a38c/``), looked for where the lab looks
for the Slurm sources: ``$LAB_VENDOR_DIR``, ``../shared/vendor`` beside the clone, and
beside the main checkout of a git worktree. NHC is bash: its build is the unpacked tree,
which runs in place (``./nhc -D DIR ... INCDIR=DIR/scripts HELPERDIR=DIR/helpers``). It
is unpacked once into the build root the lab's Slurm builds use (``$LAB_BUILD_ROOT``,
default /opt/slurm-heal; ``~/.cache/slurm-heal`` when that is not writable), outside the
clone, with a stamp file; later runs reuse it.

"NHC's typical configuration" is the ``nhc.conf`` NHC ships with its active lines (free
memory, / mounted read-write, /tmp and /var/tmp, /etc/passwd and /etc/group, /dev/null
and /dev/zero), except that its ``check_ps_service -u root -S sshd`` (which would start
sshd where it does not run) looks for the command of this machine's PID 1 instead,
without starting anything: the same kind and number of checks, passing here. Written
by hand from NHC's file (it is not real NHC output).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "lbnl-nhc-9c4a38c"
TARBALL = f"{NAME}.tar.xz"


def vendor_tarball() -> Path | None:
    """NHC's vendored tarball, found where the lab finds the Slurm sources (one lookup,
    tests/lab.py's)."""
    import sys

    sys.path.insert(0, str(REPO))
    from tests.lab import vendor_tarball as find

    return find(TARBALL)


def missing() -> str:
    """Why NHC is not measured, and the commands that add it."""
    return (f"not measured: the NHC source {TARBALL} is not in ../shared/vendor beside the "
            "clone nor in $LAB_VENDOR_DIR; make it with `git clone https://github.com/mej/nhc "
            f"&& git -C nhc archive --prefix={NAME}/ 9c4a38c | xz > DIR/{TARBALL}`, then "
            "`LAB_VENDOR_DIR=DIR make bench`")


def build_root() -> Path:
    root = Path(os.environ.get("LAB_BUILD_ROOT") or "/opt/slurm-heal")
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return Path.home() / ".cache" / "slurm-heal"


def build() -> Path | None:
    """The unpacked NHC tree (unpacked now unless a stamp says it already is), or None."""
    tarball = vendor_tarball()
    if tarball is None:
        return None
    root = build_root()
    tree = root / NAME
    stamp = root / f".{NAME}.unpacked"
    if stamp.is_file() and (tree / "nhc").is_file():
        return tree
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    stamp.write_text(f"{tarball}\n")
    return tree


def typical_conf(path: Path) -> Path:
    pid1 = subprocess.run(["ps", "-o", "comm=", "1"], capture_output=True, text=True,
                          check=False).stdout.strip() or "init"
    path.write_text(
        "# NHC's shipped nhc.conf, active lines (benchmarks/nhc.py; written by hand)\n"
        "   * || check_hw_mem_free 1mb\n"
        "   * || check_fs_mount_rw -f /\n"
        "   * || check_file_test -r -w -x -d -k /tmp /var/tmp\n"
        "   * || check_file_test -r -s /etc/passwd /etc/group\n"
        "   * || check_file_test -c -r -w /dev/null /dev/zero\n"
        f"   * || check_ps_service -u root {pid1}\n")
    return path


def argv(tree: Path, conf: Path, result: Path) -> list[str]:
    """NHC run in place, logging nowhere, marking nothing offline (vendor README)."""
    return ["bash", str(tree / "nhc"), "-D", str(tree), "-c", str(conf), "-l", "/dev/null",
            "-t", "60", f"INCDIR={tree / 'scripts'}", f"HELPERDIR={tree / 'helpers'}",
            f"RESULTFILE={result}", "MARK_OFFLINE=0"]
