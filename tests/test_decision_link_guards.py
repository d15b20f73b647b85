"""Each decision link's page keeps its own guard: two links opened from another site (a
webmail, ntfy's web app: their GETs carry no SameSite=Strict cookie) in two tabs each post
with theirs, the second page never replacing the first's. And `serve --url` with a path (its
links, answered at the root, would all be dead) is refused by name, exit 2."""

from __future__ import annotations

import html
import re
import time
from typing import Any

import aiohttp
import pytest
from test_decision_refusals import Recorded, record
from test_notify_links import Desk, _form, _session, desk  # noqa: F401
from yarl import URL

from loopdeck.cli import decision_links
from loopdeck.cli.parser import build_parser
from loopdeck.core.states import RunState
from loopdeck.store.opening import open_store


async def _questions(served: Desk, *run_ids: str) -> list[str]:
    """A free question waiting in each run; the link to each."""
    store = await open_store(served.db)
    try:
        for run_id in run_ids:
            waiting = Recorded(run_id).started(RunState.AWAITING_ANSWER)
            await record(store, waiting.question("q1", [], topic="ask_user"))
    finally:
        await store.close()
    until = int(time.time()) + 600
    server = served.server
    return [server.link(server.claim(r, "q1", "q1", "question", until)) for r in run_ids]


async def _opened_from_another_site(browser: aiohttp.ClientSession, link: str) -> str:
    """The link's page fetched as a browser fetches it from another site: with no cookie
    of this server's; the cookies it sets kept in the browser's jar."""
    async with aiohttp.ClientSession() as cross_site, cross_site.get(link) as response:
        browser.cookie_jar.update_cookies(response.cookies, URL(str(response.url)))
        return await response.text()


async def test_two_links_opened_from_another_site_each_keep_their_guard(
    desk: Desk,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decision_links, "MOVED_ON_S", 0.0)  # no runner here takes the answers
    first, second = await _questions(desk, "r1", "r2")
    async with _session() as browser:
        first_page = await _opened_from_another_site(browser, first)
        second_page = await _opened_from_another_site(browser, second)
        for page, answer in ((first_page, "ORD-1"), (second_page, "ORD-2")):
            action, guard = _form(page)
            posted: dict[str, Any] = {"csrf": guard, "action": "answer", "text": answer}
            said = await (await browser.post(desk.base + action, data=posted)).text()
            assert "not posted from this server's own page" not in said, said
            assert re.search(r'<p class="done">', said), html.unescape(said)[:2000]


@pytest.mark.parametrize(
    "url", ["http://host:8080/ld", "https://box.example.net/ld/", "http://h/#x"]
)
def test_serve_refuses_a_url_with_a_path_its_links_would_be_dead_under(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--url", url])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --url: must be an address with no path, got {url!r}" in err
    assert "answers decision links at its root (/d/TOKEN)" in err and "Behind a proxy" in err
    assert build_parser().parse_args(["serve", "--url", "https://box.example.net/"]).url == (
        "https://box.example.net"
    )
