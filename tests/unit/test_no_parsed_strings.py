"""No sentence and no ``rule:subject`` string is parsed back (issue 33): what a reader
needs is a typed field. A hold's mark is a `models.Mark` (its rule and subject), an
approval is the typed approval step (who: ``by``, when: ``at``), a notice said once is a
`policy.notices.Notice`, a rule id is compared whole, an incident's group is a
`config.FaultGroup` (its stored ``name:fault`` key compared whole, never split). Measured
on the build before, this scan found ``Work.blocked`` and rule ids split on ":", an audit sentence read by how it
begins (``why.startswith("approved by")``), the S7 settle wait found by words in its
record, and 15 kinds of notice key written as free text.

The scan reads the package's source (ast): a split, partition or prefix test of anything
that names a rule, a mark, a blocked flag, a group or a why; a search for words in a why; a notice
key written as a string. Each exception is named with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_heal"
# What a rule id, a hold's mark, an audit sentence or an approval is held in.
# An incident's group (``name:fault`` for a group of each_fault) is one too (S7).
NAMES = frozenset({"rule", "blocked", "mark", "why", "approved_by", "subject", "group"})
SENTENCES = frozenset({"why"})  # searched for words: a sentence read back
PARSE = frozenset({"split", "rsplit", "partition", "rpartition", "startswith", "endswith",
                   "find", "index", "removeprefix", "removesuffix"})
# (module, function): why it may.
ALLOWED = {
    ("models.py", "marked_by_words"): "the one migration: a step or record of a build "
    "before Step.mark gets the S7 settle wait's mark from the words it always said",
    ("readmodel/rulewords.py", "_key"): "a rule id looked up whole in docs/rules.md "
    "(its documented [N] form), not a subject read out of it",
    ("config.py", "_hostlist_size"): "a host list's bracket range (``gpu[1-4,8]``) as the "
    "operator wrote it, counted: input read, not an incident's group read back",
    ("simulation.py", "matches"): "a simulate scenario's own expectation of the words of a "
    "record (docs/simulate.md): what a person wrote to check, not a reader's data",
}


def _names(expr: ast.AST, names: frozenset[str]) -> bool:
    # A method of that name called is not the value (a regex match's ``m.group()``).
    called = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
    return any((isinstance(n, ast.Attribute) and n.attr in names and id(n) not in called)
               or (isinstance(n, ast.Name) and n.id in names)
               or (isinstance(n, ast.Constant) and n.value in names)
               for n in ast.walk(expr))


def parsed_back(source: str) -> list[tuple[str, str]]:
    """(function, expression) of each place ``source`` reads a string back."""
    tree = ast.parse(source)
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                owner.setdefault(id(n), fn.name)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                (n.func.attr in PARSE and _names(n.func.value, NAMES))
                or (n.func.attr == "once" and n.args
                    and isinstance(n.args[0], (ast.Constant, ast.JoinedStr)))):
            out.append((owner.get(id(n), "-"), ast.unparse(n)))
        elif isinstance(n, ast.Compare) and any(
                isinstance(op, (ast.In, ast.NotIn)) and _names(c, SENTENCES)
                for op, c in zip(n.ops, n.comparators, strict=True)):
            out.append((owner.get(id(n), "-"), ast.unparse(n)))
    return out


def test_no_module_parses_a_sentence_or_a_rule_subject_string_back() -> None:
    found = [f"{path.relative_to(PACKAGE).as_posix()}:{fn}: {expr}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for fn, expr in parsed_back(path.read_text(encoding="utf-8"))
             if (path.relative_to(PACKAGE).as_posix(), fn) not in ALLOWED]
    assert found == []


def test_each_allowed_exception_is_still_there() -> None:
    """An exception whose code is gone is taken off the list (it would hide a new one)."""
    left = {(p.relative_to(PACKAGE).as_posix(), fn) for p in sorted(PACKAGE.rglob("*.py"))
            for fn, _ in parsed_back(p.read_text(encoding="utf-8"))}
    assert set(ALLOWED) <= left


def test_the_scan_finds_each_form_the_issue_measured() -> None:
    """The forms issue 33 found on the build before, each caught (the scan can fail)."""
    forms = {
        "mark sliced": "def f(rem):\n    return rem.data.blocked.split(':')[1]\n",
        "rule id split": "def f(rec):\n    return rec.rule.split(':')[0]\n",
        "sentence begins": "def f(s):\n    return s.why.startswith('approved by')\n",
        "words in a why": "def f(rule, why):\n    return 'settle = ' in why\n",
        "notice key as text": "def f(led, name):\n    return led.once(f'd5:{name}')\n",
        "group split": "def f(group):\n    name, _, fault = group.partition(':')\n"
                       "    return fault or name\n",
        "incident's group split": "def f(inc):\n    return inc.group.split(':')[-1]\n",
    }
    assert {k: len(parsed_back(src)) for k, src in forms.items()} == dict.fromkeys(forms, 1)
    assert parsed_back("def f(led, n):\n    return led.once(notice('d5', n))\n") == []


def test_an_incidents_group_is_a_value_and_its_words_come_from_it() -> None:
    """SPEC S7: what related faults correlate by is a `FaultGroup`; its stored key and the
    words an incident's sentences use are its fields, for a group of each_fault and not."""
    from slurm_heal.config import FaultGroup, policy_from_dict

    pol = policy_from_dict({}).incidents
    xid = pol.group_of("gpu.xid.48")
    assert xid == FaultGroup("xid", "gpu.xid.48")
    assert (xid.key, xid.words) == ("xid:gpu.xid.48", "gpu.xid.48")
    named = FaultGroup("ib")
    assert (named.key, named.words) == ("ib", "ib")
    assert pol.key_of("gpu.xid.48") == "xid:gpu.xid.48"
    assert pol.group_of("no.such.fault") is None and pol.key_of("no.such.fault") is None
    # a fault in two groups (issue 37's cause domains: Xid 79 is a rack's power fault and
    # an Xid): each is a value, in the policy's order
    assert pol.groups_of("gpu.xid.79") == (FaultGroup("power"), FaultGroup("xid", "gpu.xid.79"))
    assert pol.keys_of("gpu.xid.79") == ("power", "xid:gpu.xid.79")
