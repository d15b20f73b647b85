"""A tool's progress as it runs (`ToolProgress`): what a long call says of itself (an MCP
server's `notifications/progress`, a Python tool's `report_progress`), so its operator can tell
a long copy from a hang. Recorded at most once a second per call, and the last report before
the call ends (`core/call_progress.py`); re-exported by `core/events.py`."""

from __future__ import annotations

from typing import Literal

from loopdeck.core.event_base import EventBase
from loopdeck.core.text import capped, visible

MESSAGE_CAP = 200  # a progress message's characters, recorded and said


class ToolProgress(EventBase):
    """How far call `call_id` of `tool` says it is: `progress` of `total` (None: unknown),
    with the tool's `message` (capped at MESSAGE_CAP)."""

    kind: Literal["tool_progress"] = "tool_progress"
    call_id: str
    tool: str
    progress: float
    total: float | None = None
    message: str | None = None

    def words(self) -> str:
        """In words: "3/10 (30%): copying", "3: copying", "3/10 (30%)"."""
        return progress_words(self.progress, self.total, self.message, percent=True)

    def short(self) -> str:
        """For a table's cell: "30% copying" when its total is known, else "3 copying"."""
        done = _percent(self.progress, self.total) or f"{self.progress:g}"
        said = f" {visible(self.message)}" if self.message else ""
        return f"{done}{said}"


def progress_words(
    progress: float, total: float | None, message: str | None, percent: bool = False
) -> str:
    """A report in words: "3/10: copying" (with `percent`, "3/10 (30%): copying")."""
    done = f"{progress:g}" + (f"/{total:g}" if total is not None else "")
    if percent and (share := _percent(progress, total)):
        done += f" ({share})"
    said = f": {capped(visible(message), MESSAGE_CAP)}" if message else ""
    return f"{done}{said}"


def _percent(progress: float, total: float | None) -> str:
    if total is None or total <= 0:
        return ""
    return f"{progress / total * 100:.0f}%"
