"""What every provider's own settings model is made of (issue 21): the ``[provider]``
section is validated by a pydantic model the provider owns (``HttpSettings`` in http.py,
``AwsSettings`` in aws.py, ...), read through `config.read_section`, so a problem is a
ConfigError naming the key (``provider.read_timeout``) and why, and the file where the
caller knows it. A third-party provider subclasses `ProviderSettings` the same way
(docs/providers.md "Third-party providers").

The field types keep the words the section always had: one duration rule ("10s", "2m",
or bare seconds, `durations.parse_seconds`), integers and flags that are not coerced
from strings, tables of strings, the actions a provider supports. Imported when a
provider is built, never by `slurm_heal.providers` itself (no pydantic at its import).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict

from slurm_heal.config import read_section
from slurm_heal.durations import parse_seconds
from slurm_heal.types import Action

SECTION = "provider"
DOCS = "docs/providers.md"


class ProviderSettings(BaseModel):
    """The keys of every ``[provider]`` section; a provider's model adds its own. An
    unknown key is an error naming it."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    type: str
    state_dir: str | None = None


S = TypeVar("S", bound=ProviderSettings)


def read_provider_section(model: type[S], cfg: Mapping[str, Any], *, file: str = "") -> S:
    """``cfg`` (the ``[provider]`` table) validated as ``model``; ConfigError names the
    key (``provider.url``), why, and ``file`` when given."""
    return read_section(model, dict(cfg), file=file, key=SECTION, docs=DOCS)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def _required(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def required(value: Any) -> Any:
        if value is None:
            raise ValueError("is required")
        return check(value)
    return required


def _url(value: Any) -> str:
    text = _text(value)
    if not text.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, not {text!r}")
    return text


def _seconds(minimum: float) -> Callable[[Any], float]:
    def seconds(value: Any) -> float:
        got = parse_seconds(value)  # ValueError in the words of every duration
        if got < minimum:
            raise ValueError(f"must be at least {minimum:g}s, not {value!r}")
        return got
    return seconds


def _integer(minimum: int) -> Callable[[Any], int]:
    def integer(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"must be an integer >= {minimum}, not {value!r}")
        return value
    return integer


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _table(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()):
        raise ValueError("must be a table of name = \"string\"")
    return dict(value)


def _verify(value: Any) -> bool | str:
    if not isinstance(value, (bool, str)) or value == "":
        raise ValueError("must be true, false or a CA bundle path")
    return value


def supported_action(name: Any, supported: frozenset[Action]) -> Action | None:
    """The action ``name`` names when it is one of ``supported``, else None."""
    try:
        action = Action(name)
    except ValueError:
        return None
    return action if action in supported else None


def words_of(actions: frozenset[Action]) -> str:
    return ", ".join(sorted(a.value for a in actions))


def actions_of(supported: frozenset[Action]) -> BeforeValidator:
    """The ``actions`` key: a list of some of the ``supported`` actions."""
    def actions(value: Any) -> frozenset[Action]:
        if not isinstance(value, list):
            raise ValueError("must be a list of actions")
        out = set()
        for item in value:
            action = supported_action(item, supported)
            if action is None:
                raise ValueError(f"{item!r} is not one of {words_of(supported)}")
            out.add(action)
        return frozenset(out)
    return BeforeValidator(actions)


Text = Annotated[str, BeforeValidator(_text)]
RequiredText = Annotated[str, BeforeValidator(_required(_text))]  # Field(None, validate_default=True)
Url = Annotated[str, BeforeValidator(_url)]
RequiredUrl = Annotated[str, BeforeValidator(_required(_url))]
Duration = Annotated[float, BeforeValidator(_seconds(0.0))]  # backoff: 0 is allowed
Timeout = Annotated[float, BeforeValidator(_seconds(0.001))]  # a timeout is never 0
LongTimeout = Annotated[float, BeforeValidator(_seconds(1.0))]  # deadlines: a second or more
Count = Annotated[int, BeforeValidator(_integer(1))]
Port = Annotated[int, BeforeValidator(_integer(0))]  # 0: any free port
Flag = Annotated[bool, BeforeValidator(_flag)]
StrTable = Annotated[dict[str, str], BeforeValidator(_table)]
Verify = Annotated[bool | str, BeforeValidator(_verify)]
