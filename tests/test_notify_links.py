"""One-time decision links: a push's link opens the decision's page (`serve --url`'s desk,
here on a loopback port of the test's own), decides once through the store (recorded `by:
link`), then says "already decided"; a link of a run that stopped is withdrawn; an expired, a
foreign, a forged or an unreadable link decides nothing and says why; a post from another
site, or without the page's guard, is refused."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from notify_receivers import Received, webhook
from store_helpers import wait_for_pending

from loopdeck.cli.decision_links import LinkDesk
from loopdeck.cli.runs import run_recorded_headless
from loopdeck.cli.serve import Site
from loopdeck.cli.serve_auth import local_address
from loopdeck.core.outcome import RunOutcome
from loopdeck.operator import records
from loopdeck.operator.inbox import read_entries
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.link_tokens import (
    LinkRefused,
    LinkServer,
    register,
    registered,
    unregister,
)
from loopdeck.operator.notify_config import NotifySettings

NOTIFY_AFTER_S = 0.3


@dataclass
class Console:
    """What the desk asks of the console's server: its port and its check of a request's
    Host and Origin (`serve.Site`, as `loopdeck serve` makes it)."""

    port: int
    site: Site

    def refusal(self, request: web.Request) -> str | None:
        headers = request.headers
        hosts, origins = headers.getall("Host", []), headers.getall("Origin", [])
        return self.site.refusal(self.port, hosts, origins, local_address(request))


@dataclass
class Desk:
    base: str
    db: Path
    server: LinkServer


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[Desk]:
    """The links of a store answered on a loopback port, registered for its runs."""
    db = tmp_path / "runs.db"
    console = Console(0, Site("127.0.0.1"))
    app = web.Application()
    runner = web.AppRunner(app)
    holder: list[LinkDesk] = []

    @web.middleware
    async def links(request: web.Request, handler: Any) -> web.StreamResponse:
        return await holder[0].middleware(console)(request, handler)

    app.middlewares.append(links)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    console.port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{console.port}"
    server = register(db, base)
    holder.append(LinkDesk(db, server))
    try:
        yield Desk(base, db, server)
    finally:
        unregister(db)
        await runner.cleanup()


@pytest.fixture
def hook() -> Iterator[tuple[str, Received]]:
    with webhook() as receiving:
        yield receiving


async def _pushed_link(
    desk: Desk, hook: tuple[str, Received], script: str = "solve"
) -> tuple[asyncio.Task[RunOutcome], str, str]:
    """A run of order_support waiting on the operator, and the link its push carried."""
    url, received = hook
    options = RunOptions(env="order_support", script=script, approve="wait",
                         notify=NotifySettings((url,), after_s=NOTIFY_AFTER_S))  # fmt: skip
    run = asyncio.create_task(run_recorded_headless(options, desk.db))
    while not len(received):
        assert not run.done(), run.result()
        await asyncio.sleep(0.05)
    message = received.items[0]["body"]["message"]
    link = re.search(r"decide: (\S+)", message)
    assert link is not None, message
    run_id = re.search(r"run (\S+)", message)
    assert run_id is not None
    return run, link.group(1), run_id.group(1)


def _form(page: str) -> tuple[str, str]:
    guard = re.search(r'name="csrf" value="([^"]+)"', page)
    action = re.search(r'<form method="post" action="([^"]+)"', page)
    assert guard is not None and action is not None, page
    return action.group(1), guard.group(1)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def _events(db: Path, run_id: str) -> list[str]:
    async with records.opened(db) as store:
        return [line async for line in records.event_bodies(store, run_id)]


async def test_a_link_decides_once_then_says_already_decided(desk: Desk, hook: Any) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    async with _session() as browser:
        opened = await browser.get(link)
        page = await opened.text()
        assert opened.status == 200 and "approve update_delivery_address (write)" in page
        assert "ORD-1042" in page  # the arguments, on the operator's own server
        action, guard = _form(page)
        decided = await browser.post(desk.base + action, data={"csrf": guard, "action": "approve"})
        assert decided.status == 200
        assert "Approved. It ran: executed." in await decided.text()
        again = await (await browser.get(link)).text()
        assert "Already decided: approved by operator via link." in again
        assert "<form" not in again
        twice = await browser.post(desk.base + action, data={"csrf": guard, "action": "approve"})
        assert "Already decided" in await twice.text()
    outcome = await run
    assert outcome.stop_reason.value == "goal_met"
    lines = await _events(desk.db, run_id)
    assert sum('"kind":"tool_finished"' in line and '"c3"' in line for line in lines) == 1
    [decision] = [line for line in lines if '"kind":"approval_decided"' in line]
    assert '"by":"link"' in decision and '"channel":"link"' in decision


async def test_a_link_of_a_run_that_stopped_is_withdrawn(desk: Desk, hook: Any) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    outcome = await run
    assert outcome.stop_reason.value == "killed"
    async with _session() as browser:
        page = await (await browser.get(link)).text()
        assert "The run stopped (killed) before anyone decided: this link is withdrawn." in page
        assert "<form" not in page
    lines = await _events(desk.db, run_id)
    assert not any('"kind":"approval_decided"' in line for line in lines)


async def test_a_question_is_answered_through_its_link(desk: Desk, hook: Any) -> None:
    run, link, run_id = await _pushed_link(desk, hook, script="ask-then-act")
    async with _session() as browser:
        page = await (await browser.get(link)).text()
        assert "Which order should I change" in page
        action, guard = _form(page)
        answered = await browser.post(
            desk.base + action, data={"csrf": guard, "action": "answer", "text": "ORD-1042"}
        )
        assert "Answered: ORD-1042" in await answered.text()
    pending = await wait_for_pending(desk.db)  # the run went on to its write
    async with records.opened(desk.db) as store:
        await records.decide(store, run_id, pending["call_id"], approved=True, by="cli",
                             reason="", tell=print)  # fmt: skip
    await run
    lines = await _events(desk.db, run_id)
    [answer] = [line for line in lines if '"kind":"question_answered"' in line]
    assert '"answer":"ORD-1042"' in answer and '"by":"link"' in answer


async def test_a_post_from_another_site_or_without_the_guard_decides_nothing(
    desk: Desk, hook: Any
) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        target, approve = desk.base + action, {"csrf": guard, "action": "approve"}
        evil = {"Origin": "http://evil.test"}
        foreign = await browser.post(target, data=approve, headers=evil)
        assert foreign.status == 403 and "another site" in await foreign.text()
        cross_site = {"Sec-Fetch-Site": "cross-site"}
        cross = await browser.post(target, data=approve, headers=cross_site)
        assert cross.status == 403
        wrong = await browser.post(target, data={**approve, "csrf": guard[:-2] + "xx"})
        assert wrong.status == 403
    async with _session() as stranger:  # the link, but not the page's cookie
        bare = await stranger.post(target, data=approve)
        said = await bare.text()
        assert bare.status == 403 and "was not posted from this server" in said
    assert (await wait_for_pending(desk.db))["call_id"] == "c3"  # nothing was decided
    pushed = await _inbox_mark(desk.db, "c3")  # the inbox marks it pushed, and where
    assert pushed.startswith("pushed via json at ") and "link until" in pushed
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    await run


async def _inbox_mark(db: Path, call_id: str) -> str:
    """The inbox entry's push mark, once the run recorded its push (the webhook may take the
    push before the run's writer commits its record)."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        async with records.opened(db) as store:
            [entry] = [e for e in await read_entries(store) if e.call_id == call_id]
        if entry.pushed:
            return entry.pushed
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id} never showed as pushed in the inbox")


def _claim(server: LinkServer, until: float) -> Any:
    return server.claim("r1", "c1", "a" * 16, "approval", int(until))


def test_a_token_is_read_only_by_its_own_server_in_its_time() -> None:
    server = LinkServer("https://box.example", b"k" * 32)
    token = server.token(_claim(server, time.time() + 3600))
    assert server.claim_of(token, time.time()).call_id == "c1"
    other = LinkServer("https://other.example", b"k" * 32)  # even with the same secret
    reasons = {}
    for name, given, by in [
        ("expired", server.token(_claim(server, time.time() - 1)), server),
        ("foreign", other.token(_claim(other, time.time() + 3600)), server),
        ("forged", token, LinkServer("https://box.example", b"x" * 32)),
        ("forged", token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"), server),
        ("malformed", "not-a-token", server),
    ]:
        with pytest.raises(LinkRefused) as caught:
            by.claim_of(given, time.time())
        reasons[caught.value.reason] = str(caught.value)
        assert caught.value.reason == name
    assert "another loopdeck server" in reasons["foreign"]
    assert "expired at" in reasons["expired"]


async def test_links_that_decide_nothing_say_why_over_http(desk: Desk) -> None:
    await records.check_store(desk.db)  # a store with no run in it
    other = LinkServer("https://elsewhere.example", desk.server.secret)
    soon, past = time.time() + 3600, time.time() - 5
    cases = {
        "expired": desk.server.link(_claim(desk.server, past)),
        "another loopdeck server": desk.base + "/d/" + other.token(_claim(other, soon)),
        "or it was altered": desk.server.link(_claim(desk.server, soon))[:-4] + "AAAA",
        "not a loopdeck decision link": desk.base + "/d/garbage",
        "no such run": desk.server.link(_claim(desk.server, soon)),
    }
    async with _session() as browser:
        for said, link in cases.items():
            response = await browser.get(link)
            text = await response.text()
            assert said in text, (said, text)
            assert "<form" not in text
            assert response.status == (200 if said == "no such run" else 403)


def test_a_run_finds_the_server_of_its_store_only_while_it_serves(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    assert registered(db) is None
    server = register(db, "https://box.example/")
    assert registered(db) == server and server.url == "https://box.example"
    assert registered(tmp_path / "other.db") is None  # another store's runs: no links
    unregister(db)
    assert registered(db) is None
    assert register(db, "https://box.example").secret == server.secret  # kept across restarts
