"""A link that decides nothing says what happened and what to do, on the links' own page
(made for a phone), never the console's token refusal nor words that read as tampering: a
server restarted without `--url`, a link of another store's server at the same address. An
expired link shows its run and the decision as it stands (a call asked again: its new ask,
as a link whose ask moved does), deciding nothing itself; times say their zone and date."""

from __future__ import annotations

import html
import re
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from test_decision_refusals import Recorded, record
from test_notify_links import Desk, _claim, _form, _session, desk  # noqa: F401
from test_serve import TOKEN, client_of

from loopdeck.cli import serve
from loopdeck.cli.decision_links import LinkedServer
from loopdeck.core.states import RunState
from loopdeck.core.text import moment_words
from loopdeck.operator import link_decisions
from loopdeck.operator.link_tokens import LinkServer, ask_of_request
from loopdeck.operator.push_words import Asked, RunAbout, push_text
from loopdeck.store.opening import open_store

PHONE = '<meta name="viewport" content="width=device-width,initial-scale=1">'
BY_COMMAND = "Decide with the command in the push"


async def test_a_link_on_a_server_started_without_url_says_so() -> None:
    site = serve.Site("127.0.0.1")
    server = LinkedServer(
        "exit 1", host="127.0.0.1", port=0, token=TOKEN, console_env={}, site=site.refusal
    )
    async with client_of(server) as client:
        response = await client.get("/d/eyJhIjoxfQ.c2ln")
        said = await response.text()
        assert response.status == 404
        assert PHONE in said and "token" not in said
        assert "does not answer decision links now: it was started without --url" in said
        assert "Nothing was decided." in said and BY_COMMAND in said
        assert (await client.get("/")).status == 403  # the console still asks its token


async def test_a_link_of_another_stores_server_at_this_address_is_not_called_forged(
    desk: Desk,  # noqa: F811 (the fixture)
) -> None:
    other_store = LinkServer(desk.server.url, b"another store's secret")
    link = other_store.link(_claim(other_store, time.time() + 3600))
    async with _session() as browser:
        response = await browser.get(link)
        said = await response.text()
    assert response.status == 403 and PHONE in said
    assert "made for this address by another loopdeck server (another store served here" in said
    assert "signature does not match" not in said and BY_COMMAND in said


async def _asked_twice(served: Desk) -> str:
    """A write asked, then asked again (its request expired): the first ask's link, expired."""
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=1)
    first = run.events[-1]
    run.write("c1", ttl_s=600)
    store = await open_store(served.db)
    try:
        await record(store, run)
    finally:
        await store.close()
    ask = ask_of_request("c1", first.args_sha256, first.state_hash, first.requested_at)
    return served.server.link(
        served.server.claim("r1", "c1", ask, "approval", int(time.time()) - 5)
    )


async def test_an_expired_link_shows_the_run_and_its_calls_new_ask(
    desk: Desk,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(link_decisions, "CARRIED_OUT_S", 0.0)  # no runner here carries it out
    link = await _asked_twice(desk)
    async with _session() as browser:
        response = await browser.get(link)
        said = html.unescape(await response.text())
        assert response.status == 200, said
        assert "This link expired at" in said and "it decides nothing by itself." in said
        assert "Asked again since the link was sent" in said
        assert re.search(r'<p class="run">run r1 · decisions/files · ', said), said
        action, guard = _form(said)
        assert action != link.removeprefix(desk.base)  # the new ask's own link
        posted = {"csrf": guard, "action": "reject", "reason": "not now"}
        decided = html.unescape(await (await browser.post(desk.base + action, data=posted)).text())
        expired_post = await browser.post(link, data=posted)
        assert expired_post.status == 403  # the expired link itself decides nothing
    assert '<p class="done">' in decided, decided


async def test_an_expired_link_whose_ask_still_waits_shows_it_with_no_form(
    desk: Desk,  # noqa: F811 (the fixture)
) -> None:
    store = await open_store(desk.db)
    try:
        await record(store, Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", []))
    finally:
        await store.close()
    link = desk.server.link(desk.server.claim("r1", "q1", "q1", "question", int(time.time()) - 5))
    async with _session() as browser:
        said = html.unescape(await (await browser.get(link)).text())
    assert "This link expired at" in said and "The decision still waits" in said
    assert "What now?" in said and "run r1 · " in said and "<form" not in said


def test_times_say_their_zone_and_their_date_when_not_today() -> None:
    zone = timezone(timedelta(hours=2))
    now = datetime(2026, 12, 6, 12, 0, tzinfo=zone)
    today = datetime(2026, 12, 6, 14, 8, 1, tzinfo=zone)
    assert re.fullmatch(r"\d\d:\d\d:\d\d UTC[+-]\d\d:\d\d", moment_words(today, now))
    earlier = datetime(2026, 12, 4, 14, 8, 1, tzinfo=UTC)
    assert re.fullmatch(
        r"2026-12-0[45] \d\d:\d\d:\d\d UTC[+-]\d\d:\d\d", moment_words(earlier, now)
    )
    asked = Asked("c1", "approval", "approve write_file (write)", earlier)
    text = push_text(RunAbout("r1", "e/s"), [asked], content=False)[1]
    assert f"valid until {moment_words(earlier)}" in text and "UTC" in text
