"""A push's one-time link in a real browser (Debian's chromium through Playwright) at a phone's
390x844: `loopdeck serve --url` answers it, a headless run waits on a write and pushes its
link to a loopback webhook. The page shows the diff and fits the screen; a post from another
site is refused; approve: the write lands once; opened again: "already decided". A second
run whose state moves after its push: approved through the link, it is asked again (the old
approval never applied) and decided anew. An expired link and one for another server are
refused."""

from __future__ import annotations

import http.server
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from notify_receivers import Received, webhook
from store_helpers import start_runner
from test_serve import Served, start_server
from test_serve_browser import chromium  # noqa: F401 (the fixture)

from loopdeck.operator.link_tokens import LinkServer, ask_of_request, registered

pytestmark = pytest.mark.slow

ENV = Path(__file__).parent / "envs" / "notify_world"
PHONE = {"width": 390, "height": 844}
BOUND_S = 120  # a wait that fails only when something is stuck (a loaded 2-core machine)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def phone(chromium: Path) -> Iterator[Any]:  # noqa: F811 (the fixture's argument)
    """A page in chromium at a phone's size, touch on."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium))
        context = launched.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        yield context.new_page()
        launched.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, Path]]:
    db = tmp_path / "runs.db"
    port = _free_port()
    server = start_server("--db", str(db), "--port", str(port), "--url", f"http://127.0.0.1:{port}")
    try:
        yield server, db
    finally:
        if server.process.poll() is None:
            server.stop(signal.SIGTERM)


def _waiting_run(
    db: Path, hook: tuple[str, Received], world: Path, pushes: int
) -> tuple[subprocess.Popen[str], str]:
    """notify_world's write waiting for a decision, and the link its push carried."""
    url, received = hook
    runner = start_runner(
        ENV, "write", db, "--approve", "wait", "--notify", url, "--notify-after", "0.5",
        environ={"NOTIFY_WORLD": str(world)},
    )  # fmt: skip
    message = received.wait_for(pushes, BOUND_S)[pushes - 1]["body"]["message"]
    link = re.search(r"decide: (\S+)", message)
    assert link is not None, message
    return runner, link.group(1)


def _writes(world: Path) -> list[str]:
    landed = world.with_suffix(".writes")
    return landed.read_text().splitlines() if landed.exists() else []


class CrossSite:
    """A page of another site (another loopback port) whose form posts to a link at once."""

    def __init__(self, target: str) -> None:
        form = (
            f'<form id="f" method="post" action="{target}">'
            '<input name="action" value="approve"><input name="csrf" value="x"></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(form)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ends(runner: subprocess.Popen[str]) -> None:
    if runner.poll() is None:
        runner.kill()
    runner.communicate()


def test_a_link_on_a_phone_decides_once(
    phone: Any, served: tuple[Served, Path], tmp_path: Path
) -> None:
    _, db = served
    world = tmp_path / "world.txt"
    world.write_text("calm\n")
    with webhook() as hook:
        runner, link = _waiting_run(db, hook, world, 1)
        try:
            page = phone
            page.goto(link)
            assert page.get_by_role("heading").inner_text() == "approve write_file (write)"
            diff = page.locator("pre.diff").inner_text()
            assert "+++ b/notes.txt" in diff and "+done" in diff
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            page.screenshot(path=str(tmp_path / "link.png"), full_page=True)

            evil = CrossSite(link)
            try:
                page.goto(evil.url)  # its form posts to the link as it loads
                page.wait_for_url(re.compile(r"/d/"))
                assert "another site" in page.inner_text("body")
            finally:
                evil.close()
            assert _writes(world) == []  # nothing was decided

            page.goto(link)
            page.get_by_role("button", name="Approve").tap()
            page.get_by_text("Approved. It ran: executed.").wait_for(timeout=BOUND_S * 1000)
            assert _writes(world) == ["notes.txt"]  # the write landed, once
            page.goto(link)
            assert "Already decided: approved by operator via link." in page.inner_text("body")
            assert page.locator("form").count() == 0
            assert runner.wait(BOUND_S) == 0  # goal met
        finally:
            _ends(runner)


def test_a_link_whose_state_moved_asks_again_and_stale_links_are_refused(
    phone: Any, served: tuple[Served, Path], tmp_path: Path
) -> None:
    server, db = served
    world = tmp_path / "world.txt"
    world.write_text("calm\n")
    with webhook() as hook:
        runner, link = _waiting_run(db, hook, world, 1)
        try:
            page = phone
            page.goto(link)
            world.write_text("moved\n")  # the state the write was asked in is gone
            page.get_by_role("button", name="Approve").tap()
            page.get_by_text("Asked again since the link was sent").wait_for(timeout=BOUND_S * 1000)
            said = page.inner_text("body")
            assert "environment state changed since approval" in said
            assert _writes(world) == []  # the old approval was never applied
            page.get_by_role("button", name="Approve").tap()
            page.get_by_text("Approved. It ran: executed.").wait_for(timeout=BOUND_S * 1000)
            assert _writes(world) == ["notes.txt"]
            assert runner.wait(BOUND_S) == 0

            links = registered(db)
            assert links is not None
            claim = links.claim_of(link.rsplit("/d/", 1)[1], time.time())
            run_id, call_id = claim.run_id, claim.call_id
            ask = ask_of_request(call_id, "0" * 64, "0" * 16, datetime.now(UTC))
            expired = links.claim(run_id, call_id, ask, "approval", int(time.time()) - 5)
            page.goto(links.link(expired))
            assert "This link expired at" in page.inner_text("body")
            other = LinkServer("https://elsewhere.example", links.secret)
            foreign = other.claim(run_id, call_id, ask, "approval", int(time.time()) + 600)
            page.goto(f"{server.base}/d/{other.token(foreign)}")
            assert "made for another loopdeck server" in page.inner_text("body")
            assert page.locator("form").count() == 0
        finally:
            _ends(runner)
