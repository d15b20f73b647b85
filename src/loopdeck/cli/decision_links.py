"""`loopdeck serve --url BASE`: the one-time decision links' page, answered beside the browser
console on the same port, under `/d/TOKEN`.

A link is its own credential: it asks no console token (a phone opening a push has none),
only its signed token (`operator/link_tokens.py`). Everything else the console's requests meet
holds here too: the request's Host and Origin must name this server (a loopback name, its
address, an `--allow-host` name, or BASE's own host), else 403. The form posts back with a
value only this server makes, bound to a SameSite=Strict cookie its GET set (one per page,
scoped to the link it posts to: two links open in two tabs each keep theirs) and to the link:
a post from another site has neither (and its Origin is refused first).

`serve --url` registers the server for its store in loopdeck's data folder, so the runs of
that store on this machine put links to it in their pushes; `serve --notify` hands the
notification settings to each tab's console (its environment, never its command line), so
the runs started in a tab push too.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import time
from dataclasses import replace
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from loopdeck.cli.decision_page import BOX_OF, BOXES, CHOICE_NAMES, page, refused
from loopdeck.cli.notify_flags import base_authority, notify_settings
from loopdeck.cli.serve_auth import ConsoleServer
from loopdeck.operator import records
from loopdeck.operator.link_decisions import LinkChoice, decide_by_link
from loopdeck.operator.link_evidence import LinkPage, RunShown, page_for
from loopdeck.operator.link_tokens import (
    LINK_PATH,
    LinkClaim,
    LinkRefused,
    LinkServer,
    register,
    unregister,
)
from loopdeck.store.base import Location

log = logging.getLogger("loopdeck.serve")
LOST = "Someone else decided it first"  # `operator/link_decisions.py`'s words for a lost race
EXPIRED = (
    "Nothing was decided: the request expired before your decision landed. The run asks"
    " again (or stops after its last ask): decide the new request, from its own push."
)
ANSWER_WAIT = "awaiting_answer"
MOVED_ON_S = 5.0  # how long an answer's page waits for the run to take it
LOOK_EVERY_S = 0.1
GUARD_GRACE_S = 600  # a page's guard outlives its link a little: a late post is told why
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",  # no-referrer makes a post's Origin `null`
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline';"
    " form-action 'self'; frame-ancestors 'none'",
}
DECIDE_BY_COMMAND = "Decide with the command in the push (it says the store), or in the console."
NO_LINKS = (
    "This loopdeck server does not answer decision links now: it was started without --url"
    f" (restarted since the push, perhaps). Nothing was decided. {DECIDE_BY_COMMAND}"
)
STILL_WAITS = (
    "The decision still waits, as shown below: decide it with the command in the push, or"
    " with the link of a newer push."
)
NOT_OURS = (
    "This page answers only its own server's address: the request came from, or named, "
    "another site. Nothing was decided."
)
NO_GUARD = (
    "This form was not posted from this server's own page (its guard is missing or wrong): "
    "nothing was decided. Open the link again and decide there."
)


def guard_cookie(port: int, guard_id: str) -> str:
    return f"loopdeck_link_{port}_{guard_id}"


class LinkDesk:
    """The decision links of one store, answered by this server at `server.url`."""

    def __init__(self, location: Location, server: LinkServer) -> None:
        self.location = location
        self.server = server

    def middleware(self, console: ConsoleServer) -> Any:
        """Answers `/d/…` itself (the console's token is not asked of a link); passes every
        other request on to the console's own checks."""

        @web.middleware
        async def links(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not request.path.startswith(LINK_PATH):
                return await handler(request)
            if (why := console.refusal(request)) is not None:
                log.warning("loopdeck serve: refused %s a decision link: %s", request.method, why)
                return _html(refused(NOT_OURS), 403)
            return await self.answer(request, console.port)

        return links

    async def answer(self, request: web.Request, port: int) -> web.StreamResponse:
        token = request.path[len(LINK_PATH) :]
        expired = ""
        try:
            claim = self.server.claim_of(token, time.time())
        except LinkRefused as exc:
            if exc.claim is None or request.method != "GET":
                return _html(refused(f"{exc} {DECIDE_BY_COMMAND}"), 403)
            claim, expired = exc.claim, str(exc)
        try:
            if expired:
                return await self._expired(request, port, claim, expired)
            return await self._answer(request, port, token, claim)
        except records.StoreError as exc:  # said to the person on the page, and logged
            log.warning("loopdeck serve: a decision link cannot read the store: %s", exc)
            return _html(refused(f"The store cannot be read now: {exc}. Nothing was decided."), 503)

    async def _answer(
        self, request: web.Request, port: int, token: str, claim: LinkClaim
    ) -> web.StreamResponse:
        if request.method == "GET":
            async with records.opened(self.location) as store:
                shown = await page_for(store, self.server, claim)
            return self._page(request, port, shown)
        if request.method != "POST":
            return _html(refused("A decision link is opened (GET) or decided (POST)."), 405)
        form = await request.post()
        fetched = request.headers.get("Sec-Fetch-Site", "same-origin")
        guarded = self._guarded(request, port, token, str(form.get("csrf", "")))
        if not guarded or fetched not in ("same-origin", "none"):
            log.warning("loopdeck serve: refused a decision post without its guard")
            return _html(refused(NO_GUARD), 403)
        choice = _choice(form)
        if choice is None:
            return _html(refused("The form said no choice: nothing was decided."), 400)
        async with records.opened(self.location) as store:
            shown = await decide_by_link(store, self.server, claim, choice)
            shown = await self._after(store, claim, shown)
        return self._page(request, port, shown)

    async def _expired(
        self, request: web.Request, port: int, claim: LinkClaim, said: str
    ) -> web.StreamResponse:
        """An expired link shows where its decision stands, as one whose ask moved does: the
        call asked again is the new ask to decide (its own claim, its own time); an ask that
        still waits is shown, decided elsewhere (the link decides nothing by itself)."""
        async with records.opened(self.location) as store:
            shown = await page_for(store, self.server, claim)
        if shown.standing == "unknown":
            return _html(refused(f"{said} {DECIDE_BY_COMMAND}"), 403)
        if shown.standing == "open":
            shown = replace(shown, standing="expired", words=STILL_WAITS, claim=None)
        return self._page(request, port, replace(shown, words=f"{said} {shown.words}"))

    async def _after(self, store: records.Store, claim: LinkClaim, shown: LinkPage) -> LinkPage:
        """A post that lost the race says what won (as the link says once opened again); an
        answer is shown with the run as it stands once it took it (it leaves
        `awaiting_answer` within MOVED_ON_S, else as it is then)."""
        if shown.standing == "decided" and not shown.done and shown.words.startswith(LOST):
            now = await page_for(store, self.server, claim)
            if now.standing == "decided" and now.words:
                return replace(shown, words=f"{shown.words} {now.words}", run=now.run)
            if now.standing == "open":  # nobody decided it: it expired before yours landed
                return LinkPage("withdrawn", EXPIRED, now.run)
            return now  # asked again (its new ask to decide), withdrawn: as it stands
        if not shown.done or claim.what != "question" or shown.run is None:
            return shown
        run: RunShown | None = shown.run
        end = time.monotonic() + MOVED_ON_S
        while run is not None and run.state == ANSWER_WAIT and time.monotonic() < end:
            await asyncio.sleep(LOOK_EVERY_S)
            run = (await page_for(store, self.server, claim)).run
        return replace(shown, run=run or shown.run)

    def _page(self, request: web.Request, port: int, shown: LinkPage) -> web.StreamResponse:
        """The page, its form guarded by a cookie of its own: named for this page and scoped
        to the form's own link, so pages of other links (or this one, opened again from
        another site, where a SameSite=Strict cookie is not sent) never replace it."""
        claim: LinkClaim | None = shown.claim
        token = self.server.token(claim) if claim is not None else ""
        action = f"{LINK_PATH}{token}"
        kept = _kept_guard(request, port) if request.path == action else None
        guard_id, nonce = kept or (secrets.token_hex(6), secrets.token_urlsafe(16))
        guard = f"{guard_id}.{self.server.sign('csrf', f'{nonce}|{token}')}"
        response = _html(page(shown, action, guard), 200)
        if claim is not None and kept is None:
            lasts = max(int(claim.until - time.time()), 0) + GUARD_GRACE_S
            response.set_cookie(
                guard_cookie(port, guard_id), nonce, httponly=True, samesite="Strict",
                path=action, max_age=lasts,
            )  # fmt: skip
        return response

    def _guarded(self, request: web.Request, port: int, token: str, given: str) -> bool:
        """The post carries its page's guard: the cookie that page set, and its signature."""
        guard_id, _, signature = given.partition(".")
        if not guard_id.isalnum():
            return False
        nonce = request.cookies.get(guard_cookie(port, guard_id), "")
        return bool(nonce) and self.server.signed("csrf", f"{nonce}|{token}", signature)


def _kept_guard(request: web.Request, port: int) -> tuple[str, str] | None:
    """The guard a page of this link set before, when the browser sent it (opened again from
    this server's own page): the page reuses it rather than adding another."""
    prefix = guard_cookie(port, "")
    for name, nonce in request.cookies.items():
        if name.startswith(prefix) and name[len(prefix) :].isalnum() and nonce:
            return name[len(prefix) :], nonce
    return None


def _choice(form: Any) -> LinkChoice | None:
    """The choice posted, with the words of its own box; words in another choice's box (a
    page that shared one, a form made elsewhere) named, so the choice is refused, never taken
    with words meant for another."""
    action = str(form.get("action", ""))
    if action not in BOXES:
        return None
    own = BOXES[action]
    text = str(form.get(own[0], "")) if own else ""
    text = text if action == "edit" else text.strip()  # an edit is checked as it was typed
    if action == "answer" and (choice := str(form.get("choice", "")).strip()):
        text = f"{choice} {text}".strip()
    strays = [box for box in BOX_OF if box not in own and str(form.get(box, "")).strip()]
    stray = ""
    if strays:
        typed_in, choice_name = BOX_OF[strays[0]], CHOICE_NAMES[action]
        stray = f"the words typed in {typed_in} do not go with {choice_name}: not recorded"
    return LinkChoice(action, text, stray)  # type: ignore[arg-type]


def _html(text: str, status: int) -> web.Response:
    return web.Response(
        text=text, status=status, content_type="text/html", charset="utf-8", headers=HEADERS
    )


@web.middleware
async def no_links(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A server started without `--url`: a link opened on it (pushed while one with `--url`
    served) is told so on the links' own page, not met by the console's token."""
    if not request.path.startswith(LINK_PATH):
        return await handler(request)
    return _html(refused(NO_LINKS), 404)


class LinkedServer(ConsoleServer):
    """The browser console, and the decision links when `links` is given (else a link
    opened on it is told this server answers none)."""

    def __init__(self, *args: Any, links: LinkDesk | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.links = links

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        if self.links is None:
            app.middlewares.insert(0, no_links)
            return app
        app.middlewares.insert(0, self.links.middleware(self))
        app.on_cleanup.append(self._unregister)
        return app

    async def _unregister(self, app: web.Application) -> None:
        if self.links is not None:
            unregister(self.links.location)


def link_desk(
    args: argparse.Namespace, location: Location, tab_env: dict[str, str]
) -> LinkDesk | None:
    """`serve`'s notification flags: `--notify`'s settings (checked now) put in each tab's
    environment (`tab_env`); `--url BASE`: the desk that answers the store's links, registered
    for its runs, BASE's host allowed as `--allow-host` would (a phone reaches it by it)."""
    settings = notify_settings(args)
    if settings.on:
        from loopdeck.operator.push_channels import Channels

        Channels(settings.urls)  # a URL Apprise cannot read: refused now, naming it (exit 2)
        tab_env.update(settings.environment())
    if not getattr(args, "url", None):
        return None
    server = register(location, args.url)
    args.allow_host.append(base_authority(server.url))
    print(f"decision links: {server.url}{LINK_PATH}… (runs of this store push them)", flush=True)
    return LinkDesk(location, server)
