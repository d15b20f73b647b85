"""An agent's tool call as the guard keys it and the operator judges it: its input without what
the agent renews on every call, or, when it sends no input, what it shows.

Real agents differ here. Codex's adapter (0.16) put its `call_id`, `process_id`, `turn_id`
and `started_at_ms` in the input: keyed as sent, six identical `cat calc.py` from one state
would be six calls and the guard would never trip. Gemini CLI sends no `rawInput` at all:
keyed as sent, every edit is `{}`, two different writes of one file are one key, and the
operator approves `edit {}`.
So volatile fields are left out (`workdir/volatile.py`'s `steady`: by name, by rule, and by
the agent's own list in `[agent] volatile`), and a call with no input is keyed and shown by its
title, locations and diffs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from loopdeck.core.text import capped
from loopdeck.workdir.tree import relative

DIFF_CAP = 2000  # a diff side's text kept in what the operator sees; the key hashes it whole
NOTHING_TO_JUDGE = (
    "the agent sent nothing to judge this call by: no input, no locations, no diff; only its title"
)


def shown_input(call: Any, workdir: Path) -> dict[str, Any]:
    """A call with no input, as the agent shows it: its locations and its diffs (each side's
    hash, and its text capped for the operator)."""
    shown: dict[str, Any] = {}
    locations = [relative(str(loc.path), workdir) for loc in (call.locations or [])]
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
        "path": relative(str(item.path), workdir),
        "old_sha256": None if old is None else _sha(old),
        "new_sha256": _sha(new),
        "old_text": None if old is None else capped(old, DIFF_CAP),
        "new_text": capped(new, DIFF_CAP),
    }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


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
    return {relative(path, workdir) for path in named}
