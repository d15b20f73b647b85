"""A decision link's page after a post: one that lost the race says what won (as the CLI
says "already decided: approved by link"), one whose request expired under it says so, and
an answer is shown with the run as it stands once it took the answer, not as it was asked.
The races are made with a hook at the moment the link's decision reaches the store."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from store_helpers import wait_for_pending
from test_notify_links import Desk, _form, _pushed_link, _session, desk, hook  # noqa: F401

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.operator import records
from loopdeck.store import deciding


def _words(page_text: str) -> str:
    found = re.search(r'<p class="(?:done|why)">(.*?)</p>', page_text, re.S)
    assert found is not None, page_text[:2000]
    return html.unescape(found.group(1))


def _run_line(page_text: str) -> str:
    found = re.search(r'<p class="run">(run .*?)</p>', page_text)
    assert found is not None, page_text[:2000]
    return html.unescape(found.group(1))


async def test_a_link_that_loses_the_race_says_what_won(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, link, _ = await _pushed_link(desk, hook)
    real = deciding.decide

    async def another_first(store: Any, run_id: str, decision: Any, **kwargs: Any) -> bool:
        # `loopdeck reject` lands just before the link's approval.
        first = ApprovalDecision(
            call_id=decision.call_id, approved=False, reason="not yet", by="cli:ops"
        )
        assert await real(store, run_id, first)
        return await real(store, run_id, decision, **kwargs)

    monkeypatch.setattr(deciding, "decide", another_first)
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        posted = {"csrf": guard, "action": "approve"}
        decided = await (await browser.post(desk.base + action, data=posted)).text()
    said = _words(decided)
    assert said.startswith("Someone else decided it first: yours was not recorded.")
    assert "Already decided: rejected by operator ops via cli." in said, said
    assert "<form" not in decided
    outcome = await run
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value == "rejected"


async def test_a_link_whose_request_expired_under_it_says_so(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    real = deciding.decide

    async def expired_first(store: Any, run_id: str, decision: Any, **kwargs: Any) -> bool:
        await store.execute(  # the request's expiry passes as the post comes in
            "UPDATE approvals SET expires_at = '2000-01-01T00:00:00+00:00' WHERE call_id = ?",
            (decision.call_id,),
        )
        return await real(store, run_id, decision, **kwargs)

    monkeypatch.setattr(deciding, "decide", expired_first)
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        posted = {"csrf": guard, "action": "approve"}
        decided = await (await browser.post(desk.base + action, data=posted)).text()
    said = _words(decided)
    assert said.startswith("Nothing was decided: the request expired before your decision")
    assert "Someone else" not in said and "<form" not in decided
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    await run


async def test_an_answer_by_link_shows_the_run_after_it_took_the_answer(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
) -> None:
    run, link, run_id = await _pushed_link(desk, hook, script="ask-then-act")
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        posted = {"csrf": guard, "action": "answer", "text": "ORD-1042"}
        answered = await (await browser.post(desk.base + action, data=posted)).text()
    assert "Answered: ORD-1042" in _words(answered)
    assert "awaiting_answer" not in _run_line(answered), _run_line(answered)
    pending = await wait_for_pending(desk.db)
    async with records.opened(desk.db) as store:
        await records.decide(store, run_id, pending["call_id"], approved=True, by="cli",
                             reason="", tell=print)  # fmt: skip
    await run
