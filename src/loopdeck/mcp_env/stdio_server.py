"""An MCP server over stdio, started by loopdeck itself under its guardian, as an ACP agent is
(`acp_env/agent_process.py`): its process is loopdeck's own, so its end is seen as it happens
(`ended`, then its exit status), whatever the run waits for, rather than at the next request.

The guardian (`workdir/guardian.py`) runs in a session of its own with the server below it:
nothing the server starts outlives the run or the runner. Its stdout carries one JSON-RPC
message a line (a line that is not one: a warning naming the server, `sdk_noise.py`), its
stderr goes to a file. It is stopped as MCP says (stdin closed, a grace to exit by itself),
then as every guardian is (`stop_guardian`: SIGTERM, SIGKILL past its wait)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TextIO

from loopdeck.mcp_env.sdk_noise import input_of, said_by_server
from loopdeck.workdir.guardian_stop import stop_guardian

READ_CHUNK = 64 * 1024
LINE_LIMIT = 50 * 1024 * 1024  # the longest message line a server may send (as an ACP agent)
EXIT_GRACE_S = 2.0  # after its stdin closes, for the server to exit by itself (MCP's shutdown)
POLL_S = 0.01


class StdioServer:
    def __init__(self, command: list[str], env: dict[str, str], cwd: Path, errlog: TextIO) -> None:
        self.command = command
        self.env = env
        self.cwd = cwd
        self.errlog = errlog
        self.proc: asyncio.subprocess.Process | None = None
        self.ended = asyncio.Event()  # its stdout closed: the server is gone or going

    @property
    def status(self) -> int | None:
        """The guardian's exit status (the server's: 128 + a signal that ended it), once it
        has exited; readable from any thread."""
        return None if self.proc is None else self.proc.returncode

    async def exit_status(self, within_s: float) -> int | None:
        """Its exit status, waited for up to `within_s` (its output ends as it exits)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within_s
        while self.status is None and loop.time() < end:
            await asyncio.sleep(POLL_S)  # not `wait()`: it also waits for every pipe to close
        return self.status

    @contextlib.asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[Any, Any]]:
        """The server started; the session's read and write streams, as the SDK's
        transports give them. Leaving stops the server (bounded, shielded)."""
        import anyio
        from mcp.client.stdio import get_default_environment
        from mcp.shared.message import SessionMessage

        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loopdeck.workdir.guardian", *self.command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self.errlog,
            cwd=self.cwd, env=get_default_environment() | self.env, start_new_session=True,
        )  # fmt: skip
        to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._read, to_session)
            tasks.start_soon(self._write, from_session, to_session)
            try:
                yield read, write
            finally:
                with anyio.CancelScope(shield=True):
                    # The session is done: what the server still writes is read and dropped
                    # (`_read`), never left to fill the pipe it would block on.
                    await read.aclose()
                    await self._stop()
                    await write.aclose()
                tasks.cancel_scope.cancel()

    async def _read(self, to_session: Any) -> None:
        import anyio

        assert self.proc is not None and self.proc.stdout is not None
        stdout, buffer = self.proc.stdout, bytearray()
        try:
            async with to_session:
                while chunk := await stdout.read(READ_CHUNK):
                    buffer += chunk
                    lines: list[bytearray] = []
                    if b"\n" in chunk:  # split once a line ends (a long one: read once)
                        *lines, rest = buffer.split(b"\n")
                        buffer = bytearray(rest)
                    if len(buffer) > LINE_LIMIT:  # a line that never ends: dropped, said
                        said_by_server(f"wrote a line longer than {LINE_LIMIT} bytes: dropped")
                        buffer = bytearray()
                    for line in lines:
                        if (message := _message(line)) is not None:
                            await to_session.send(message)
                if (message := _message(buffer)) is not None:  # its last line, unended
                    await to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The session is gone (loopdeck's own close): the rest is read and dropped.
            with contextlib.suppress(ConnectionError, OSError):
                while await stdout.read(READ_CHUNK):
                    pass
        except ConnectionError:
            pass  # the pipe broke
        finally:
            self.ended.set()

    async def _write(self, from_session: Any, to_session: Any) -> None:
        import anyio

        assert self.proc is not None and self.proc.stdin is not None
        stdin = self.proc.stdin
        try:
            async with from_session:
                async for sent in from_session:
                    data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # Its stdin is closed while it may still run: the session sees the connection
            # end rather than a request that waits for ever.
            await to_session.aclose()

    async def _stop(self) -> None:
        """Stdin closed, a grace to exit, then the guardian stopped; its stdout read to the
        end meanwhile by `_read` (a process is not waited for while a pipe of its is full)."""
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        await self.exit_status(EXIT_GRACE_S)
        await stop_guardian(proc)


def _message(line: bytes | bytearray) -> Any:
    """One line of the server's stdout as a `SessionMessage`; None for a blank line, or for
    one that is not JSON-RPC (said once, as a warning naming the server)."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:
        said_by_server(f"wrote a line that is not JSON-RPC: {input_of(exc)}")
        return None
