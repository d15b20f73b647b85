"""`loopdeck serve` in a real browser (Debian's chromium, driven by Playwright): the console
takes keys without a click and draws every glyph it uses; a write waiting in a headless run
approved from a tab's inbox, the decision found in the store; and the console processes of a
server that is killed, or of a tab that is closed, gone with it."""

from __future__ import annotations

import ast
import asyncio
import http.server
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from store_helpers import last_json, loopdeck, start_runner
from test_serve import gone, start_server, tab

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's chromium, installed if missing and this is root with apt; else a skip."""
    if not CHROMIUM.exists():
        why = _install_chromium()
        if not CHROMIUM.exists():
            pytest.skip(f"no {CHROMIUM}, and `apt-get install -y chromium` could not: {why}")
    pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
    return CHROMIUM


def _install_chromium() -> str:
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine"
    if os.geteuid() != 0:
        return "not root"
    environ = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    said = ""
    for step in (install, ["apt-get", "update", "-q"], install):  # the lists may be stale
        done = subprocess.run(step, capture_output=True, text=True, timeout=1200, env=environ)
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        if step is install and done.returncode == 0:
            return ""
    return said


class Screen:
    """What the console drew into the page's terminal: the bytes its WebSocket carried."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.frames: list[bytes] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._took))

    def _took(self, payload: str | bytes) -> None:
        self.frames.append(payload if isinstance(payload, bytes) else payload.encode())

    def mark(self) -> int:
        return len(self.frames)

    def wait_for(self, text: str, since: int = 0, timeout: float = 30) -> None:
        """Until `text` was drawn after the mark `since`: the page's own clock polls."""
        wanted = text.encode()
        end = time.monotonic() + timeout
        while wanted not in b"".join(self.frames[since:]):
            assert time.monotonic() < end, f"{text!r} was never drawn"
            self.page.wait_for_timeout(50)

    def press(self, key: str, then_drawn: str) -> None:
        since = self.mark()
        self.page.keyboard.press(key)
        self.wait_for(then_drawn, since)


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.1)


@pytest.fixture
def browser(chromium: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium))
        yield launched
        launched.close()


@pytest.fixture
def waiting_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, str]]:
    """order_support headless, its write c3 waiting for a decision."""
    db = tmp_path / "runs.db"
    runner = start_runner("order_support", "solve", db, "--approve", "wait")
    try:
        until(lambda: db.exists() and bool(_pending(db)), 60, "c3 never waited")
        [pending] = _pending(db)
        assert pending["call_id"] == "c3"
        yield runner, db, pending["run_id"]
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.communicate()


# The glyphs a canvas draws as the unknown character's box, or not at all, in the terminal's
# font (textual.js gives xterm.js this list).
UNDRAWN = r"""(glyphs) => {
  const font = "40px 'Roboto Mono', Monaco, 'Courier New', monospace";
  const context = document.createElement("canvas").getContext("2d", { willReadFrequently: true });
  const drawn = (text) => {
    context.clearRect(0, 0, 300, 150);
    context.font = font;
    context.textBaseline = "middle";
    context.fillText(text, 8, 75);
    return context.getImageData(0, 0, 300, 150).data.join();
  };
  const box = drawn("\u0378"), nothing = drawn(" ");  // U+0378: no character at all
  return glyphs.filter((glyph) => [box, nothing].includes(drawn(glyph)));
}"""


def console_glyphs() -> list[str]:
    """Every character beyond ASCII in the console's strings (`loopdeck.tui`), but spaces."""
    tui = Path(__file__).resolve().parents[1] / "src" / "loopdeck" / "tui"
    found: set[str] = set()
    for module in tui.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= {c for c in node.value if ord(c) > 127 and not c.isspace()}
    return sorted(found)


def test_the_page_takes_keys_without_a_click_and_draws_the_consoles_glyphs(
    browser: Any, tmp_path: Path
) -> None:
    server = start_server("--db", str(tmp_path / "runs.db"))
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        screen = Screen(page)
        assert page.goto(server.url).status == 200
        screen.wait_for("fleet")  # the first frame, and nothing clicked
        assert page.evaluate("document.activeElement.className") == "xterm-helper-textarea"
        screen.press("i", then_drawn="Waiting for you")  # the inbox opened
        glyphs = console_glyphs()
        assert "⏱" in glyphs
        assert page.evaluate(UNDRAWN, glyphs) == []
        assert page.evaluate(UNDRAWN, ["\u0378"]) == ["\u0378"]  # the check sees a box
    finally:
        assert server.stop() == 0


def test_a_tab_approves_a_waiting_write_from_its_inbox(
    browser: Any, waiting_run: tuple[subprocess.Popen[str], Path, str]
) -> None:
    runner, db, run_id = waiting_run
    server = start_server("--db", str(db))
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        screen = Screen(page)
        assert page.goto(server.url).status == 200
        screen.wait_for("order_support")  # the fleet drew the run
        screen.press("i", then_drawn="update_delivery_address")
        page.keyboard.press("a")
        until(lambda: _pending(db) == [], 30, "the approval never reached the store")
        out, _ = runner.communicate(timeout=60)
        assert runner.returncode == 0
        assert last_json(out)["stop_reason"] == "goal_met"
        decided = [e for e in _events(db, run_id) if e["kind"] == "approval_decided"]
        assert [(e["call_id"], e["approved"], e["by"]) for e in decided] == [
            ("c3", True, "console inbox")
        ]
        consoles = server.consoles()
        assert len(consoles) == 1
    finally:
        code = server.stop()
    assert code == 0
    assert gone(consoles, 5), "the tab's console outlived the server"


def _pending(db: Path) -> list[Any]:
    done = loopdeck("pending", "--json", db=db)
    assert done.returncode == 0, done.stderr
    return list(last_json(done.stdout))


def _events(db: Path, run_id: str) -> list[dict[str, Any]]:
    import json

    done = loopdeck("export", run_id, db=db)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_a_public_server_refuses_a_browser_without_the_token(browser: Any) -> None:
    server = start_server("--host", "0.0.0.0", "--public")
    try:
        base = server.base.replace("0.0.0.0", "127.0.0.1")
        page = browser.new_page()
        assert page.goto(base + "/").status == 403
        assert page.goto(base + "/?token=wrong").status == 403
        assert "token" in page.content()
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        assert page.goto(url).status == 200
        assert page.goto(base + "/").status == 200  # the cookie the token set
    finally:
        assert server.stop() == 0


OPEN_SOCKET = """url => new Promise(done => {
    const socket = new WebSocket(url);
    socket.onopen = () => { socket.close(); done("open"); };
    socket.onerror = () => done("refused");
})"""


@contextmanager
def another_local_page() -> Iterator[str]:
    """A page served by another server on 127.0.0.1 (a real one: Chromium's local network
    checks count a page Playwright made up as public, and block its socket themselves)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<p>another server's page</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page) as other:
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{other.server_address[1]}"
        finally:
            other.shutdown()


def test_a_page_on_another_local_port_cannot_open_the_console(browser: Any) -> None:
    """The browser holds the console's cookie and counts every port of 127.0.0.1 as one site:
    a page served on another port still does not get the console's socket."""
    server = start_server()
    try:
        page = browser.new_page()
        assert page.goto(server.url).status == 200  # the cookie set
        socket_url = server.base.replace("http://", "ws://") + "/ws"
        assert page.evaluate(OPEN_SOCKET, socket_url) == "open"  # its own page
        with another_local_page() as other:
            assert page.goto(other).status == 200
            assert page.evaluate(OPEN_SOCKET, socket_url) == "refused"
    finally:
        assert server.stop() == 0
    err = server.process.stderr.read() if server.process.stderr else ""
    assert f"refused GET '/ws': Origin '{other}' is not this server's" in err


def test_a_closed_tab_ends_its_console() -> None:
    server = start_server()
    try:

        async def open_then_close() -> list[int]:
            async with tab(server):
                return server.consoles()

        consoles = asyncio.run(open_then_close())
        assert len(consoles) == 1
        assert gone(consoles, 10), "a closed tab's console kept running"
        assert server.process.poll() is None  # the server serves on
    finally:
        server.stop()


def test_the_consoles_end_when_the_server_is_killed() -> None:
    """SIGKILL leaves the server no say: each console gets SIGTERM from the kernel, the one
    kept for the next tab too."""
    server = start_server()

    async def hold_a_tab(ready: list[int]) -> None:
        async with tab(server):
            await asyncio.to_thread(until, lambda: bool(server.spares()), 30, "no next spare")
            ready.extend(server.consoles() + server.spares())
            await asyncio.Event().wait()  # until cancelled

    async def kill_the_server() -> list[int]:
        ready: list[int] = []
        holding = asyncio.create_task(hold_a_tab(ready))
        while not ready:
            await asyncio.sleep(0.05)
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
        holding.cancel()
        return ready

    consoles = asyncio.run(kill_the_server())
    assert len(consoles) == 2
    assert gone(consoles, 10), "a console outlived its killed server"


def test_a_ctrl_c_ends_the_server_and_its_consoles() -> None:
    server = start_server()

    async def one_tab() -> list[int]:
        async with tab(server):
            await asyncio.to_thread(until, lambda: bool(server.spares()), 30, "no next spare")
            consoles = server.consoles() + server.spares()
            assert await asyncio.to_thread(server.stop, signal.SIGINT) == 0
            return consoles

    try:
        consoles = asyncio.run(one_tab())
    finally:
        if server.process.poll() is None:
            server.process.kill()
    assert len(consoles) == 2
    assert gone(consoles, 5)
