"""JSON from outside, read with a bound on nesting (issue: trust under faults).

``json.loads`` recurses once per nesting level: a few thousand ``[`` raise
``RecursionError``, which is not a ``ValueError`` and so slips past every ``except
ValueError`` that guards a parse, and a document just under the interpreter's limit
still breaks whatever walks it later (pydantic, ``json.dumps``, ``repr``). Everything
slurm-heal reads from another program (Slurm's Extra, a provider's answer, the store,
a scenario) goes through `loads`, which turns both into a ``ValueError`` naming the
limit. Light on purpose: the node check imports it.
"""

from __future__ import annotations

import json
from typing import Any

# Deeper than anything slurm-heal writes or reads (the store is about 8 levels deep),
# far below the interpreter's recursion limit.
MAX_DEPTH = 64


class TooDeep(ValueError):
    """The JSON nests deeper than allowed."""


def depth_exceeds(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (lists and dicts) nests more than ``max_depth`` levels.
    Iterative: never recurses itself."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises ValueError (never RecursionError) and refuses nesting
    deeper than ``max_depth``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested too deeply (more than {max_depth} levels)") from None
    # A document cannot nest deeper than it has opening brackets: counted on the text
    # (C speed), the walk is left out for nearly everything (a node's Extra; issue 26).
    opened = text.count("[") + text.count("{") if isinstance(text, str) else \
        text.count(b"[") + text.count(b"{")
    if opened > max_depth and depth_exceeds(value, max_depth):
        raise TooDeep(f"JSON nested too deeply (more than {max_depth} levels)")
    return value


def parse_extra(raw: str) -> dict[str, Any] | None:
    """A node's Extra text as a dict when it is a JSON object (empty text: an empty
    one), else None (someone else's text). `slurm_heal.extra.parse_extra` is this."""
    raw = (raw or "").strip()
    if not raw or raw in ("(null)", "none", "None"):
        return {}
    try:
        value = loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
