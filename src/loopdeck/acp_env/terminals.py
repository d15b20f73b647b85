"""The terminals loopdeck runs for an ACP agent (`terminal/*`): each command started under
loopdeck's guardian (a session of its own; whatever it starts, a daemon included, stays below
the guardian, a child subreaper, and is ended when the command ends, and when the runner dies,
even by SIGKILL), with no shell (the command and its arguments as given), stdin closed, stdout
and stderr captured together; only the tail is kept, within the agent's `outputByteLimit` and
loopdeck's own cap, cut at a character boundary. Kill ends the command and all it started;
release kills and forgets; `kill_all` ends every one at the run's stop, `close` waits for
their ends.

The environment of a command is loopdeck's own plus the variables the request names: the
agent's `[agent] env` (where its keys live) is not handed to the commands it asks for. The
variables are recorded and shown with their values, a secret-looking name's as a digest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core.tools import ToolSpec
from loopdeck.workdir.guardian import KILL_WAIT_S, end_cgroup

TERMINAL = "terminal"  # the tool a terminal/create is recorded as
OUTPUT_CAP = 1 << 20  # loopdeck's own bound on a terminal's kept output, whatever the agent asks
RESULT_TAIL = 2000  # characters of output in the call's recorded result
KEPT_AFTER_RELEASE = 50  # released terminals still shown in the calls that embed them
SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")  # a variable's name: its value digested


class TerminalInput(BaseModel):
    """A terminal/create as loopdeck records it and the operator approves it: what runs, the
    environment's variables with their values (a `PYTHONPATH` or `LD_PRELOAD` runs code of
    its own: an approval showing only names would show nothing of it), a secret-looking
    one's as its digest (`shown_env`). A record from before values were shown holds the
    names alone (a list), still valid."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    cwd: str = "."
    env: dict[str, str] | list[str] = Field(default_factory=dict)


def secret_named(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def digest_of(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def shown_env(env: dict[str, str]) -> dict[str, str]:
    """The variables as recorded and shown: each value in full, but a secret-looking name's
    (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`) as `sha256:HEX` of its value, so a key the
    agent passes never reaches the log, an export or a page; approved as shown, it runs with
    the agent's value."""
    return {name: digest_of(value) if secret_named(name) else value
            for name, value in sorted(env.items())}  # fmt: skip


def env_to_run(approved: dict[str, str], asked: dict[str, str]) -> dict[str, str]:
    """The variables a command runs with: as approved, a digest shown for the agent's value
    standing for that value (a value the operator typed over it runs as typed)."""
    return {name: asked[name] if name in asked and value == digest_of(asked[name])
            and secret_named(name) else value
            for name, value in approved.items()}  # fmt: skip


def _agents_own(_: Any) -> Any:
    raise RuntimeError("a terminal is started by loopdeck's ACP client, never dispatched")


TERMINAL_SPEC = ToolSpec(
    name=TERMINAL,
    description="a command the agent asks loopdeck to run in a terminal",
    args_model=TerminalInput,
    risk="write",
    risk_source="ACP terminal/create: loopdeck runs it",
    fn=_agents_own,
)


def last_of(text: str, cap: int) -> str:
    """The last `cap` characters, said cut when they are: a command's end says most."""
    if len(text) <= cap:
        return text
    return f"… ({len(text) - cap} characters before)\n" + text[-cap:]


def command_line(command: str, args: list[str]) -> str:
    return shlex.join([command, *args])


def said_commands(command: str, args: list[str]) -> set[str]:
    """The ways an agent's permitted call may have named this command: the whole line, the
    command alone (a line passed as one string), the script of `sh -c SCRIPT`."""
    said = {command_line(command, args)}
    if not args:
        said.add(command)
    if Path(command).name in SHELLS and len(args) >= 2 and args[0] in ("-c", "-lc"):
        said.add(args[1])
    return said


def guardian_command() -> list[str]:
    """The guardian run as a file, neither `site` nor loopdeck's packages imported: its
    start is part of every command the agent runs (`-m` would import `loopdeck` and `site`)."""
    import importlib.util

    spec = importlib.util.find_spec("loopdeck.workdir.guardian")
    assert spec is not None and spec.origin is not None
    return [sys.executable, "-S", "-P", spec.origin]


class OutputTail:
    """The last `limit` bytes of a stream; `truncated` once anything was dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        extra = len(self.data) - self.limit
        if extra > 0:
            del self.data[:extra]
            self.truncated = True

    def text(self) -> str:
        data = bytes(self.data)
        if self.truncated:  # the cut may have split a character: start at the next one
            start = 0
            while start < min(len(data), 4) and data[start] & 0xC0 == 0x80:
                start += 1
            data = data[start:]
        return data.decode("utf-8", errors="replace")


@dataclass
class Terminal:
    id: str
    line: str
    proc: asyncio.subprocess.Process
    tail: OutputTail
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    killed_by: str | None = None  # the signal loopdeck sent, when it ended the command
    on_exit: Callable[[Terminal], None] | None = None
    watcher: asyncio.Task[None] | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def exit_code(self) -> int | None:
        if not self.exited.is_set() or self.killed_by is not None:
            return None
        code = self.proc.returncode
        return code if code is not None and code >= 0 else None

    @property
    def signal(self) -> str | None:
        return self.killed_by if self.exited.is_set() else None

    def ended(self, killed_by: str | None = None) -> None:
        """Said once: by the command's own end, or by loopdeck's kill at a stop."""
        if self.exited.is_set():
            return
        if killed_by is not None:
            self.killed_by = killed_by
        self.exited.set()
        if self.on_exit is not None:
            self.on_exit(self)

    def kill(self) -> None:
        """SIGTERM to the guardian, which ends the command and all it started (SIGKILL after
        a grace); at once, without awaiting, so a stop can do it anywhere."""
        if self.proc.returncode is not None:
            return
        self.killed_by = self.killed_by or "SIGTERM"
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)

    def result(self) -> dict[str, Any]:
        return {
            "command": self.line,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "output": last_of(self.tail.text(), RESULT_TAIL),
            "truncated": self.tail.truncated,
        }


class UnknownTerminal(Exception):
    pass


class Terminals:
    def __init__(self) -> None:
        self.live: dict[str, Terminal] = {}
        self.released: dict[str, dict[str, Any]] = {}  # id -> its last result, for display
        self.releasing: set[asyncio.Task[None]] = set()  # released, their end not seen yet
        # Each terminal's guardian by its watcher, until the watcher saw it end.
        self.guardians: dict[asyncio.Task[None], asyncio.subprocess.Process] = {}
        self._count = 0

    async def start(
        self, command: str, args: list[str], cwd: Path, env: dict[str, str], limit: int | None
    ) -> Terminal:
        self._count += 1
        tail = OutputTail(min(limit, OUTPUT_CAP) if limit is not None else OUTPUT_CAP)
        proc = await asyncio.create_subprocess_exec(
            *guardian_command(), command, *args,
            cwd=cwd, env={**os.environ, **env}, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # out of reach of a SIGKILL to loopdeck's group
        )  # fmt: skip
        terminal = Terminal(f"term-{self._count}", command_line(command, args), proc, tail)
        self.live[terminal.id] = terminal
        terminal.watcher = watcher = asyncio.ensure_future(self._watch(terminal))
        self.guardians[watcher] = proc
        watcher.add_done_callback(lambda done: self.guardians.pop(done, None))
        return terminal

    @staticmethod
    async def _watch(terminal: Terminal) -> None:
        stdout = terminal.proc.stdout
        assert stdout is not None
        while chunk := await stdout.read(1 << 16):
            terminal.tail.add(chunk)
        await terminal.proc.wait()
        if (terminal.proc.returncode or 0) < 0:  # its guardian was killed before it finished
            await asyncio.to_thread(end_cgroup, terminal.proc.pid)
        terminal.ended()

    def get(self, terminal_id: str) -> Terminal:
        if terminal_id not in self.live:
            raise UnknownTerminal(f"no terminal {terminal_id!r} (never created, or released)")
        return self.live[terminal_id]

    def result_of(self, terminal_id: str) -> dict[str, Any] | None:
        """What a tool call that embeds the terminal shows, released or not."""
        if terminal_id in self.live:
            return self.live[terminal_id].result()
        return self.released.get(terminal_id)

    def release(self, terminal_id: str) -> None:
        terminal = self.get(terminal_id)
        terminal.kill()
        del self.live[terminal_id]
        if terminal.watcher is not None and not terminal.watcher.done():
            self.releasing.add(terminal.watcher)
            terminal.watcher.add_done_callback(self.releasing.discard)
        self.released[terminal_id] = terminal.result()
        while len(self.released) > KEPT_AFTER_RELEASE:
            del self.released[next(iter(self.released))]

    async def close(self, grace_s: float = 5.0) -> None:
        """Every command ended, and its end waited for (bounded): each guardian ends all that
        its command started and exits; one still there past `grace_s` is killed, and what it
        leaves in its cgroup ended when its end is seen."""
        self.kill_all()
        if self.guardians:
            await asyncio.wait(list(self.guardians), timeout=grace_s)
        if self.guardians:  # a guardian that did not finish in time
            for proc in self.guardians.values():
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await asyncio.wait(list(self.guardians), timeout=KILL_WAIT_S)

    def kill_all(self, why: str = "SIGTERM") -> None:
        """At the run's stop or the agent's end: every command still running is ended and
        said ended now (its guardian finishes the rest on its own)."""
        for terminal in self.live.values():
            if not terminal.exited.is_set():
                terminal.kill()
                terminal.ended(killed_by=why)
