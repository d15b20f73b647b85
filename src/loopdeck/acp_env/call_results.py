"""What an ACP agent's finished call showed, as loopdeck records it (`ToolFinished`'s result):
its text, diffs, terminals and raw output, each capped; or its failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode


def failed(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"ok": False, "data": None, "error": {"code": code.value, "message": message}}


def result_of(update: Any, terminal: Callable[[str], dict[str, Any] | None]) -> dict[str, Any]:
    """What a finished call showed: its text, its diffs (paths and sizes), its locations, the
    terminals it embeds (their command, exit and output's tail)."""
    texts, diffs, terminals = [], [], []
    for item in update.content or []:
        kind = getattr(item, "type", "")
        if kind == "terminal":
            shown = terminal(str(item.terminal_id))
            terminals.append(shown or {"terminal": str(item.terminal_id), "unknown": True})
        elif kind == "diff":
            diffs.append({"path": str(item.path), "new_chars": len(item.new_text or "")})
        elif kind == "content":
            text = getattr(item.content, "text", None)
            if text:
                texts.append(text)
    data: dict[str, Any] = {"text": capped("\n".join(texts), 2000)} if texts else {}
    if diffs:
        data["diffs"] = diffs
    if terminals:
        data["terminals"] = terminals
    if update.raw_output is not None:
        data["output"] = capped(str(update.raw_output), 2000)
    if update.status == "failed":
        return failed(ErrorCode.TOOL_ERROR, data.get("text") or "the agent says the call failed")
    return {"ok": True, "data": data}
