"""What an MCP server logs (`notifications/message`): a warning or worse said on `loopdeck.mcp` in
the server's words, and kept as the run's finding (`Finding`: live in the console, stored,
replayed, exported), up to LOGGED_SHOWN in a run, more being one line saying so; info and
debug are neither. What loopdeck says of the server (`say`: its tools changed under the run)
is said and kept the same way. What the server logs before its run listens (as it starts and
lists its tools) is kept, and told in order once it does (`tell`): nothing logged is only
printed."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from loopdeck.core.finding_events import RiskRaised
from loopdeck.core.text import capped, visible
from loopdeck.mcp_env.sdk_noise import log

# The server's log levels said (RFC 5424's, as MCP names them); info and debug are not.
LOGGED_LEVELS = {
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.ERROR,
    "alert": logging.ERROR,
    "emergency": logging.ERROR,
}
LOGGED_SHOWN = 50  # a server's log messages said in one run; more is one line saying so
WORDS_CAP = 1000  # a message's words
Told = Callable[[str, RiskRaised | None], None]  # a finding, and the write it made of a read


class ServerLog:
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0  # the messages said
        self._lock = threading.Lock()
        self._told: Told | None = None
        self._kept: list[tuple[str, RiskRaised | None]] = []  # said before the run listened

    async def logged(self, params: Any) -> None:
        """The SDK's `logging_callback`, on the connection's loop."""
        level = LOGGED_LEVELS.get(str(params.level))
        if level is None or self.count > LOGGED_SHOWN:
            return
        self.count += 1
        if self.count > LOGGED_SHOWN:
            said = f"logged more than {LOGGED_SHOWN} warnings; the rest are not shown"
            self._said(logging.WARNING, f"MCP server `{self.name}` {said}")
            return
        data = params.data if isinstance(params.data, str) else json.dumps(params.data, default=str)
        source = f" ({params.logger})" if params.logger else ""
        words = capped(visible(data), WORDS_CAP)
        self._said(level, f"MCP server `{self.name}` logged {params.level}{source}: {words}")

    def say(self, words: str, raised: RiskRaised | None = None) -> None:
        """loopdeck's own word on the server (its tools changed under the run), said and kept
        as its log's warnings are, never counted among them; `raised`: the read it made a
        write, carried with the finding as data (`tool_changes.py`)."""
        self._said(logging.WARNING, words, raised)

    def _said(self, level: int, words: str, raised: RiskRaised | None = None) -> None:
        log.log(level, "%s", words)
        with self._lock:  # told in the order logged, the kept ones first
            if self._told is None:
                self._kept.append((words, raised))
            else:
                self._told(words, raised)

    def tell(self, told: Told) -> None:
        """`told(words, raised)` for each message said from now on, from the connection's
        thread; those said before, at once, in order."""
        with self._lock:
            self._told, kept, self._kept = told, self._kept, []
            for words, raised in kept:
                told(words, raised)
