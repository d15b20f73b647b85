"""The stdio MCP server's pipes: its last line is read though it ends unended, and what it
writes once the session is done is read and dropped (never a second reader on its stdout, never
a full pipe the server blocks on as it is stopped)."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path

import pytest

from loopdeck.mcp_env.stdio_server import StdioServer

NOTE = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}


def server_of(code: str, folder: Path) -> StdioServer:
    return StdioServer([sys.executable, "-c", code], {}, folder, (folder / "stderr").open("w"))


async def test_a_last_line_without_its_newline_is_read(tmp_path: Path) -> None:
    said = json.dumps(NOTE)
    code = f"import sys; sys.stdout.write({said!r}); sys.stdout.flush()"
    server = server_of(code, tmp_path)
    async with server.streams() as (read, _write):
        got = await asyncio.wait_for(read.receive(), 30)
    assert got.message.model_dump(by_alias=True, exclude_none=True)["method"] == NOTE["method"]


@pytest.mark.parametrize("writes", ["floods", "is quiet"])
async def test_a_server_ignoring_its_stdin_closing_is_stopped_cleanly(
    tmp_path: Path, writes: str
) -> None:
    """It floods its stdout (or says nothing more), ignoring stdin's close: nobody reads for
    the session any more, the pipe is drained while it is stopped, and nothing raises or is
    left unretrieved."""
    line = json.dumps(NOTE) + "\n"
    more = "sys.stdout.write(" + repr(line * 100) + ")" if writes == "floods" else "time.sleep(1)"
    code = f"import sys, time\nprint({line!r}, flush=True)\nwhile True:\n    {more}\n"
    server = server_of(code, tmp_path)
    loop = asyncio.get_running_loop()
    unretrieved: list[object] = []
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        async with server.streams() as (read, _write):
            await asyncio.wait_for(read.receive(), 30)  # it runs; the session then leaves
        assert server.status is not None  # stopped, its pipe drained meanwhile
        await asyncio.sleep(0)
        gc.collect()  # a task's exception nobody retrieved is reported as it goes
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []
