"""docs/rules.md lists every rule id the code and its messages cite, so a user can look
"SPEC L5" up without the project's internal spec (the README links it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = (ROOT / "docs" / "rules.md").read_text()
CITED = re.compile(r"SPEC ([DPQLESVIO]\d+)(?:[-–/]([DPQLESVIO]?\d+))?")
RECORDED = re.compile(r"""(?:rule=|, )f?["']([DPQLESVIO]\d|P2:[a-z]+|recommend_only|pause)["']""")


def _documented() -> set[str]:
    return set(re.findall(r"^\| `?([A-Za-z0-9:_\[\]<>]+)`? \|", RULES, re.MULTILINE))


def test_every_rule_id_the_code_cites_is_documented() -> None:
    cited: set[str] = set()
    for f in (ROOT / "slurm_heal").rglob("*.py"):
        text = f.read_text()
        for first, last in CITED.findall(text):
            cited.add(first)
            if last[:1].isalpha() and last[0] != first[0]:  # "P1/Q4": two ids
                cited.add(last)
            elif last:  # a range such as "S3-S5" or "L1-5"
                end = int(last.lstrip(first[0]))
                cited.update(f"{first[0]}{n}" for n in range(int(first[1:]), end + 1))
        cited.update(RECORDED.findall(text))
    assert cited, "the pattern found no rule ids: the test would pass on nothing"
    assert {"L5", "P2", "S5", "P2:person", "P2:default"} <= cited
    assert sorted(cited - _documented()) == []


def test_the_readme_links_the_rules_not_the_internal_spec() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/rules.md)" in readme
    assert "../shared" not in readme
