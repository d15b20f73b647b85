"""What a decision link's page says after a decision is what the store kept and the run as it
is then: a rejection's reason as the model is told it (cut as the run cuts it, never the 60,000
characters typed), its controls and bidi characters shown as escapes (as the console shows
them), never obeyed; the run's state read after the decision, not as it was asked. No word
widens the page past a phone's 390 px."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_notify_links import Desk, _events, _form, _pushed_link, _session, desk, hook  # noqa: F401

from loopdeck.cli.decision_page import page
from loopdeck.core.text import TRUNCATION_MARK
from loopdeck.core.write_approvals import REASON_CAP
from loopdeck.operator import records
from loopdeck.operator.link_evidence import Evidence, LinkPage, RunShown

RLO = "\u202e"
LONG = "x" * 60_000


def _said(page_text: str) -> str:
    """The words the page leads with (the decision's outcome), unescaped."""
    found = re.search(r'<p class="done">(.*?)</p>', page_text, re.S)
    assert found is not None, page_text[:2000]
    return html.unescape(found.group(1))


def _run_line(page_text: str) -> str:
    found = re.search(r'<p class="run">(run .*?)</p>', page_text)
    assert found is not None, page_text[:2000]
    return html.unescape(found.group(1))


async def test_a_rejections_reason_is_said_as_the_model_is_told_it(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    reason = f"no {RLO}evil{RLO} " + LONG
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        posted = {"csrf": guard, "action": "reject", "reason": reason}
        decided = await (await browser.post(desk.base + action, data=posted)).text()
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    await run
    [told] = [
        json.loads(line)["reason"]
        for line in await _events(desk.db, run_id)
        if '"kind":"approval_decided"' in line
    ]
    assert told.endswith(TRUNCATION_MARK.format(len(reason) - REASON_CAP))
    said = _said(decided)
    assert said == "Rejected: the model is told: " + told.replace(RLO, "\\u202e")
    assert RLO not in decided and "no \\u202eevil\\u202e x" in said
    assert "awaiting_approval" not in _run_line(decided)  # read after the decision


async def test_after_an_approval_the_page_shows_the_run_as_it_is_then(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
) -> None:
    run, link, _ = await _pushed_link(desk, hook)
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        posted = {"csrf": guard, "action": "approve"}
        decided = await (await browser.post(desk.base + action, data=posted)).text()
    assert _said(decided) == "Approved. It ran: executed."
    assert "awaiting_approval" not in _run_line(decided), _run_line(decided)
    await run


def _long_page() -> str:
    shown = RunShown("r1", f"env{RLO}/solve", "complete", "goal_met", {"turns": (3.0, 30.0)})
    return page(LinkPage("decided", f"Rejected: the model is told: {RLO}{LONG}", shown, done=True),
                "/d/x", "guard")  # fmt: skip


def test_the_page_shows_controls_and_bidi_characters_never_obeys_them() -> None:
    made = _long_page()
    assert RLO not in made
    assert "env\\u202e/solve" in made and "told: \\u202exxx" in made
    assert "overflow-wrap:anywhere" in made.split("body{", 1)[1].split("}", 1)[0]


@pytest.mark.slow  # a browser: `make stress` runs it (CI too)
def test_no_word_widens_the_page_past_a_phone(chromium: Path) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium))
        try:
            context = launched.new_context(
                viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
            )
            phone = context.new_page()
            phone.set_content(_long_page())
            width = phone.evaluate("document.documentElement.scrollWidth")
        finally:
            launched.close()
    assert width <= 390


from test_serve_browser import chromium  # noqa: E402, F401 (the fixture)


def test_a_questions_page_names_it_a_question_and_a_writes_a_call() -> None:
    shown = RunShown("r1", "env/solve", "awaiting_input", None, {})
    for what, named in (("question", "question"), ("approval", "call")):
        evidence = Evidence(what, "q1", "the loop repeats")  # type: ignore[arg-type]
        made = page(LinkPage("expired", "", shown, evidence=evidence), "/d/x", "g")
        assert f"<dt>{named}</dt><dd>q1</dd>" in made, made
