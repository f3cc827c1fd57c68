"""The JSON bodies of the API's POST requests (SPEC O5): validated by the app, described
by the OpenAPI document. Their own module, so `openapi` needs nothing of `app`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_REASON = 2000
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
TOKEN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # detector names and request ids (Q3)


class Body(BaseModel):
    """Every request body: frozen, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DecisionBody(Body):
    """approve / deny / cancel: why, kept in the audit record (SPEC P4)."""

    reason: str = Field(default="", max_length=MAX_REASON)


class RequestBody(Body):
    """A person's request for an action on a node (SPEC Q1-Q4)."""

    node: str = Field(pattern=NODE_NAME.pattern, max_length=128)
    action: Literal["reboot", "rebuild", "migrate", "remove"]
    reason: str = Field(min_length=1, max_length=MAX_REASON)
    detector: str | None = Field(default=None, pattern=TOKEN.pattern)
    id: str | None = Field(default=None, pattern=TOKEN.pattern)


class ReasonBody(Body):
    """breaker reset / unpause: why (optional)."""

    reason: str = Field(default="", max_length=MAX_REASON)


class PauseBody(Body):
    """pause: why is required, so the overview can say it (SPEC O2)."""

    reason: str = Field(min_length=1, max_length=MAX_REASON)
