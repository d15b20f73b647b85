"""The words a run's span events and attributes are made of (`operator/otel_attributes.py`,
`operator/otel_decisions.py`): attribute values, a span event (`Mark`), and the rule that
content (`with_content`) is said only when asked for."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Value = str | bool | int | float | Sequence[str]
Attributes = dict[str, Value]
Said = Mapping[str, Value | None]


@dataclass(frozen=True)
class Mark:
    """A span event: its name, attributes, and the call whose span it goes on (None: the
    round's or the run's)."""

    name: str
    attributes: Attributes
    call_id: str | None = None


def kept(attributes: Mapping[str, Value | None]) -> Attributes:
    return {key: value for key, value in attributes.items() if value is not None}


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def when_text(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def marked(name: str, said: Said, call_id: str | None = None) -> Mark:
    return Mark(name, kept(said), call_id)


def with_content(said: Said, content: bool, **contents: Value | None) -> Said:
    """`said`, and with `content` the content fields as `loopdeck.<name>`."""
    if not content:
        return said
    return {**said, **{f"loopdeck.{name}": value for name, value in contents.items()}}
