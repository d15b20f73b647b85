"""The ACP agent's process: started in the working copy under loopdeck's guardian (a child
subreaper, and a cgroup where one can be made: nothing the agent starts leaves it, a daemon in
a session of its own included; all of it ended when the runner dies, even by SIGKILL), its
stderr kept in a file whose tail names what went wrong, connected with the SDK
(`connect_to_agent`; its stdout less the lines that cannot be a message, `MessageLines`),
initialized, its session opened and its mode set; and stopped: stdin closed, then SIGTERM to
the guardian (which ends every process below it before it exits), then SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from loopdeck.acp_env.config import AgentConfig
from loopdeck.core.text import capped, visible
from loopdeck.workdir.agent_command import MissingVariable, expanded
from loopdeck.workdir.goal_check import stderr_tail
from loopdeck.workdir.guardian_stop import stop_guardian

LIMIT = 50 * 1024 * 1024  # the longest line the agent may send (a big diff)
SAID_LINES = 5  # lines that are no message, each said in a warning; then how many more
LINE_CAP = 200


class AgentFailed(Exception):
    """The agent could not start, or its protocol failed; the message names it."""


def agent_environment(config: AgentConfig) -> dict[str, str]:
    """loopdeck's environment with the scenario's `env`: `${VAR}` from loopdeck's own."""
    try:
        return {**os.environ, **expanded(config.env, "[agent] env")}
    except MissingVariable as missing:
        raise AgentFailed(str(missing)) from None


class _SdkRecords(logging.Filter):
    """The ACP SDK logs what the agent got wrong (a line that is not JSON, a failed handler)
    on the root logger, with tracebacks: kept at DEBUG on `loopdeck.acp` rather than printed
    over the console or a headless run's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}acp{os.sep}" not in record.pathname:
            return True
        log.debug("%s", record.getMessage(), exc_info=record.exc_info)
        return False


log = logging.getLogger("loopdeck.acp")
_SDK_RECORDS = _SdkRecords()


def quiet_sdk() -> None:
    root = logging.getLogger()
    if _SDK_RECORDS not in root.filters:
        root.addFilter(_SDK_RECORDS)


class MessageLines(asyncio.StreamReader):
    """The agent's stdout as the SDK reads it, without the lines that cannot be a JSON-RPC
    message: one that does not start with `{` (`npm WARN …`, or a bare JSON value: `42`,
    `null`, `[1, 2]`, `"str"`, which the SDK would parse and then fail on, closing the
    connection as if the agent were gone). Each is skipped and said, naming the agent and
    the line, in a warning on `loopdeck.acp`. A line past the reader's limit comes in
    pieces (`readexactly`, then the rest with `readuntil`), judged by its first. A reader
    (the SDK takes no other) that reads from the agent's own, as the SDK reads one."""

    def __init__(self, reader: asyncio.StreamReader, name: str) -> None:
        super().__init__(limit=LIMIT)
        self._reader = reader
        self._name = name
        self._rest: bytes | None = None  # within a long line: b"" kept, b"\n" dropped
        self.skipped = 0

    async def readuntil(self, separator: Any = b"\n") -> bytes:
        while True:
            try:
                line = await self._reader.readuntil(separator)
            except asyncio.IncompleteReadError as end:  # the last line, unended
                dropped = self._rest == b"\n"
                if self._rest is None and not _message_like(end.partial):
                    self._skip(end.partial)
                    dropped = True
                if dropped:
                    raise asyncio.IncompleteReadError(b"", None) from None
                raise
            if self._rest is not None:  # the end of a long line
                kept, self._rest = self._rest == b"", None
                return line if kept else b"\n"
            if _message_like(line):
                return line
            self._skip(line)

    async def readexactly(self, n: int) -> bytes:
        piece = await self._reader.readexactly(n)
        if self._rest is None:  # a long line's first piece: it decides the line
            self._rest = b"" if _message_like(piece) else b"\n"
            if self._rest:
                self._skip(piece)
        return piece if self._rest == b"" else b" "

    def _skip(self, line: bytes) -> None:
        self.skipped += 1
        if self.skipped <= SAID_LINES:
            said = line[: LINE_CAP * 4].decode("utf-8", "replace").strip()
            text = capped(visible(said), LINE_CAP)
            more = "" if self.skipped < SAID_LINES else " (further such lines not said)"
            log.warning(
                "ACP agent `%s` wrote a line that is not a JSON-RPC message, skipped: %s%s",
                self._name, text, more,
            )  # fmt: skip

    def at_eof(self) -> bool:
        return self._reader.at_eof()


def _message_like(line: bytes) -> bool:
    """Blank (the SDK skips it), or starting as a JSON object does."""
    start = line.lstrip()[:1]
    return start in (b"", b"{")


class AgentProcess:
    def __init__(self, command: list[str], workdir: Path, errlog: Path) -> None:
        self.command = command
        self.workdir = workdir
        self.errlog = errlog
        self.proc: asyncio.subprocess.Process | None = None
        self.conn: Any = None
        self.session_id = ""
        self.modes: list[str] = []

    @property
    def name(self) -> str:
        return " ".join(self.command)

    async def start(self, client: Any, config: AgentConfig) -> None:
        from acp import PROTOCOL_VERSION, RequestError, connect_to_agent
        from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

        quiet_sdk()

        with self.errlog.open("ab") as err:
            try:
                # The guardian in a session of its own: a SIGKILL to loopdeck's whole group
                # (or a Ctrl-C) reaches loopdeck, whose death the guardian then sees.
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "loopdeck.workdir.guardian", *self.command,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                    cwd=self.workdir, env=agent_environment(config), limit=LIMIT,
                    start_new_session=True,
                )  # fmt: skip
            except OSError as exc:  # the guardian itself: its stderr's tail said here
                raise AgentFailed(self.said("could not start", str(exc))) from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.lines = MessageLines(self.proc.stdout, self.name)
        self.conn = connect_to_agent(client, self.proc.stdin, self.lines)
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
        )
        try:
            async with asyncio.timeout(config.startup_timeout_s):
                await self.conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=capabilities,
                    client_info=Implementation(name="loopdeck", version="0"),
                )
                session = await self.conn.new_session(cwd=str(self.workdir), mcp_servers=[])
                self.session_id = session.session_id
                if session.modes is not None:
                    self.modes = [mode.id for mode in session.modes.available_modes]
                if config.mode is not None:
                    await self._set_mode(config.mode)
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise AgentFailed(self.said("did not start", agent_words(exc))) from exc
        except RequestError as refused:  # e.g. Claude Code refusing a session as root
            raise AgentFailed(self.said("refused to start", agent_words(refused))) from refused

    async def _set_mode(self, mode: str) -> None:
        if self.modes and mode not in self.modes:
            raise AgentFailed(
                f"ACP agent `{self.name}` has no session mode {mode!r} (it has"
                f" {', '.join(self.modes)}): [agent] mode must be one of them"
            )
        await self.conn.set_session_mode(session_id=self.session_id, mode_id=mode)

    def said(self, what: str, why: str) -> str:
        tail = ""
        with contextlib.suppress(OSError):
            tail = stderr_tail(self.errlog.read_text(encoding="utf-8", errors="replace"))
        return f"ACP agent `{self.name}` {what}: {why}" + (f"; stderr: {tail}" if tail else "")

    async def stop(self) -> None:
        """The agent and everything it started are gone when this returns (bounded): stdin
        closed, SIGTERM to the guardian, which ends every process below it (the agent's
        group, daemons in sessions of their own) and then exits; SIGKILL to it only past
        `STOP_WAIT_S`, and then what it left in its cgroup ended here (`stop_guardian`)."""
        proc = self.proc
        if proc is None:  # never started: only its stderr file to remove
            self.errlog.unlink(missing_ok=True)
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        await stop_guardian(proc)
        with contextlib.suppress(Exception):
            if self.conn is not None:
                await self.conn.close()
        self.errlog.unlink(missing_ok=True)  # its tail was said where it mattered


def agent_words(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    said = f"{type(exc).__name__}: {exc}"
    data = getattr(exc, "data", None)  # a JSON-RPC error's data: often the agent's real why
    if isinstance(data, dict) and isinstance(data.get("details"), str):
        said += f" ({capped(data['details'], 1000)})"
    elif data is not None:
        said += f" ({capped(str(data), 1000)})"
    return said
