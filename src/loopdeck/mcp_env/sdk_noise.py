"""What an MCP server says that is not JSON-RPC, as one warning naming the server on
`loopdeck.mcp`, never the SDK's traceback: a line on a stdio server's stdout (read by
`stdio_server.py`), a malformed message over HTTP or a malformed notification (the SDK's own
records, filtered: `SdkNoise`)."""

from __future__ import annotations

import contextvars
import json
import logging

from pydantic import ValidationError

from loopdeck.core.text import capped, visible

SAID_CAP = 200
log = logging.getLogger("loopdeck.mcp")
# The server whose connection's loop runs the current task: the SDK's records name none.
SERVER: contextvars.ContextVar[str] = contextvars.ContextVar("loopdeck_mcp_server", default="")


def said_by_server(words: str) -> None:
    """One warning naming the server whose connection's loop runs the current task."""
    log.warning("MCP server `%s` %s", SERVER.get() or "(unnamed)", words)


class SdkNoise(logging.Filter):
    """The SDK logs each message over HTTP it could not read, and each malformed
    notification, with a pydantic traceback, over the console and a headless run's output: each
    becomes one warning naming the server, on `loopdeck.mcp`. The record's task runs on its
    connection's loop, whose context names the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = _noise(record)
        if said is None:
            return True
        said_by_server(said)
        return False


# The SDK's records (mcp 2.3) of a message it could not read, by logger and words.
_PARSE = {"mcp.client.streamable_http": "Error parsing"}
_NOTIFICATION = ("client", "Failed to validate notification")  # the SDK's session's logger
_SDK_NOISE = SdkNoise()


def quiet_sdk_noise() -> None:
    for name in (*_PARSE, _NOTIFICATION[0]):
        logger = logging.getLogger(name)
        if _SDK_NOISE not in logger.filters:
            logger.addFilter(_SDK_NOISE)


def _noise(record: logging.LogRecord) -> str | None:
    """What the server said, in words, for a record of the SDK's not reading it; else None."""
    exc = record.exc_info[1] if record.exc_info else None
    words, parse = str(record.msg), _PARSE.get(record.name)
    if parse is not None and words.startswith(parse):
        return f"wrote a line that is not JSON-RPC: {input_of(exc)}"
    if (record.name, words.split(":")[0]) == _NOTIFICATION:
        method = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        return f"sent a malformed notification `{method}`: {_errors_of(exc)}"
    return None


def input_of(exc: BaseException | None) -> str:
    """The line the server wrote, as pydantic kept it, shown as text and capped."""
    if isinstance(exc, ValidationError) and exc.errors():
        given = exc.errors()[0].get("input")
        text = given if isinstance(given, str) else json.dumps(given, default=str)
    else:
        text = str(exc)
    return capped(visible(text), SAID_CAP)


def _errors_of(exc: BaseException | None) -> str:
    if not isinstance(exc, ValidationError):
        return capped(visible(str(exc)), SAID_CAP)
    said = "; ".join(
        f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()[:3]
    )
    return capped(visible(said), SAID_CAP)
