"""Keeping a conversation inside the model's window: pin the task, shorten the oldest turns."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loopdeck.core.text import json_text

Message = dict[str, Any]
TokenCounter = Callable[[list[Message]], int]

PINNED = 2  # the system prompt and the original task (or plan) are never trimmed


def _turns(messages: list[Message]) -> list[list[Message]]:
    """Group an assistant message with the tool results that answer it."""
    turns: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "tool" and turns:
            turns[-1].append(message)
        else:
            turns.append([message])
    return turns


def _one_line(message: Message, latest_keys: set[str]) -> Message:
    content = message.get("content")
    if not isinstance(content, str) or "tool_result" not in content:
        return message
    try:
        payload = json.loads(content)["tool_result"]
    except (ValueError, KeyError, TypeError):
        return message
    key = message.get("tool_call_id") or ""
    if key in latest_keys:
        return message  # the newest result of its call is still referenced: keep it whole
    if not payload.get("ok", True) and payload.get("error"):
        error = payload["error"]
        line = f"failed ({error.get('code', 'ERROR')}): {str(error.get('message', ''))[:80]}"
    else:
        data = json_text(payload.get("data"))
        line = f"ok: {data[:100]}" + ("…" if len(data) > 100 else "")
    return {**message, "content": f"[compacted] {line}"}


def compact(messages: list[Message]) -> list[Message]:
    """Shorten the oldest third of the turns after the pinned head; decisions stay verbatim."""
    head, rest = messages[:PINNED], messages[PINNED:]
    turns = _turns(rest)
    if len(turns) < 3:
        return messages
    oldest = len(turns) // 3
    latest_keys = {
        m.get("tool_call_id", "")
        for turn in turns[oldest:]
        for m in turn
        if m.get("role") == "tool"
    }
    shortened = [_one_line(m, latest_keys) for turn in turns[:oldest] for m in turn]
    kept = [m for turn in turns[oldest:] for m in turn]
    return head + shortened + kept


def needs_compaction(tokens: int, window: int | None) -> bool:
    return window is not None and tokens > window // 2
