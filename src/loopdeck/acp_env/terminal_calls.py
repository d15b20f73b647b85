"""A terminal the agent asks loopdeck to run (`terminal/create`) as a write of the run: a call
`terminal: COMMAND` with its canonical input (command, args, cwd, the environment's variables
and their values: what runs is what is shown, a secret-looking variable's value shown and
recorded as its digest),
keyed by the guard, asked of the operator like a permission (bound to the working copy's
hash; an edit runs as edited) unless a call the operator allowed in this state named the same
command, started once, and finished when its command ends with its exit and its output's tail.
A refusal is the agent's request's error, its reason said with the next prompt too. Every
command still running is ended when the agent ends (and at any stop, by the bridge).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

from loopdeck.acp_env.bridge import Bridge, OutsideWorkdir, TerminalAsked, inside
from loopdeck.acp_env.terminals import (
    TERMINAL,
    TERMINAL_SPEC,
    Terminal,
    command_line,
    env_to_run,
    said_commands,
    shown_env,
)
from loopdeck.core.decided_by import refused_words
from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord
from loopdeck.core.run_host import RunHost
from loopdeck.core.text import capped
from loopdeck.core.tools import ErrorCode
from loopdeck.core.workspace_changes import ChangeWatch
from loopdeck.core.write_approvals import Approved

REPEATED = "repeated with the same input and no change to the working copy"


class CallsHost(Protocol):
    """What of `AcpCalls` a terminal's call uses."""

    host: RunHost
    bridge: Bridge
    agent: Any
    watch: ChangeWatch

    async def proposed_own(self, kind: str, title: str, raw: dict[str, Any]) -> CallRecord: ...

    async def refused_own(
        self, kind: str, title: str, raw: dict[str, Any], why: OutsideWorkdir
    ) -> None: ...

    async def approved(self, record: CallRecord, why: str) -> Approved | None: ...

    def finish(
        self, record: CallRecord, status: CallStatus, result: dict[str, Any], ms: float = 0.0
    ) -> None: ...


def commands_named(raw: Any) -> set[str]:
    """The command lines a tool call's input names (`command`, as a string or a list, with
    `args`), for a terminal it permits."""
    if not isinstance(raw, dict):
        return set()
    command, args = raw.get("command"), raw.get("args")
    if isinstance(command, list) and command and all(isinstance(p, str) for p in command):
        return said_commands(command[0], command[1:])
    if not isinstance(command, str) or not command:
        return set()
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        return said_commands(command, args) | {command}
    return {command}


class TerminalCalls:
    def __init__(self, calls: CallsHost) -> None:
        self.calls = calls
        self.host = calls.host
        self.terminals = calls.bridge.terminals
        self.host.add_tool(TERMINAL_SPEC)  # the run's tools: one more write
        self.allowed: dict[tuple[str, str], str] = {}  # (command, state) -> the call allowed
        self._reaper: asyncio.Future[None] | None = None

    def shown(self, terminal_id: str) -> dict[str, Any] | None:
        return self.terminals.result_of(terminal_id)

    def permitted(self, commands: set[str], record: CallRecord) -> None:
        """The operator allowed a call naming these commands: a terminal running one of them
        from the same state is not asked again."""
        for command in commands:
            self.allowed[(command, record.state_hash)] = record.call_id

    async def create(self, request: TerminalAsked) -> Any:
        from acp import RequestError
        from acp.schema import CreateTerminalResponse

        workdir = self.host.workdir
        command, args, env = request.command, request.args, request.env
        line = command_line(command, args)
        try:
            cwd = inside(workdir, request.cwd or str(workdir))
        except OutsideWorkdir as exc:
            said = {"command": command, "args": args, "cwd": request.cwd, "env": shown_env(env)}
            await self.calls.refused_own(TERMINAL, line, said, exc)
            raise RequestError.invalid_params({"cwd": str(exc)}) from None
        shown = shown_env(env)  # a secret-looking variable's value as its digest
        raw = {"command": command, "args": args, "cwd": _relative(cwd, workdir), "env": shown}
        record = await self.calls.proposed_own(TERMINAL, capped(line, 200), raw)
        if record.status is CallStatus.BLOCKED_REPEAT:
            raise RequestError(-32000, f"{record.tool}: {REPEATED}")
        # A permission named the command, not this environment: one carrying variables is
        # asked (their values shown), never run on the permission.
        by = None if env else self._allowed_by(command, args, record.state_hash)
        if by is None:
            approved = await self.calls.approved(record, f"the agent asks loopdeck to run: {line}")
            if approved is None:
                reason = (record.result or {}).get("error", {}).get("message", "")
                raise RequestError(-32000, refused_words(f"`{line}`", record.decided_by, reason))
            edited = _edited(approved.args, env, workdir)
            if isinstance(edited, str):
                self.calls.finish(record, CallStatus.FAILED, _failed(edited))
                raise RequestError.invalid_params({"cwd": edited})
            command, args, cwd, env = edited
        run = (command, args, cwd, env)
        terminal_id = await self._start(record, run, request.output_byte_limit, by)
        return CreateTerminalResponse(terminal_id=terminal_id)

    def _allowed_by(self, command: str, args: list[str], state_hash: str) -> str | None:
        for said in said_commands(command, args):
            by = self.allowed.pop((said, state_hash), None)
            if by is not None:
                return by
        return None

    async def _start(
        self,
        record: CallRecord,
        run: tuple[str, list[str], Path, dict[str, str]],
        limit: int | None,
        by: str | None,
    ) -> str:
        self.host.tool_ran()  # a cap reached stops the run before the command starts
        command, args, cwd, env = run
        try:
            terminal = await self.terminals.start(command, args, cwd, env, limit)
        except OSError as exc:
            self.calls.finish(record, CallStatus.FAILED, _failed(f"could not start: {exc}"))
            raise
        self.host.running(record)
        self.calls.watch.permit(record.call_id, None)  # a command may change anything
        terminal.on_exit = lambda ended: self._ended(record, ended, by)
        self._reap_with_agent()
        return terminal.id

    def _ended(self, record: CallRecord, terminal: Terminal, by: str | None) -> None:
        self.calls.watch.ended(record.call_id)
        if record.status is not CallStatus.RUNNING or self.host.ended:
            return
        data = terminal.result()
        if by is not None:
            data["permitted_by"] = by
        ms = (time.monotonic() - terminal.started) * 1000
        if terminal.signal is None:
            self.calls.finish(record, CallStatus.EXECUTED, {"ok": True, "data": data}, ms)
        else:
            result = _failed(f"ended by {terminal.signal}")
            result["data"] = data
            self.calls.finish(record, CallStatus.FAILED, result, ms)

    async def close(self) -> None:
        """At the run's end, whatever the end: every command ended and waited for."""
        if self._reaper is not None:
            self._reaper.cancel()
        await self.terminals.close()

    def _reap_with_agent(self) -> None:
        """The agent's commands never outlive it: once its process ends, they are ended."""
        if self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        proc = getattr(self.calls.agent, "proc", None)
        try:
            if proc is not None:
                await proc.wait()
        finally:
            self.terminals.kill_all()
        await self.terminals.close()


def _edited(
    args: dict[str, Any], env: dict[str, str], workdir: Path
) -> tuple[str, list[str], Path, dict[str, str]] | str:
    """The command as approved (the operator may have edited it); a cwd edited outside the
    working copy is refused. The environment is as approved: the values shown (a digest
    shown standing for the agent's value), or as the operator edited them."""
    try:
        cwd = inside(workdir, str(args.get("cwd") or "."))
    except OutsideWorkdir as exc:
        return str(exc)
    given = args.get("env", {})
    if isinstance(given, dict):
        kept = env_to_run({str(name): str(value) for name, value in given.items()}, env)
    else:  # names only (a record from before values were shown): the agent's values
        kept = {name: env[name] for name in given if name in env}
    return str(args["command"]), [str(a) for a in args.get("args", [])], cwd, kept


def _relative(path: Path, workdir: Path) -> str:
    with contextlib.suppress(ValueError):
        return path.relative_to(workdir.resolve()).as_posix() or "."
    return str(path)


def _failed(message: str) -> dict[str, Any]:
    error = {"code": ErrorCode.TOOL_ERROR.value, "message": message}
    return {"ok": False, "data": None, "error": error}
