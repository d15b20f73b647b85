"""A browser tab's console ends with its tab, and says so: the tab closing (or reloading) stops
its console by a hangup, its terminal gone, and its live runs are recorded killed by "browser
tab closed" (the server stopping is still a SIGTERM); a server started under `nohup` still
lets its consoles hear their tab close. The page fits a phone (a viewport as wide as the
device) and asks before a tab with its console open is left."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_serve import TOKEN, a_server, client_of, start_server
from textual_serve.download_manager import DownloadManager

from loopdeck.cli import serve_auth
from loopdeck.cli.serve_consoles import ConsoleService
from loopdeck.cli.spare_console import TAB_CLOSED
from loopdeck.operator import records
from loopdeck.stop_signals import by_signal, name_signal

# A console that says which signal stopped it, and how it found SIGHUP when it started.
SAYS_ITS_SIGNAL = """\
import os, signal, sys
start = "ignored" if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else "heard"
def stopped(sig, frame):
    open(sys.argv[1], "w").write(f"{start} {signal.Signals(sig).name}")
    os._exit(0)
for sig in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(sig, stopped)
print("ready", flush=True)
while True:
    signal.pause()
"""


async def _stopped_by(tmp_path: Path, tab_closed: bool) -> str:
    said = tmp_path / "said"
    command = shlex.join([sys.executable, "-c", SAYS_ITS_SIGNAL, str(said)])
    console = ConsoleService(f"exec {command}", extra_env={}, download_manager=DownloadManager())
    await console.open()
    process = console._process
    assert process is not None and process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"ready\n"
    await console.stop(tab_closed=tab_closed)
    return said.read_text()


@pytest.fixture
def nohup() -> Iterator[None]:
    """This process (the server) ignoring hangups, as under `nohup`."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGHUP, before)


async def test_a_closed_tab_hangs_up_its_console_and_a_stopping_server_terms_it(
    tmp_path: Path, nohup: None
) -> None:
    assert await _stopped_by(tmp_path, tab_closed=True) == "heard SIGHUP"
    assert await _stopped_by(tmp_path, tab_closed=False) == "heard SIGTERM"


def test_a_tab_console_names_a_hangup_as_its_tab_closing() -> None:
    assert by_signal(signal.SIGHUP) == "signal SIGHUP"
    name_signal(signal.SIGHUP, TAB_CLOSED)
    try:
        assert by_signal(signal.SIGHUP) == "browser tab closed"
        assert by_signal(signal.SIGTERM) == "signal SIGTERM"
    finally:
        name_signal(signal.SIGHUP, "")
    assert by_signal(signal.SIGHUP) == "signal SIGHUP"


async def _stop_detail(db: Path) -> str | None:
    """The first run's recorded stop ("" while it runs, None before it started)."""
    try:
        async with records.opened(db) as store:
            runs = await records.runs(store)
            if not runs:
                return None
            lines = [line async for line in records.event_bodies(store, runs[0].run_id)]
    except records.StoreError:  # not there yet, or the console is making it
        return None
    stops = [json.loads(line) for line in lines if '"kind":"run_stopped"' in line]
    if stops:
        return str(stops[0]["detail"])
    return "" if any('"kind":"approval_requested"' in line for line in lines) else None


async def _until(check: Any, what: str, timeout: float = 90) -> Any:
    end = time.monotonic() + timeout
    while (found := await check()) is None:
        assert time.monotonic() < end, what
        await asyncio.sleep(0.1)
    return found


async def test_a_live_run_of_a_closed_tab_is_recorded_killed_by_the_tab_closing(
    tmp_path: Path,
) -> None:
    await _tab_closed_under_a_live_run(tmp_path)


async def test_a_tab_closed_as_its_console_writes_to_it_is_still_its_tab_closing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's output sent to the closed tab fails first (a loaded machine: the run's
    frames keep coming), which ends its output's reader before the tab's handler stops it:
    that is still the tab closing (it was stopped as the server stopping, by SIGTERM)."""
    reads = serve_auth.ConsoleServer._process_messages

    async def output_failed_first(self: Any, websocket: Any, console: Any) -> None:
        await reads(self, websocket, console)
        console.done.set()  # as `ConsoleService.run` does once a write to the tab failed

    monkeypatch.setattr(serve_auth.ConsoleServer, "_process_messages", output_failed_first)
    await _tab_closed_under_a_live_run(tmp_path)


async def _tab_closed_under_a_live_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    console = [sys.executable, "-m", "loopdeck.cli.spare_console", "run", "order_support",
               "--script", "solve", "--db", str(db)]  # fmt: skip
    server = a_server(f"exec {shlex.join(console)}")
    async with client_of(server) as client:
        assert (await client.get(f"/?token={TOKEN}")).status == 200
        async with client.ws_connect("/ws?width=120&height=40") as websocket:
            said = await _until(lambda: _stop_detail(db), "the run never asked for a write")
            assert said == "", said  # live, a write waiting in the tab's dialog
            await websocket.close()  # the tab closed
        detail = await _until(lambda: _stopped(db), "the run's stop never came")
    assert detail == "killed by browser tab closed"


async def _stopped(db: Path) -> str | None:
    detail = await _stop_detail(db)
    return detail or None


@pytest.mark.slow  # a browser and a console: seconds
def test_the_page_fits_a_phone_and_asks_before_its_console_is_left(chromium: Path) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    server = start_server()
    dialogs: list[str] = []
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(chromium))
            context = launched.new_context(
                viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
            )
            phone = context.new_page()
            phone.on("dialog", lambda dialog: (dialogs.append(dialog.type), dialog.dismiss()))
            assert phone.goto(server.url).status == 200
            assert phone.evaluate("window.innerWidth") == 390  # laid out at the device's width
            phone.wait_for_selector(".textual-terminal.-connected", timeout=30_000)
            phone.keyboard.press("Escape")  # a gesture: browsers ask only after one
            phone.close(run_before_unload=True)
            end = time.monotonic() + 30
            while not dialogs and not phone.is_closed():  # closed: it was not asked
                assert time.monotonic() < end, "closing the tab neither asked nor closed"
                phone.wait_for_timeout(50)
            launched.close()
    finally:
        server.stop()
    assert dialogs == ["beforeunload"]


from test_serve_browser import chromium  # noqa: E402, F401 (the fixture)
