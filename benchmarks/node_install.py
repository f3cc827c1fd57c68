"""What a node install weighs (issue 38: the node set's dependencies <= 5 MB), measured as
an operator installs it.

    python benchmarks/node_install.py [--python PYTHON] [--pin REQ ...] [--deb]
                                      [--json] [--markdown] [-- PIP-INSTALL-OPTIONS]

pip (the default): a fresh venv made with this interpreter (``--python``) and ``pip
install CHECKOUT`` with no extra, pip's defaults: the dependencies from the package index
pip is configured for, byte-code compiled at install (as pip does, and as the node then
runs it). ``--deb``: the node package of ``contrib/deb/build-deb`` (the distribution's
/usr/bin/python3), unpacked with ``dpkg-deb -x`` and compiled as its postinst compiles
it (``compileall`` over /opt/slurm-heal/lib, the paths as installed).

Each distribution is weighed by the files its RECORD lists (what pip installed and would
remove: the package, its dist-info, its scripts in bin/, its data files such as
ClusterShell's etc/clustershell and man pages, the byte-code pip compiled) and the
byte-code compiled beside its modules afterwards (the .deb's postinst), in bytes (1 MB =
1,000,000 bytes), with and without the ``__pycache__`` byte-code, and on disk (allocated
blocks, as ``du`` counts them). Files that no distribution owns (besides the venv's own
interpreter links, activate scripts and pyvenv.cfg) are listed, so nothing is left out
unseen. The target counts the dependencies: every distribution except slurm-heal itself
and the venv's own pip, setuptools and wheel, with their byte-code.

``--pin REQ`` (repeatable) adds a constraint to the pip install, to weigh another release
of a dependency (``--pin 'pyyaml==6.0.2' --pin 'click<8.2'``); the summary names it.
Options after ``--`` go to ``pip install`` (``-- --no-index --find-links WHEELS`` on a
machine without the package index), or to build-deb with ``--deb`` (``-- --wheelhouse
DIR``). The exit status is 0 when the target is met, 1 when it is not. Benchmarks are
never run by the test suite (tests/integration/test_node_install.py checks what a node
install holds and that it works).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_BYTES = 5_000_000
# the venv's own distributions, there before slurm-heal is installed
VENV_OWN = {"pip", "setuptools", "wheel"}
PROJECT = "slurm-heal"
DEB_PREFIX = "/opt/slurm-heal"

# Run by the weighed environment's interpreter (argv: the site-packages directories, or
# none for its own): each distribution's files, RECORD's and the byte-code of its modules.
_WEIGH = r"""
import glob, json, os, sys
from importlib import metadata
dists = metadata.distributions(path=sys.argv[1:]) if sys.argv[1:] else metadata.distributions()
out = {}
for dist in dists:
    name = dist.metadata["Name"].lower().replace("_", "-")
    paths = set()
    for f in dist.files or ():
        path = os.path.realpath(f.locate())
        paths.add(path)
        if path.endswith(".py"):
            head, tail = os.path.split(path)
            paths.update(os.path.realpath(p) for p in glob.glob(
                os.path.join(glob.escape(head), "__pycache__", glob.escape(tail[:-3]) + ".*.pyc")))
    files = []
    for path in sorted(paths):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        files.append([path, st.st_size, st.st_blocks * 512])
    out[name] = {"version": dist.version, "files": files}
json.dump({"python": sys.version.split()[0], "dists": out}, sys.stdout)
"""


@dataclass
class Row:
    """One distribution's weight."""
    name: str
    version: str
    kind: str  # project, dependency, venv
    files: int
    bytes: int
    bytecode_bytes: int
    shared_object_bytes: int
    disk_bytes: int

    @property
    def without_bytecode(self) -> int:
        return self.bytes - self.bytecode_bytes


@dataclass
class Result:
    how: str
    python: str
    pins: list[str]
    rows: list[Row]
    unowned: list[tuple[str, int]] = field(default_factory=list)

    def deps(self) -> list[Row]:
        return [r for r in self.rows if r.kind == "dependency"]

    @property
    def dependencies_bytes(self) -> int:
        return sum(r.bytes for r in self.deps())

    @property
    def met(self) -> bool:
        return self.dependencies_bytes <= TARGET_BYTES

    def as_json(self) -> dict[str, object]:
        d = asdict(self)
        d["dependencies_bytes"] = self.dependencies_bytes
        d["dependencies_bytes_without_bytecode"] = sum(r.without_bytecode for r in self.deps())
        d["dependencies_disk_bytes"] = sum(r.disk_bytes for r in self.deps())
        d["target_bytes"] = TARGET_BYTES
        d["met"] = self.met
        return d


def _copy_checkout(dst: Path) -> Path:
    """This checkout without its venv, caches and build leftovers (as the install tests
    copy it: pip builds in the source tree)."""
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".lab*", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis",
        "__pycache__"), symlinks=True)
    return dst


def _is_bytecode(path: str) -> bool:
    return f"{os.sep}__pycache__{os.sep}" in path or path.endswith((".pyc", ".pyo"))


def _is_shared_object(path: str) -> bool:
    return path.endswith(".so") or ".so." in os.path.basename(path)


def _venv_own(rel: Path) -> bool:
    """The venv's own files (``python -m venv`` makes them; no distribution owns them)."""
    return rel == Path("pyvenv.cfg") or (rel.parts[0] == "bin" and rel.name.startswith(
        ("python", "activate", "Activate")))


def weigh(python: str, prefix: Path, site: list[Path], how: str,
          pins: list[str]) -> Result:
    """The distributions installed under ``prefix`` (their site-packages ``site``, or the
    interpreter's own when empty), weighed by their files."""
    said = subprocess.run([python, "-c", _WEIGH, *map(str, site)], check=True, timeout=300,
                          capture_output=True, text=True).stdout
    weighed = json.loads(said)
    owned: set[str] = set()
    rows = []
    for name, dist in sorted(weighed["dists"].items()):
        files = [f for f in dist["files"] if f[0] not in owned]
        owned.update(f[0] for f in files)
        rows.append(Row(
            name=name, version=dist["version"],
            kind="project" if name == PROJECT else "venv" if name in VENV_OWN else "dependency",
            files=len(files), bytes=sum(f[1] for f in files),
            bytecode_bytes=sum(f[1] for f in files if _is_bytecode(f[0])),
            shared_object_bytes=sum(f[1] for f in files if _is_shared_object(f[0])),
            disk_bytes=sum(f[2] for f in files)))
    unowned = []
    for root, _dirs, names in os.walk(prefix):
        for n in names:
            p = Path(root, n)
            rel = p.relative_to(prefix)
            if p.is_symlink() or os.path.realpath(p) in owned or _venv_own(rel):
                continue
            unowned.append((str(rel), p.stat().st_size))
    return Result(how=how, python=weighed["python"], pins=pins, rows=rows,
                  unowned=sorted(unowned))


def measure_pip(python: str, pins: list[str], pip_args: list[str]) -> Result:
    """A fresh venv, ``pip install CHECKOUT`` (the node set), weighed."""
    with tempfile.TemporaryDirectory(prefix="slurm-heal-node-install.") as tmp:
        work = Path(tmp)
        checkout = _copy_checkout(work / "checkout")
        env_dir = work / "venv"
        subprocess.run([python, "-m", "venv", str(env_dir)], check=True, timeout=300)
        vpy = env_dir / "bin" / "python"
        cmd = [str(vpy), "-m", "pip", "--disable-pip-version-check", "install", "--quiet",
               *pip_args]
        if pins:
            (work / "pins.txt").write_text("".join(f"{p}\n" for p in pins))
            cmd += ["--constraint", str(work / "pins.txt")]
        subprocess.run([*cmd, str(checkout)], check=True, timeout=900)
        return weigh(str(vpy), env_dir, [], f"pip install (a venv of {python})", pins)


def measure_deb(build_args: list[str]) -> Result:
    """contrib/deb/build-deb's package, unpacked and compiled as its postinst does."""
    with tempfile.TemporaryDirectory(prefix="slurm-heal-node-deb.") as tmp:
        work = Path(tmp)
        built = subprocess.run([str(REPO / "contrib/deb/build-deb"), "--out", str(work),
                                *build_args], check=True, timeout=900, capture_output=True,
                               text=True).stdout.strip().splitlines()[-1]
        root = work / "root"
        subprocess.run(["dpkg-deb", "-x", built, str(root)], check=True, timeout=120)
        prefix = root / DEB_PREFIX.lstrip("/")
        python = os.readlink(prefix / "bin/python3")  # /usr/bin/python3.X, as Depends: says
        site = sorted((prefix / "lib").glob("python3.*/site-packages"))
        # postinst: compileall over $prefix/lib (here with the paths it has when installed)
        subprocess.run([python, "-m", "compileall", "-q", "-s", str(root), "-p", "/",
                        str(prefix / "lib")], check=True, timeout=600, stdout=subprocess.DEVNULL)
        return weigh(python, prefix, site, f"the .deb ({Path(built).name}, "
                     f"{_mb(Path(built).stat().st_size)}; in {DEB_PREFIX}, byte-code "
                     "compiled as its postinst does)", [])


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def table(result: Result, markdown: bool = False) -> str:
    head = ("distribution", "kind", "installed", "without byte-code", "byte-code",
            "shared objects", "on disk")
    body = [(f"{r.name} {r.version}", r.kind, _mb(r.bytes), _mb(r.without_bytecode),
             _mb(r.bytecode_bytes), _mb(r.shared_object_bytes), _mb(r.disk_bytes))
            for r in result.rows]
    deps = result.deps()
    body.append(("the dependencies (all but slurm-heal, pip, setuptools, wheel)", "",
                 _mb(sum(r.bytes for r in deps)), _mb(sum(r.without_bytecode for r in deps)),
                 _mb(sum(r.bytecode_bytes for r in deps)),
                 _mb(sum(r.shared_object_bytes for r in deps)),
                 _mb(sum(r.disk_bytes for r in deps))))
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(row) + " |" for row in body]
    else:
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                  for row in [head, *body]]
    pins = ", ".join(result.pins) or "none"
    lines.append("")
    lines.append(f"{result.how}; Python {result.python}; pins: {pins}. The node set's "
                 f"dependencies: {_mb(result.dependencies_bytes)} (target <= "
                 f"{_mb(TARGET_BYTES)}: {'met' if result.met else 'NOT met'}).")
    if result.unowned:
        shown = ", ".join(u[0] for u in result.unowned[:6])
        more = ", ..." if len(result.unowned) > 6 else ""
        lines.append(f"Files no distribution owns: {len(result.unowned)}, "
                     f"{_mb(sum(u[1] for u in result.unowned))} ({shown}{more}).")
    else:
        lines.append("Every file is owned by a distribution (besides the venv's interpreter "
                     "links, activate scripts and pyvenv.cfg).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    passed: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, passed = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter the venv is made with (default: this one)")
    ap.add_argument("--pin", action="append", default=[], metavar="REQ",
                    help="a constraint for the pip install, e.g. 'pyyaml==6.0.2' (repeatable)")
    ap.add_argument("--deb", action="store_true",
                    help="weigh contrib/deb/build-deb's package instead of a pip install")
    ap.add_argument("--json", action="store_true", help="the result as JSON")
    ap.add_argument("--markdown", action="store_true", help="the table as the README has it")
    args = ap.parse_args(argv)
    if args.deb and args.pin:
        ap.error("--pin weighs a pip install; build-deb takes what pip resolves")
    result = measure_deb(passed) if args.deb else measure_pip(args.python, args.pin, passed)
    if args.json:
        json.dump(result.as_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(result, markdown=args.markdown))
    return 0 if result.met else 1


if __name__ == "__main__":
    raise SystemExit(main())
