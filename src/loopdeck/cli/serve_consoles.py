"""The consoles of `loopdeck serve`: each tab's a process of its own, one kept started ahead of
the next tab.

A console: `loopdeck.cli.spare_console` (`loopdeck console` once its tab's size came), in a
session of its own so a terminal's Ctrl-C reaches the server alone, which then stops each
console by SIGTERM, its stop signal (its live runs killed and recorded), SIGKILL to its group
after `CONSOLE_GRACE_S`; it gets SIGTERM too if the server dies (PR_SET_PDEATHSIG). A closed
tab stops its console the same way, by SIGHUP (its terminal hung up): its runs are recorded
killed by "browser tab closed" (`spare_console.TAB_CLOSED`). The page asks before a tab with a
console open is closed or reloaded (`beforeunload`).

The spare (`Spare`): a console started with the server, which has done its imports (most of a
first frame's time) when a tab opens; the tab takes it and sends its size as the console's
first packet. The next one starts `SPARE_AFTER_S` after a tab took one, so its imports never
compete with that tab's first frame. A spare that ended before its tab came is said on
`loopdeck.serve` (with its stderr's tail) and the tab gets a console started then.

Imported only by `run_serve` (through `serve_auth`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import Callable

from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

CONSOLE_GRACE_S = 10.0  # a console's own stop (its runs killed, recorded) before SIGKILL
SPARE_AFTER_S = 1.0  # after a tab took the spare, before the next one starts
STDERR_TAIL = 2000  # characters of an ended spare's stderr said
PR_SET_PDEATHSIG = 1
# Loaded in the server: the forked child only calls it (no loader lock taken after fork).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
log = logging.getLogger("loopdeck.serve")


async def _no_tab(data: object = None) -> None:
    raise RuntimeError("a spare console has no tab to write to")


class ConsoleService(AppService):
    """One console process, opened before its tab (`open`) or when it comes (`start`); stopped
    by its own stop signal."""

    def __init__(
        self, command: str, *, extra_env: dict[str, str], download_manager: DownloadManager
    ) -> None:
        super().__init__(
            command,
            write_bytes=_no_tab,
            write_str=_no_tab,
            close=_no_tab,
            download_manager=download_manager,
        )
        self.extra_env = extra_env
        self.exiting = False  # it said it leaves (`q`): let it finish before any signal
        # Its tab's socket is to close: it said it leaves, or its output ended. Closed by the
        # tab's handler, the socket's one reader (`ConsoleServer.handle_websocket`).
        self.done = asyncio.Event()
        self._ending: asyncio.Task[None] | None = None

    def attach(self, websocket: web.WebSocketResponse) -> None:
        """Its output goes to this tab from now on."""

        async def close() -> None:
            self.done.set()

        self.remote_write_bytes = websocket.send_bytes
        self.remote_write_str = websocket.send_str
        self.remote_close = close

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        return {**super()._build_environment(width=width, height=height), **self.extra_env}

    async def open(self) -> None:
        """Its process started, waiting for its tab's size."""
        await self._open_app_process()

    async def _open_app_process(
        self, width: int = 80, height: int = 24
    ) -> asyncio.subprocess.Process:
        server = os.getpid()
        self._process = process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height),
            start_new_session=True,
            preexec_fn=lambda: _die_with(server),
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def start(self, width: int, height: int) -> None:
        """Its tab came: the tab's size is its first packet, then its output is read."""
        if self._process is None:
            await self.open()
        await self.set_terminal_size(width, height)
        self._task = asyncio.create_task(self.run())

    async def run(self) -> None:
        """Its output to its tab until it ends, however it ended: then the tab's socket is
        closed, and the page says the session ended."""
        try:
            await super().run()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            # Not this task's cancel: textual-serve's stderr reader, cancelled by `run` before
            # it ever ran (a console that ended at once), raised its cancel into `run`.
        finally:
            self.done.set()

    async def ended(self) -> str | None:
        """What it said if its process ended (its exit and stderr's tail), else None."""
        process = self._process
        if process is None or process.returncode is None:
            return None
        said = b""
        if process.stderr is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONSOLE_GRACE_S):
                    said = await process.stderr.read()
        tail = said.decode("utf-8", "replace").strip()[-STDERR_TAIL:]
        return f"exit {process.returncode}" + (f": {tail}" if tail else "")

    async def on_meta(self, data: bytes) -> None:
        if json.loads(data).get("type") == "exit":
            self.exiting = True
        await super().on_meta(data)

    async def stop(self, tab_closed: bool = False) -> None:
        """Its stop signal (`tab_closed`: a hangup, its tab gone), then SIGKILL to its group
        after `CONSOLE_GRACE_S`. Called by the tab's handler and by the server's shutdown
        alike: one ending, awaited by both, by the signal of the first."""
        if self._process is None:
            return
        if self._ending is None:
            self._ending = asyncio.create_task(self._end(tab_closed))
        await asyncio.shield(self._ending)

    async def _end(self, tab_closed: bool) -> None:
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        process = self._process
        assert process is not None
        if not self.exiting:
            self.send(signal.SIGHUP if tab_closed else signal.SIGTERM)
        try:
            async with asyncio.timeout(CONSOLE_GRACE_S):
                await process.wait()
        except TimeoutError:
            self.hurry()
        if self._task is None:  # a spare: no tab read its output
            return
        try:  # its output read to the end (a child still holding it was in its group)
            async with asyncio.timeout(CONSOLE_GRACE_S):
                await self._task
        except TimeoutError:
            self._task.cancel()

    def send(self, sig: signal.Signals) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, sig)

    def hurry(self) -> None:
        """SIGKILL to the console and whatever of its group is left."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)


def _die_with(server: int) -> None:
    """In the forked console, before exec: SIGTERM when the server dies; a hangup heard
    (its tab closing), even under a server started with `nohup`."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:  # the server died before that took hold
        os._exit(1)


class Spare:
    """The console kept started for the next tab: at most one, none once stopped."""

    def __init__(self, make: Callable[[], ConsoleService]) -> None:
        self.make = make
        self.waiting: ConsoleService | None = None
        self.stopped = False
        self._later: asyncio.TimerHandle | None = None
        self._starting: asyncio.Task[None] | None = None

    def start_soon(self, delay: float = 0.0) -> None:
        """The next spare started after `delay`, unless one waits or is on its way."""
        if self.stopped or self.waiting is not None or self._later or self._starting:
            return
        self._later = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._later = None
        self._starting = asyncio.create_task(self._open())

    async def _open(self) -> None:
        console = self.make()
        try:
            await console.open()
        except OSError as exc:
            log.warning("loopdeck serve: a spare console could not start: %s", exc)
            return
        finally:
            self._starting = None
        if self.stopped:
            await console.stop()
        else:
            self.waiting = console

    async def take(self) -> ConsoleService:
        """The console waiting, if it still lives, else one started now; the next spare
        started `SPARE_AFTER_S` later."""
        console, self.waiting = self.waiting, None
        if console is not None and (said := await console.ended()) is not None:
            log.warning("loopdeck serve: a spare console ended before its tab came (%s)", said)
            console = None
        if console is None:
            console = self.make()
            await console.open()
        self.start_soon(SPARE_AFTER_S)
        return console

    async def stop(self) -> None:
        self.stopped = True
        if self._later is not None:
            self._later.cancel()
            self._later = None
        if self._starting is not None:
            await self._starting  # then stopped by `_open`
        if self.waiting is not None:
            console, self.waiting = self.waiting, None
            await console.stop()

    def hurry(self) -> None:
        if self.waiting is not None:
            self.waiting.hurry()
