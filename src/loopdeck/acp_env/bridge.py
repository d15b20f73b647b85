"""loopdeck as the ACP client: what the agent sends (session updates, permission requests,
file reads and writes, terminals to create) put on one queue, in the order it came, for the
run's own task to take (`AcpLoop`); the agent's request waits on the answer the run gives.

The SDK runs each incoming message in a task of its own: a handler that awaited before it
queued could let a later update overtake an earlier one, so every handler queues first. File
access is confined to the working copy, a file read with no link followed
(`confined_files.py`: a folder swapped for a link mid-read refuses the read). A terminal to
create is a write the run gates (`AcpCalls.write`); the other `terminal/*` methods act on
terminals loopdeck already runs (`terminals.py`) and are answered here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopdeck.acp_env.confined_files import read_inside
from loopdeck.acp_env.terminals import Terminal, Terminals, UnknownTerminal

if TYPE_CHECKING:  # the SDK's own models, imported when a run starts its agent
    from acp.schema import (
        AgentMessageChunk,
        AgentPlanContentUpdate,
        AgentPlanRemovedUpdate,
        AgentPlanUpdate,
        AgentThoughtChunk,
        AvailableCommandsUpdate,
        ConfigOptionUpdate,
        CreateTerminalResponse,
        CurrentModeUpdate,
        EnvVariable,
        KillTerminalResponse,
        PermissionOption,
        ReadTextFileResponse,
        ReleaseTerminalResponse,
        RequestPermissionResponse,
        SessionInfoUpdate,
        TerminalOutputResponse,
        ToolCallProgress,
        ToolCallStart,
        ToolCallUpdate,
        UsageUpdate,
        UserMessageChunk,
        WaitForTerminalExitResponse,
        WriteTextFileResponse,
    )

    SessionUpdate = (
        UserMessageChunk
        | AgentMessageChunk
        | AgentThoughtChunk
        | ToolCallStart
        | ToolCallProgress
        | AgentPlanUpdate
        | AgentPlanContentUpdate
        | AgentPlanRemovedUpdate
        | AvailableCommandsUpdate
        | CurrentModeUpdate
        | ConfigOptionUpdate
        | SessionInfoUpdate
        | UsageUpdate
    )


@dataclass
class Updated:
    """A `session/update`: the SDK's typed update."""

    update: SessionUpdate


@dataclass
class FileRead:
    """A file the agent read through loopdeck (answered at once: reads are not gated)."""

    path: str


@dataclass
class Asked:
    """A request the run answers: its `answer` is set (or its error) by the run's task."""

    answer: asyncio.Future[Any] = field(init=False, repr=False)


@dataclass
class PermissionAsked(Asked):
    tool_call: ToolCallUpdate
    options: list[PermissionOption]


@dataclass
class FileWriteAsked(Asked):
    path: str
    content: str


@dataclass
class TerminalAsked(Asked):
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    output_byte_limit: int | None


Incoming = Updated | FileRead | PermissionAsked | FileWriteAsked | TerminalAsked


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
    """The SDK's `Client`, its methods typed with the SDK's own models."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.queue: asyncio.Queue[Incoming] = asyncio.Queue()
        self.pending: list[Asked] = []  # requests the run has not answered yet
        self.terminals = Terminals()

    async def _asked(self, item: Asked) -> Any:
        item.answer = asyncio.get_running_loop().create_future()
        self.pending.append(item)
        self.queue.put_nowait(item)  # type: ignore[arg-type]  # every Asked is an Incoming
        try:
            return await item.answer
        finally:
            self.pending = [waiting for waiting in self.pending if waiting is not item]

    async def session_update(self, session_id: str, update: SessionUpdate, **_: Any) -> None:
        self.queue.put_nowait(Updated(update))

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **_: Any,
    ) -> RequestPermissionResponse:
        answer: RequestPermissionResponse = await self._asked(PermissionAsked(tool_call, options))
        return answer

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse | None:
        answer: WriteTextFileResponse | None = await self._asked(FileWriteAsked(path, content))
        return answer

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_: Any,
    ) -> ReadTextFileResponse:
        from acp import RequestError
        from acp.schema import ReadTextFileResponse

        try:
            text = read_inside(self.workdir.resolve(), inside(self.workdir, path))
        except OutsideWorkdir as exc:
            raise RequestError.invalid_params({"path": str(exc)}) from None
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None
        except OSError as exc:  # a link where a folder or the file was, a FIFO: not read
            said = (
                f"{path}: not read: the path changed as it was read (a link met on the way is"
                f" never followed), or it is no file: {exc.strerror or exc}"
            )
            raise RequestError.invalid_params({"path": said}) from None
        lines = text.splitlines(keepends=True)
        if line is not None:
            start = max(line - 1, 0)
            lines = lines[start : start + limit if limit else None]
        self.queue.put_nowait(FileRead(path))
        return ReadTextFileResponse(content="".join(lines))

    # -- terminals --------------------------------------------------------------------------
    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **_: Any,
    ) -> CreateTerminalResponse:
        named = {str(var.name): str(var.value) for var in env or []}
        asked = TerminalAsked(command, list(args or []), named, cwd, output_byte_limit)
        answer: CreateTerminalResponse = await self._asked(asked)
        return answer

    def _terminal(self, terminal_id: str) -> Terminal:
        from acp import RequestError

        try:
            return self.terminals.get(terminal_id)
        except UnknownTerminal as exc:
            raise RequestError.invalid_params({"terminalId": str(exc)}) from None

    async def terminal_output(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> TerminalOutputResponse:
        from acp.schema import TerminalExitStatus, TerminalOutputResponse

        terminal = self._terminal(terminal_id)
        status = None
        if terminal.exited.is_set():
            status = TerminalExitStatus(exit_code=terminal.exit_code, signal=terminal.signal)
        return TerminalOutputResponse(
            output=terminal.tail.text(), truncated=terminal.tail.truncated, exit_status=status
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> WaitForTerminalExitResponse:
        """Waits for the command's end; a stop ends every command, so this wait too."""
        from acp.schema import WaitForTerminalExitResponse

        terminal = self._terminal(terminal_id)
        await terminal.exited.wait()
        return WaitForTerminalExitResponse(exit_code=terminal.exit_code, signal=terminal.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> KillTerminalResponse | None:
        from acp.schema import KillTerminalResponse

        self._terminal(terminal_id).kill()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> ReleaseTerminalResponse | None:
        from acp.schema import ReleaseTerminalResponse

        self._terminal(terminal_id)
        self.terminals.release(terminal_id)
        return ReleaseTerminalResponse()

    def cancel_all(self, cancelled: RequestPermissionResponse) -> None:
        """At a stop: every permission still waiting is answered `cancelled`, every write
        refused, every terminal's command ended."""
        from acp import RequestError

        self.terminals.kill_all()
        for item in list(self.pending):
            if item.answer.done():
                continue
            if isinstance(item, PermissionAsked):
                item.answer.set_result(cancelled)
            else:
                item.answer.set_exception(RequestError(-32800, "the turn was cancelled"))
