"""What `scenario.toml` must say as TOML says it, before its models read it: a number is a
number and a boolean a boolean (pydantic's lax reading took `"30"` as 30 and `"yes"` as true,
while refusing 3.7), a table the scenario has is spelled as it is (`[budget]`: "did you mean
[budgets]?"), and `goal_check` (and its timeout) only in an env whose kind runs it."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

Loc = tuple[str | int, ...]
# The scenario's own tables (a kind's, `[mcp]`, `[agent]`, are its kind's to check).
TABLES = ("budgets", "scripted_price", "data", "scripts", "model_profile")
NO_GOAL_CHECK = (
    "a goal_check command and its goal_check_timeout_s are an [mcp], [agent] or [gateway]"
    " env's: a Python env's goal check is its env.py's unmet(), bounded by its class's"
    " goal_check_timeout_s (60 s unless env.py sets it)"
)


def misspelled_table(raw: dict[str, Any], known: typing.Iterable[str]) -> tuple[str, str] | None:
    """A top-level table the scenario does not have, and the one of its tables it is close
    to (`budget`, `budgets`); None when there is none such."""
    for key, value in raw.items():
        if not isinstance(value, dict) or key in known:
            continue
        meant = difflib.get_close_matches(key, TABLES, n=1, cutoff=0.75)
        if meant:
            return key, meant[0]
    return None


def loose_values(model: type[BaseModel], raw: Any, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Each number or boolean field of `model` (and of the models inside it) that `raw` gives
    as something else: its place, and what it wants."""
    if not isinstance(raw, dict):
        return
    for key, value in raw.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is not None:
            yield from _loose(field.annotation, value, (*loc, key))


def goal_check_problems(raw: dict[str, Any], known: typing.Iterable[str]) -> list[Loc]:
    """`goal_check` or `goal_check_timeout_s` in a Python env (no kind's table), where
    nothing runs or bounds them: refused, never silently left unused."""
    kinds = [k for k, v in raw.items() if isinstance(v, dict) and k not in known]
    if kinds:
        return []
    return [(key,) for key in ("goal_check", "goal_check_timeout_s") if key in raw]


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{type(value).__name__} {value!r}"


def _loose(annotation: Any, value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        chosen = [a for a in args if a is not type(None)]
        if value is not None and len(chosen) == 1:
            yield from _loose(chosen[0], value, loc)
    elif annotation is bool:
        if not isinstance(value, bool):
            yield loc, f"true or false, not {_shown(value)}"
    elif annotation in (int, float):
        if isinstance(value, bool | str):
            yield loc, f"a number, not {_shown(value)}"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from loose_values(annotation, value, loc)
    elif origin is dict and len(args) == 2 and isinstance(value, dict):
        for key, item in value.items():
            yield from _loose(args[1], item, (*loc, key))
    elif origin is list and len(args) == 1 and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _loose(args[0], item, (*loc, index))


def meant_key(root: Any, loc: Loc) -> str | None:
    """The key a table takes that an unknown key at `loc` is close to (`max_turn`,
    `max_turns`), `root` being the type read; None when there is none such."""
    keys = _keys_at(root, loc[:-1])
    if not keys or not isinstance(loc[-1], str):
        return None
    meant = difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6)
    return meant[0] if meant else None


def _keys_at(annotation: Any, loc: Loc) -> list[str]:
    """The keys the table at `loc` inside a value of type `annotation` takes."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        chosen = [a for a in args if a is not type(None)]
        return _keys_at(chosen[0], loc) if len(chosen) == 1 else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not loc:
            return [name for name in annotation.model_fields if name != "tables"]
        field = annotation.model_fields.get(str(loc[0]))
        return _keys_at(field.annotation, loc[1:]) if field is not None else []
    if loc and origin is dict and len(args) == 2:
        return _keys_at(args[1], loc[1:])
    if loc and origin is list and len(args) == 1 and isinstance(loc[0], int):
        return _keys_at(args[0], loc[1:])
    return []
