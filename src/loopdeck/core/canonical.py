"""Canonical JSON and the hashes built on it: fingerprints must not depend on key order,
spelling (NFC) or how a value was typed (the tool's model decides that)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from loopdeck.core.text import storable

MAX_DEPTH = 64


class NotCanonical(ValueError):
    """A value that has no canonical form: nested too deep, or not JSON data."""


# One encoder for every call (`json.dumps` builds one per call when given options).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8", "backslashreplace")).hexdigest()


def short_hash(value: Any, length: int = 12) -> str:
    return sha256_hex(value)[:length]


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
