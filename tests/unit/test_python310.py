"""The Pythons the package declares (requires-python >= 3.10) are all true (issue 38): on
3.10 a test module did not import (``from datetime import UTC``) and `slurm-heal
machines NODE` crashed on a ``…Z`` time (``datetime.fromisoformat`` reads ``Z`` from
3.11 on; pydantic writes UTC times with it). The unit pass may run on 3.11 only, so the
source is read here for what 3.10 lacks, and the one time parser is held to 3.10's rules.
"""

from __future__ import annotations

import ast
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_heal import isotime

REPO = Path(__file__).resolve().parents[2]
TREES = ("slurm_heal", "tests", "benchmarks")
SELF = "tests/unit/test_python310.py"  # its literals are the scan's own examples

# Names 3.10's standard library does not have: module -> names (3.11 unless marked).
NEWER = {
    "datetime": {"UTC"},
    "typing": {"Self", "Never", "LiteralString", "assert_never", "reveal_type", "Required",
               "NotRequired", "TypeVarTuple", "Unpack", "dataclass_transform",
               "override"},  # override: 3.12
    "enum": {"StrEnum", "ReprEnum", "verify", "EnumCheck"},
    "asyncio": {"TaskGroup", "timeout", "Runner"},
    "contextlib": {"chdir"},
    "hashlib": {"file_digest"},
    "itertools": {"batched"},  # 3.12
    "logging": {"getLevelNamesMapping"},
}
NEWER_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}
NEWER_MODULES = {"tomllib", "wsgiref.types"}  # only behind a sys.version_info test
# Modules that read only times they wrote themselves with isoformat() (never a "Z"); every
# other time goes through slurm_heal.isotime, in the tests too (a stored or served time is
# pydantic's, with a "Z"): there only a literal without one may go to fromisoformat.
OWN_ISOFORMAT = {"slurm_heal/isotime.py", "slurm_heal/checks/reset.py",
                 "slurm_heal/checks/runner.py", "slurm_heal/checks/sources.py",
                 "slurm_heal/checks/kernlog.py"}


def _sources() -> list[Path]:
    return sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _guarded(tree: ast.Module) -> set[int]:
    """Nodes under an ``if sys.version_info ...`` test (either branch)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "version_info" in ast.unparse(node.test):
            inside.update(id(n) for sub in node.body + node.orelse for n in ast.walk(sub))
    return inside


def _literal_without_z(tree: ast.Module) -> set[int]:
    """``fromisoformat`` attributes called on one string literal with no "Z" in it."""
    return {id(node.func) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str) and "z" not in node.args[0].value.lower()}


def _embedded(node: ast.Constant) -> bool:
    """Whether a literal is a program with imports (a probe a test runs in a child
    interpreter of the same Python, `python -c`)."""
    if not (isinstance(node.value, str) and "import " in node.value):
        return False
    try:
        tree = ast.parse(textwrap.dedent(node.value))
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))


def _newer_uses(rel: str, text: str, first: int = 1) -> list[str]:
    """What ``text`` (the module at ``rel``, from its line ``first``) uses that 3.10
    lacks, each as "rel:line: use"; a program in a string literal is read too."""
    tree = ast.parse(text)
    guarded = _guarded(tree)
    literal = _literal_without_z(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        where = f"{rel}:{'?' if line is None else line + first - 1}"
        if rel != SELF and isinstance(node, ast.Constant) and _embedded(node):
            found += _newer_uses(rel, textwrap.dedent(str(node.value)), node.lineno + first - 1)
        if isinstance(node, ast.ImportFrom) and node.module in NEWER:
            found += [f"{where}: from {node.module} import {a.name}" for a in node.names
                      if a.name in NEWER[node.module]]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr in NEWER.get(node.value.id, ()):
            found.append(f"{where}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.Name) and node.id in NEWER_BUILTINS:
            found.append(f"{where}: {node.id}")
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in guarded:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            found += [f"{where}: import {n} without a version test" for n in names
                      if n in NEWER_MODULES]
        if type(node).__name__ == "TryStar":
            found.append(f"{where}: except*")
        if rel not in OWN_ISOFORMAT and isinstance(node, ast.Attribute) \
                and node.attr == "fromisoformat" \
                and (rel.startswith("slurm_heal/") or id(node) not in literal):
            found.append(f"{where}: fromisoformat (isotime.parse reads a 'Z' on 3.10)")
    return found


def test_no_module_uses_what_python_3_10_lacks() -> None:
    sources = _sources()
    assert len(sources) > 300
    found = [use for path in sources for use in _newer_uses(
        path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_scan_finds_each_kind_of_use() -> None:
    text = ("import datetime\nimport sys\nimport tomllib\nfrom typing import Self\n"
            "x = datetime.UTC\ny = datetime.datetime.fromisoformat('2026-01-01')\n"
            "if sys.version_info >= (3, 11):\n    import tomllib\n"
            "raise ExceptionGroup('e', [])\n")
    assert sorted(_newer_uses("slurm_heal/probe.py", text)) == [
        "slurm_heal/probe.py:3: import tomllib without a version test",
        "slurm_heal/probe.py:4: from typing import Self",
        "slurm_heal/probe.py:5: datetime.UTC",
        "slurm_heal/probe.py:6: fromisoformat (isotime.parse reads a 'Z' on 3.10)",
        "slurm_heal/probe.py:9: ExceptionGroup",
    ]
    assert _newer_uses("tests/probe.py", "import datetime\ndatetime.date.fromisoformat('x')\n") \
        == []  # in a test, a literal without a "Z" reads alike on every Python


def test_the_scan_reads_the_tests_times_and_the_programs_they_run() -> None:
    """A test read a stored time (pydantic's, with a "Z") with fromisoformat, and a probe
    a test runs with `python -c` imported tomllib: both failed on 3.10 only."""
    text = ('from datetime import datetime\n'
            'ok = datetime.fromisoformat("2026-01-05T00:00:00+00:00")\n'
            'at = datetime.fromisoformat(stored["at"])\n'
            'zed = datetime.fromisoformat("2026-01-05T00:00:00Z")\n'
            'PROBE = \'\'\'\n    import json, tomllib\n    print(json.dumps({}))\n\'\'\'\n'
            'GUARDED = \'\'\'\n    import sys\n    if sys.version_info >= (3, 11):\n'
            '        import tomllib\n\'\'\'\n'
            'WORDS = "import the site\'s alerts"\n')
    assert sorted(_newer_uses("tests/probe.py", text)) == [
        "tests/probe.py:3: fromisoformat (isotime.parse reads a 'Z' on 3.10)",
        "tests/probe.py:4: fromisoformat (isotime.parse reads a 'Z' on 3.10)",
        "tests/probe.py:6: import tomllib without a version test",
    ]


@pytest.mark.parametrize("text,offset", [
    ("2026-01-02T03:04:05Z", timedelta(0)),
    ("2026-01-02T03:04:05.123456Z", timedelta(0)),
    ("2026-01-02T03:04:05z", timedelta(0)),
    ("2026-01-02T03:04:05+00:00", timedelta(0)),
    ("2026-01-02T05:04:05+02:00", timedelta(hours=2)),
])
def test_a_utc_z_time_reads_as_fromisoformat_reads_it_on_3_11(text: str,
                                                               offset: timedelta) -> None:
    got = isotime.parse(text)
    assert got.utcoffset() == offset
    assert got.astimezone(timezone.utc).replace(microsecond=0) == \
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_a_time_without_a_zone_stays_naive_and_garbage_is_a_value_error() -> None:
    assert isotime.parse("2026-01-02T03:04:05").tzinfo is None
    for bad in ("", "Z", "yesterday", "2026-13-01T00:00:00Z"):
        with pytest.raises(ValueError):
            isotime.parse(bad)
