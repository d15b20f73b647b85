"""Canonical JSON and the hashes built on it: fingerprints must not depend on key order,
spelling (NFC) or how a value was typed (the tool's model decides that)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from loopdeck.core.text import storable

MAX_DEPTH = 64
# How deep JSON data an env hands over may nest (a snapshot): its store serializes it.
MAX_DATA_DEPTH = 200


class NotCanonical(ValueError):
    """A value that has no canonical form: nested too deep, or not JSON data."""


# One encoder for every call (`json.dumps` builds one per call when given options).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


# The same text for JSON data, refusing anything else (`data_hash`).
_STRICT = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8", "backslashreplace")).hexdigest()


def short_hash(value: Any, length: int = 12) -> str:
    return sha256_hex(value)[:length]


def data_hash(value: Any, length: int = 12) -> str:
    """`short_hash` of JSON data; `NotCanonical` naming where `value` is not JSON data (an
    object, a set, a date, NaN: `short_hash` would hash its `str`)."""
    try:
        text = _STRICT.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotCanonical(json_data_problem(value) or f"{type(exc).__name__}: {exc}") from None
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:length]


def normalized(value: Any, depth: int = 0) -> Any:
    """JSON data with every string (keys too) NFC-normalized and encodable."""
    if depth > MAX_DEPTH:
        raise NotCanonical(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): normalized(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    raise NotCanonical(f"{type(value).__name__} is not JSON data")


def canonical_args(args_model: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """The one form of a call's arguments: validated by the tool's model (coerced, defaults
    filled), dumped as JSON data, normalized. Raises pydantic's ValidationError or NotCanonical."""
    parsed = args_model.model_validate(normalized(raw))
    dumped: dict[str, Any] = normalized(parsed.model_dump(mode="json"))
    return dumped


def _key_path(path: str, key: object) -> str:
    return f'{path}["{key}"]' if isinstance(key, str) else f"{path}[{key!r}]"


def json_data_problem(value: Any, path: str = "", _within: tuple[int, ...] = ()) -> str | None:
    """Where `value` is not JSON data, and what is there (`["obj"] is of type object`); None
    when it is: dicts of str keys, lists (tuples read as lists), str, int, finite float,
    bool, None, nested at most `MAX_DATA_DEPTH` levels."""
    where = path or "the value"
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f"{where} is {value!r} (JSON has no NaN or infinity)"
        return None
    if not isinstance(value, dict | list | tuple):
        hint = " (a list is JSON data)" if isinstance(value, set | frozenset) else ""
        return f"{where} is of type {type(value).__name__}{hint}"
    if id(value) in _within:
        return f"{where} holds itself"
    if len(_within) >= MAX_DATA_DEPTH:
        return f"{where} is nested deeper than {MAX_DATA_DEPTH} levels"
    within = (*_within, id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool | None):  # json reads those as str
                return (
                    f"{_key_path(path, key)} has a key of type {type(key).__name__}"
                    " (JSON's keys are str)"
                )
            if (found := json_data_problem(item, _key_path(path, key), within)) is not None:
                return found
        return None
    for index, item in enumerate(value):
        if (found := json_data_problem(item, f"{path}[{index}]", within)) is not None:
            return found
    return None
