"""A client token of `loopdeck gateway serve`: one run's settings (its goal, folder, check,
upstream, tools' risks, budgets, how its writes are decided, its id), signed with the key the
user's `serve` and `token` share (HMAC-SHA256), so `serve` opens the run a token names and no
other. The settings are readable by whoever holds the token (it is the agent's key, as a
run's token is); they cannot be changed without the key.

    ldg-<base64url JSON of the settings>.<base64url signature>
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

PREFIX = "ldg-"
KEY_BYTES = 32


def key_at(path: Path) -> bytes:
    """The key at `path`, made (readable by the user alone) when there is none."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(key)
    return key


def issue(claims: dict[str, Any], key: bytes) -> str:
    payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
    return f"{PREFIX}{payload}.{_b64(_signature(payload, key))}"


def claims_of(token: str, key: bytes) -> dict[str, Any] | None:
    """The settings a token carries, or None: not one of ours, or not signed with `key`."""
    if not token.startswith(PREFIX) or token.count(".") != 1:
        return None
    payload, signature = token[len(PREFIX) :].split(".")
    try:
        given = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        if not hmac.compare_digest(given, _signature(payload, key)):
            return None
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def _signature(payload: str, key: bytes) -> bytes:
    return hmac.new(key, payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
