"""loopdeck as the ACP client: what the agent sends (session updates, permission requests,
file reads and writes, terminals to create) put on one queue, in the order it came, for the
run's own task to take (`AcpLoop`); the agent's request waits on the answer the run gives.

The SDK runs each incoming message in a task of its own: a handler that awaited before it
queued could let a later update overtake an earlier one, so every handler queues first. File
access is confined to the working copy. A terminal to create is a write the run gates
(`AcpCalls.write`); the other `terminal/*` methods act on terminals loopdeck already runs
(`terminals.py`) and are answered here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopdeck.acp_env.terminals import Terminal, Terminals, UnknownTerminal


@dataclass
class Incoming:
    """One message from the agent; `answer` is set by the run for a request."""

    # "update", "permission", "read", or "write": a request loopdeck gates as a write (a file,
    # or a terminal: its payload then holds "terminal")
    kind: str
    payload: dict[str, Any]
    answer: asyncio.Future[Any] | None = field(default=None)


class OutsideWorkdir(Exception):
    """A path the agent named is not inside the run's working copy."""


def inside(workdir: Path, path: str) -> Path:
    """The agent's path, resolved inside the working copy, or `OutsideWorkdir`."""
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else workdir / candidate).resolve()
    root = workdir.resolve()
    if resolved != root and root not in resolved.parents:
        raise OutsideWorkdir(f"{path} is outside the run's working copy")
    return resolved


class Bridge:
    """The SDK's client: a plain class (the SDK calls each method with keyword arguments)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.queue: asyncio.Queue[Incoming] = asyncio.Queue()
        self.pending: list[Incoming] = []  # requests the run has not answered yet
        self.terminals = Terminals()

    def _request(self, kind: str, payload: dict[str, Any]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = Incoming(kind, payload, future)
        self.pending.append(item)
        self.queue.put_nowait(item)
        return future

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.queue.put_nowait(Incoming("update", {"update": update}))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **_: Any
    ) -> Any:
        future = self._request("permission", {"tool_call": tool_call, "options": options})
        try:
            return await future
        finally:
            self._settled(future)

    async def write_text_file(self, session_id: str, path: str, content: str, **_: Any) -> Any:
        future = self._request("write", {"path": path, "content": content})
        try:
            return await future
        finally:
            self._settled(future)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_: Any,
    ) -> Any:
        from acp import RequestError
        from acp.schema import ReadTextFileResponse

        try:
            text = inside(self.workdir, path).read_text(encoding="utf-8", errors="replace")
        except OutsideWorkdir as exc:
            raise RequestError.invalid_params({"path": str(exc)}) from None
        except OSError:
            raise RequestError.resource_not_found(path) from None
        lines = text.splitlines(keepends=True)
        if line is not None:
            start = max(line - 1, 0)
            lines = lines[start : start + limit if limit else None]
        self.queue.put_nowait(Incoming("read", {"path": path}))
        return ReadTextFileResponse(content="".join(lines))

    # -- terminals --------------------------------------------------------------------------
    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **_: Any,
    ) -> Any:
        request = {
            "command": command,
            "args": list(args or []),
            "env": {str(var.name): str(var.value) for var in env or []},
            "cwd": cwd,
            "output_byte_limit": output_byte_limit,
        }
        future = self._request("write", {"terminal": request})
        try:
            return await future
        finally:
            self._settled(future)

    def _terminal(self, terminal_id: str) -> Terminal:
        from acp import RequestError

        try:
            return self.terminals.get(terminal_id)
        except UnknownTerminal as exc:
            raise RequestError.invalid_params({"terminalId": str(exc)}) from None

    async def terminal_output(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        from acp.schema import TerminalExitStatus, TerminalOutputResponse

        terminal = self._terminal(terminal_id)
        status = None
        if terminal.exited.is_set():
            status = TerminalExitStatus(exit_code=terminal.exit_code, signal=terminal.signal)
        return TerminalOutputResponse(
            output=terminal.tail.text(), truncated=terminal.tail.truncated, exit_status=status
        )

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        """Waits for the command's end; a stop ends every command, so this wait too."""
        from acp.schema import WaitForTerminalExitResponse

        terminal = self._terminal(terminal_id)
        await terminal.exited.wait()
        return WaitForTerminalExitResponse(exit_code=terminal.exit_code, signal=terminal.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        from acp.schema import KillTerminalResponse

        self._terminal(terminal_id).kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **_: Any) -> Any:
        from acp.schema import ReleaseTerminalResponse

        self._terminal(terminal_id)
        self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()

    def _settled(self, future: asyncio.Future[Any]) -> None:
        self.pending = [item for item in self.pending if item.answer is not future]

    def cancel_all(self, cancelled: Any) -> None:
        """At a stop: every permission still waiting is answered `cancelled`, every write
        refused, every terminal's command ended."""
        from acp import RequestError

        self.terminals.kill_all()
        for item in list(self.pending):
            if item.answer is None or item.answer.done():
                continue
            if item.kind == "permission":
                item.answer.set_result(cancelled)
            else:
                item.answer.set_exception(RequestError(-32800, "the turn was cancelled"))
