"""The model's window in words, for the console's budgets panel and the headless summary."""

from __future__ import annotations


def context_text(window: int | None, compactions: int, last: tuple[int, int] | None = None) -> str:
    """The line the console and the headless summary give the model's window."""
    shrunk = f": {last[0]:,}→{last[1]:,} tokens" if last else ""
    if window is None:
        if compactions:  # only ever when the provider said the prompt overflowed
            return f"context window unknown: compacted x{compactions:,} on overflow{shrunk}"
        return "context window unknown: no compaction"
    if not compactions:
        return ""
    return f"context compacted x{compactions:,}{shrunk} (window {window:,})"
