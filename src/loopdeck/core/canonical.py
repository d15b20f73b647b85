"""Canonical JSON and the hashes built on it: fingerprints must not depend on key order."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def short_hash(value: Any, length: int = 12) -> str:
    return sha256_hex(value)[:length]
