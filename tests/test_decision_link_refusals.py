"""A link that decides nothing says what happened and what to do, on the links' own page
(made for a phone), never the console's token refusal nor words that read as tampering: a
server restarted without `--url`, a link of another store's server at the same address."""

from __future__ import annotations

import time

from test_notify_links import Desk, _claim, _session, desk  # noqa: F401
from test_serve import TOKEN, client_of

from loopdeck.cli import serve
from loopdeck.cli.decision_links import LinkedServer
from loopdeck.operator.link_tokens import LinkServer

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
    link = other_store.link(_claim(other_store, time.time() + 60))
    async with _session() as browser:
        response = await browser.get(link)
        said = await response.text()
    assert response.status == 403 and PHONE in said
    assert "made for this address by another loopdeck server (another store served here" in said
    assert "signature does not match" not in said and BY_COMMAND in said
