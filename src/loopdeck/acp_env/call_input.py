"""An agent's tool call as the guard keys it and the operator judges it: its input without what
the agent renews on every call, or, when it sends no input, what it shows.

Real agents differ here. Codex's adapter (0.16) put its `call_id`, `process_id`, `turn_id`
and `started_at_ms` in the input: keyed as sent, six identical `cat calc.py` from one state
would be six calls and the guard would never trip. Gemini CLI sends no `rawInput` at all:
keyed as sent, every edit is `{}`, two different writes of one file are one key, and the
operator approves `edit {}`.
So volatile fields are left out (by name, by rule, and by the agent's own list in `[agent]
volatile`), and a call with no input is keyed and shown by its title, locations and diffs.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loopdeck.core.text import capped

# Fields an agent renews on every call, by name (codex-acp 0.16's `call_id`, `process_id`,
# `turn_id`, `started_at_ms`; ACP's own ids). A field is left out by name, or by rule when its
# name says id or time and its value looks made per call (a uuid, a long token, an epoch, an
# ISO time): `issue_id = 2` is the call's input and stays.
VOLATILE_NAMES = frozenset(
    {"call_id", "callid", "tool_call_id", "toolcallid", "process_id", "processid", "pid",
     "turn_id", "turnid", "session_id", "sessionid", "request_id", "requestid", "nonce",
     "timestamp", "started_at", "startedat", "started_at_ms", "startedatms"}
)  # fmt: skip
ID_NAME = re.compile(r"(?i)(?:^|_)(?:id|uuid)$|[a-z0-9](?:Id|Uuid)$")
TIME_NAME = re.compile(
    r"(?i)(?:^|_)(?:at|at_ms|at_ns|time|timestamp|ts)$|[a-z0-9](?:At|AtMs|Time)$"
)
MADE_TOKEN = re.compile(
    r"(?i)^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|[a-z]{0,8}[_-]?(?=[a-z0-9]*[0-9])(?=[a-z0-9]*[a-z])[a-z0-9]{12,})$"
)
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
EPOCH_S = 1_000_000_000  # a number past this, named as a time, is a clock reading
DIFF_CAP = 2000  # a diff side's text kept in what the operator sees; the key hashes it whole
NOTHING_TO_JUDGE = (
    "the agent sent nothing to judge this call by: no input, no locations, no diff; only its title"
)


def volatile(name: str, value: Any, extra: Iterable[str] = ()) -> bool:
    """Whether a field is one the agent renews per call (never the call's own input)."""
    if name in extra or name.lower() in VOLATILE_NAMES:
        return True
    if ID_NAME.search(name):
        return isinstance(value, str) and bool(MADE_TOKEN.match(value))
    if TIME_NAME.search(name):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value >= EPOCH_S
        return isinstance(value, str) and bool(ISO_TIME.match(value))
    return False


def steady(value: Any, extra: frozenset[str] = frozenset()) -> Any:
    """The input without the fields the agent renews per call, at any depth."""
    if isinstance(value, dict):
        return {k: steady(v, extra) for k, v in value.items() if not volatile(str(k), v, extra)}
    if isinstance(value, list):
        return [steady(v, extra) for v in value]
    return value


def shown_input(call: Any, workdir: Path) -> dict[str, Any]:
    """A call with no input, as the agent shows it: its locations and its diffs (each side's
    hash, and its text capped for the operator)."""
    shown: dict[str, Any] = {}
    locations = [_relative(str(loc.path), workdir) for loc in (call.locations or [])]
    if locations:
        shown["locations"] = locations
    diffs = []
    for item in call.content or []:
        if getattr(item, "type", "") == "diff":
            diffs.append(_diff(item, workdir))
    if diffs:
        shown["diffs"] = diffs
    texts = [
        text
        for item in call.content or []
        if getattr(item, "type", "") == "content"
        and (text := getattr(getattr(item, "content", None), "text", None))
    ]
    if texts:
        shown["content"] = capped("\n".join(texts), DIFF_CAP)
    return shown


def _diff(item: Any, workdir: Path) -> dict[str, Any]:
    old, new = item.old_text, item.new_text or ""
    return {
        "path": _relative(str(item.path), workdir),
        "old_sha256": None if old is None else _sha(old),
        "new_sha256": _sha(new),
        "old_text": None if old is None else capped(old, DIFF_CAP),
        "new_text": capped(new, DIFF_CAP),
    }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _relative(path: str, workdir: Path) -> str:
    with contextlib.suppress(ValueError, OSError):
        return Path(path).resolve().relative_to(workdir.resolve()).as_posix()
    return path


def named_paths(call: Any, workdir: Path, raw: Any) -> set[str]:
    """The working copy's files a call names (its locations, its diffs' paths, its input's
    path fields), relative: what a permission for it explains if they change."""
    named: list[str] = [str(loc.path) for loc in (call.locations or [])]
    for item in call.content or []:
        if getattr(item, "type", "") == "diff":
            named.append(str(item.path))
    if isinstance(raw, dict):
        for key in ("path", "file_path", "filePath", "absolute_path", "notebook_path"):
            if isinstance(raw.get(key), str):
                named.append(raw[key])
    return {_relative(path, workdir) for path in named}
