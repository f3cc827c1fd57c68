"""The example policies and the key reference (issue 36 item 9, SPEC P2, I4): every file
in contrib/policies passes `policy check` (the README says to start from them);
`full.toml` ("every knob") has every key the config models read, and docs/policy.md
names each; `policy check` says loudly when an auto-approved fault's catalog action is
one the configured provider cannot carry out (the `slurm` provider only reboots; Xid
79's action is migrate), instead of letting the first Xid 79 fail at once.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from slurm_heal.cli import cli
from slurm_heal.config import Policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "contrib" / "policies").glob("*.toml"))
FULL = REPO / "contrib" / "policies" / "full.toml"
POLICY_DOC = REPO / "docs" / "policy.md"
# [provider]'s keys are its type's own (docs/providers.md), not the policy's.
OWN_DOCS = ("provider",)


def _model_of(ann: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model an annotation holds (through Optional, tuple[...], Annotated),
    and whether it is a list of them."""
    origin = typing.get_origin(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann, False
    if origin is typing.Annotated:
        return _model_of(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(ann):
            found, many = _model_of(arg)
            if found is not None:
                return found, many
    if origin in (tuple, list):
        args = [a for a in typing.get_args(ann) if a is not Ellipsis]
        if args and _model_of(args[0])[0] is not None:
            return _model_of(args[0])[0], True
    return None, False


def model_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key the file may hold for ``model``, dotted (``approvals.rules[].fault``)."""
    for name, f in model.model_fields.items():
        if f.exclude:
            continue
        dotted = f"{prefix}{f.alias or name}"
        sub, many = _model_of(f.annotation)
        if sub is not None and sub.model_fields:
            yield from model_keys(sub, dotted + ("[]." if many else "."))
        else:
            yield dotted


def policy_keys() -> list[str]:
    return [k for k in model_keys(Policy) if k.split(".")[0].removesuffix("[]") not in OWN_DOCS]


def uncommented(text: str) -> dict[str, Any]:
    """full.toml with its commented-out keys and tables (``# state_dir = ...``) taken as
    written: those are documented, only off by default."""
    lines = []
    for line in text.splitlines():
        m = re.match(r"^#\s?(\s*(\[|[A-Za-z_]+\s*=).*)$", line)
        lines.append(m.group(1) if m else line)
    return tomllib.loads("\n".join(lines))


def in_toml(data: dict[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        many = part.endswith("[]")
        part = part.removesuffix("[]")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if many:
            if not isinstance(node, list) or not node:
                return False
            node = node[0]
    return True


def doc_sections(text: str) -> dict[str, str]:
    """docs/policy.md by section: the text under each heading that names ``[section]``
    (and ``[section.sub]``), up to the next heading; the "Top level" part as ""."""
    out: dict[str, str] = {}
    for part in re.split(r"^#{2,3} ", text, flags=re.M)[1:]:
        heading = part.splitlines()[0]
        if heading.startswith("Top level"):
            out[""] = out.get("", "") + part
        for section in re.findall(r"`\[([a-z_.]+)\]`", heading):
            out[section.split(".")[0]] = out.get(section.split(".")[0], "") + part
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_policy_passes_policy_check(example: Path) -> None:
    """README: start from contrib/policies; each is a file the daemon takes, no warning."""
    result = CliRunner().invoke(cli, ["policy", "check", str(example), "--no-slurm", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["warnings"] == []


def test_full_toml_has_every_key_the_config_models_read() -> None:
    """full.toml is "every knob with its default": none the models read is missing."""
    data = uncommented(FULL.read_text())
    missing = [k for k in policy_keys() if not in_toml(data, k)]
    assert missing == [], f"contrib/policies/full.toml lacks {missing}"


def test_docs_policy_md_names_every_key_in_its_section() -> None:
    sections = doc_sections(POLICY_DOC.read_text())
    missing = []
    for key in policy_keys():
        parts = [p.removesuffix("[]") for p in key.split(".")]
        section, rest = (parts[0], parts[1:]) if len(parts) > 1 else ("", parts)
        text = sections.get(section, "")
        names = {".".join(rest[i:]) for i in range(len(rest))}
        if not any(f"`{n}`" in text or f"`{n} =" in text or f"`[{section}.{n}]`" in text
                   or f"[[{section}.{n}" in text for n in names):
            missing.append(key)
    assert missing == [], f"docs/policy.md does not name {missing} in their sections"


def test_auto_approving_what_the_provider_cannot_do_is_said_loudly(tmp_path: Path) -> None:
    """SPEC P2: the slurm provider (reboot only) with every Xid auto-approved: Xid 79's
    catalog action is migrate, so `policy check` warns, naming the rule, the action, the
    fault and what to write instead; a manual rule for migrate silences it."""
    policy = tmp_path / "heal.toml"
    policy.write_text('[[approvals.rules]]\nfault = "gpu.xid.*"\nmode = "auto"\n\n'
                      '[provider]\ntype = "slurm"\n')
    result = CliRunner().invoke(cli, ["policy", "check", str(policy), "--no-slurm", "--json"])
    assert result.exit_code == 0, result.output
    (warning,) = json.loads(result.stdout)["warnings"]
    assert "P2:approvals[0] auto-approves migrate" in warning
    assert "gpu.xid.79" in warning and "slurm provider cannot carry out" in warning
    assert '{fault = "gpu.xid.*", action = "migrate", mode = "manual"}' in warning
    text = CliRunner().invoke(cli, ["policy", "check", str(policy), "--no-slurm"])
    assert "warning: " in text.stderr and "gpu.xid.79" in text.stderr

    policy.write_text(policy.read_text() + '\n[[approvals.rules]]\nfault = "gpu.xid.*"\n'
                      'action = "migrate"\nmode = "manual"\n')
    quiet = CliRunner().invoke(cli, ["policy", "check", str(policy), "--no-slurm", "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["warnings"] == [], quiet.output


# --------------------------------------------------------------------------- the node check's docs

CHECKS_DOC = REPO / "docs" / "checks.md"
GLUE = REPO / "slurm_heal" / "glue"


def test_every_exit_status_of_check_is_in_the_docs_table() -> None:
    """SPEC I1: what HealthCheckProgram's caller sees, every status `check` returns
    (runner's own, and the error tree's for what reaches it: slurm.conf, an unknown
    node) and the glue's deadline, is in docs/checks.md's table."""
    from slurm_heal.checks import runner

    table = CHECKS_DOC.read_text().split("Exit status of `slurm-heal check`:", 1)[1]
    table = table.split("\n\n", 2)[1]
    listed = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    own = {v for k, v in vars(runner).items() if k.startswith("EXIT_")}
    assert own | {3, 6, 124} <= listed, sorted(listed)


def test_every_variable_the_glue_reads_is_documented() -> None:
    """SPEC I1: SLURM_HEAL_DEADLINE, SLURM_HEAL_TIMEOUT, ... were only in the scripts'
    comments."""
    read = {m for f in GLUE.iterdir() if f.is_file()
            for m in re.findall(r"\$\{(SLURM_HEAL_[A-Z_]+)", f.read_text())
            # a function's own `local` variable is no variable the glue reads
            if not re.search(r"^\s*local\b[^\n]*\b" + m + r"\b", f.read_text(), flags=re.M)}
    doc = CHECKS_DOC.read_text()
    assert read and [v for v in sorted(read) if f"`{v}`" not in doc] == []
