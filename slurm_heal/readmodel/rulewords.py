"""A rule id in plain words, for the console (issue 25 item 8): ``Q1`` beside "Requests
come from the admin CLI, the API and node reason strings...", ``P2:default`` beside "no
approval rule matched: approvals.default decided ...".

One source: the tables of ``docs/rules.md`` (what a user looks up, and what
`tests/unit/test_rules_doc.py` holds complete against the code). They are read once,
as package data: ``slurm_heal/data/rules.md`` is a link to docs/rules.md in the source
tree, and the file itself in a built wheel and in the sdist (issue 36 item 11: an
installed wheel showed the ids alone; issue 38: a wheel built from the sdist had no
docs/ to copy; tests/integration/test_distributions.py builds both and reads a console
page from the installed wheel). Where it is missing all the same, an id is shown alone
(the link to docs/rules.md still says where to look it up).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

RULES_MD = Path(__file__).resolve().parents[1] / "data" / "rules.md"
_ROW = re.compile(r"^\| `?([A-Za-z0-9:_\[\]<>]+)`? \| (.+?) \|\s*$", re.MULTILINE)
_MD = re.compile(r"`([^`]*)`|\*\*([^*]*)\*\*")
# The first sentence: up to ". " or ": " followed by more text, at most this long.
SHORT = 110


@lru_cache(maxsize=1)
def table(path: Path = RULES_MD) -> dict[str, str]:
    """Every rule id of docs/rules.md -> its words (Markdown marks removed); {} without it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for rid, words in _ROW.findall(text):
        if rid in ("id", "----") or rid.startswith("-"):
            continue
        out.setdefault(rid, _MD.sub(lambda m: m.group(1) or m.group(2) or "", words).strip())
    return out


def _key(rule: str) -> str:
    """``P2:approvals[3]`` is documented as ``P2:approvals[N]``; ``[L5]`` as ``L5``."""
    rule = rule.strip()
    if rule.startswith("[") and rule.endswith("]"):
        rule = rule[1:-1]
    return re.sub(r"\[\d+\]$", "[N]", rule)


def words(rule: str | None) -> str:
    """The rule's meaning in full, "" when unknown."""
    if not rule:
        return ""
    return table().get(_key(rule), "")


def short(rule: str | None) -> str:
    """The first sentence of the rule's meaning, cut at a word near ``SHORT`` characters."""
    full = words(rule)
    first = re.split(r"(?<=[.;])\s", full, maxsplit=1)[0].rstrip(".;")
    if len(first) <= SHORT:
        return first
    cut = first[:SHORT].rsplit(" ", 1)[0]
    return cut.rstrip(",:;") + " …"
