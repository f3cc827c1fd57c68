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
import re
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


# `nesting_exceeds`: the bytes deleted to keep the brackets (and quotes); an empty pair.
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_NOT_MARKS = bytes(set(range(256)) - set(b'[]{}"'))
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")


def _levels_exceed(marks: bytes, max_depth: int) -> bool:
    """Whether brackets alone (``[[]{}]``) nest more than ``max_depth``; unbalanced ones
    count as too deep. A pass of `bytes.replace` removes one or two levels of empty pairs
    (``{[]}`` goes whole): where that many passes empty them, they nest no deeper than
    twice as many (a snapshot: 5 passes, a few ms). Else exactly: a regex pass removes
    the empty pairs that were there before it, one level."""
    quick = marks
    for _ in range(max_depth // 2):
        quick = quick.replace(b"[]", b"").replace(b"{}", b"")
        if not quick:
            return False
    for _ in range(max_depth):
        marks, removed = _EMPTY_PAIR.subn(b"", marks)
        if not marks or not removed:
            break
    return bool(marks)


def nesting_exceeds(text: str | bytes | bytearray, max_depth: int = MAX_DEPTH) -> bool:
    """Whether the JSON document ``text`` nests more than ``max_depth`` levels, read from
    the text (issue 38): the same answer on every Python, where a decoder's own guard
    follows the interpreter (msgspec refused 2,000 levels on 3.10 and 3.11 and read them
    on 3.13, whose limit is the C stack's). ``text`` must be valid JSON (decode it first).

    Byte operations at C speed. The brackets alone first (about 35 ms for 10,000 nodes
    of pretty-printed JSON, 25 MB, which msgspec decodes in about 200): a document they
    show shallow and balanced is taken as such. Only where they do not (brackets inside
    strings, or real depth) are the strings taken out exactly (their escapes first) and
    the brackets outside them counted. Brackets inside strings could make a deep document
    look shallow only in an answer whose structure is itself made to nest, which the
    decoder's own limit still stops."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if len(raw) <= max_depth or not _levels_exceed(raw.translate(None, _NOT_BRACKETS),
                                                   max_depth):
        return False
    # An escaped backslash, then an escaped quote: what is left of a string's escapes
    # holds no quote; then every other quote opens or closes a string.
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return _levels_exceed(b"".join(raw.translate(None, _NOT_MARKS).split(b'"')[::2]),
                          max_depth)


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
