"""A write's link page gives each choice its own form and box: Approve sends none, Reject its
reason, an edit its arguments; a post carrying another choice's box is refused by name, never
taken with words meant for something else. An edit on the page is checked as `loopdeck
approve --args` checks it and recorded as the same edited approval, so the run carries out
the operator's arguments, not the model's. On a phone the two one-tap decisions are large,
far apart and unlike each other."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from store_helpers import wait_for_pending
from test_notify_links import Desk, _events, _form, _pushed_link, _session, desk, hook  # noqa: F401
from test_serve_browser import chromium  # noqa: F401 (the fixture)

from loopdeck.cli.decision_page import BOXES, page
from loopdeck.core.approvals import REJECTED
from loopdeck.operator import records
from loopdeck.operator.link_decisions import LinkChoice, link_approval
from loopdeck.operator.link_evidence import Evidence, LinkPage, RunShown

ARGS = {"order_id": "ORD-1042", "new_address": "7 New Street, Springfield"}
SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": r"^ORD-\d+$"},
        "new_address": {"type": "string"},
    },
    "required": ["order_id", "new_address"],
    "additionalProperties": False,
}
RUN = RunShown("r1", "order_support/solve", "awaiting_approval", "", {})


def _write(**kwargs: Any) -> Evidence:
    return Evidence(
        "approval", "c3", "approve update_delivery_address (write)", tool="update_delivery_address",
        args=ARGS, args_schema=SCHEMA, expires_at=datetime.now(UTC), **kwargs,
    )  # fmt: skip


def _forms(made: str) -> dict[str, str]:
    """Each form of the page by the choice its button makes."""
    forms = {}
    for form in re.findall(r"<form .*?</form>", made, re.S):
        actions = re.findall(r'<button[^>]* name="action" value="([^"]+)"', form)
        assert len(actions) == 1, f"one choice a form: {actions}"
        forms[actions[0]] = form
    return forms


def _said(made: str) -> str:
    found = re.search(r'<p class="(?:done|why)">(.*?)</p>', made, re.S)
    assert found is not None, made[:2000]
    return html.unescape(found.group(1))


def test_each_choice_of_a_write_posts_only_its_own_box() -> None:
    forms = _forms(page(LinkPage("open", "", RUN, _write()), "/d/x", "g"))
    assert set(forms) == {"approve", "edit", "reject"}
    for action, form in forms.items():
        boxes = re.findall(r'<(?:textarea|input type="text")[^>]* name="([^"]+)"', form)
        assert boxes == [box for box in BOXES[action] if box != "choice"], (action, form)
        for label in re.findall(r'<label for="([^"]+)"', form):  # each label names its own box
            assert f'id="{label}"' in form
    [shown] = re.findall(r'name="args"[^>]*>\n(.*?)</textarea>', forms["edit"], re.S)
    assert json.loads(html.unescape(shown)) == ARGS  # the call's own arguments, as JSON


def test_a_write_that_cannot_carry_an_edit_out_offers_none_and_refuses_one() -> None:
    why = "the agent runs its own input"
    made = page(LinkPage("open", "", RUN, _write(not_editable=why)), "/d/x", "g")
    assert set(_forms(made)) == {"approve", "reject"} and f"Not editable: {why}" in made
    edit = LinkChoice("edit", json.dumps({**ARGS, "new_address": "elsewhere"}))
    with pytest.raises(ValueError, match=f"c3 cannot be approved with other arguments: {why}"):
        link_approval("c3", edit, _write(not_editable=why))
    as_proposed = link_approval("c3", LinkChoice("edit", json.dumps(ARGS)), _write())
    assert as_proposed.approved and as_proposed.args is None  # a plain approval, as the console
    rejected = link_approval("c3", LinkChoice("reject"), _write())
    assert not rejected.approved and rejected.reason == REJECTED


async def test_a_reason_from_rejects_box_never_goes_with_approve(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        target = desk.base + action
        for box in ("reason", "text"):  # Reject's box, and the box the page once shared
            posted = {"csrf": guard, "action": "approve", box: "wrong order, ask the customer"}
            refused = await (await browser.post(target, data=posted)).text()
            assert _said(refused).startswith("Nothing was decided: the words typed in "), refused
            assert "do not go with Approve: not recorded" in _said(refused)
            assert '<form method="post"' in refused  # decide again, on the same page
        assert (await wait_for_pending(desk.db))["call_id"] == "c3"  # nothing was decided
        posted = {"csrf": guard, "action": "reject", "reason": "wrong order, ask the customer"}
        rejected = await (await browser.post(target, data=posted)).text()
    assert _said(rejected) == "Rejected: the model is told: wrong order, ask the customer"
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    await run
    [decided] = [
        json.loads(line)
        for line in await _events(desk.db, run_id)
        if '"kind":"approval_decided"' in line
    ]
    assert not decided["approved"] and decided["reason"] == "wrong order, ask the customer"


async def test_an_edit_on_the_page_is_checked_recorded_and_run_as_edited(
    desk: Desk,  # noqa: F811 (the fixture)
    hook: Any,  # noqa: F811
) -> None:
    run, link, run_id = await _pushed_link(desk, hook)
    edited = {"order_id": "ORD-1042", "new_address": "9 Harbour Lane, Springfield"}
    async with _session() as browser:
        action, guard = _form(await (await browser.get(link)).text())
        target = desk.base + action
        for typed, problem in (
            ('{"order_id": "ORD-1042",', "not JSON: Expecting property name"),
            (json.dumps({**edited, "rush": True}), "Additional properties are not allowed"),
            (json.dumps({**edited, "order_id": "1042"}), "order_id: '1042' does not match"),
        ):
            posted = {"csrf": guard, "action": "edit", "args": typed}
            refused = await (await browser.post(target, data=posted)).text()
            said = _said(refused)
            assert said.startswith("Nothing was decided: the edited arguments were refused: ")
            assert problem in said, said
            [kept] = re.findall(r'name="args"[^>]*>\n(.*?)</textarea>', refused, re.S)
            assert html.unescape(kept) == typed  # to put right, not to type again
        assert (await wait_for_pending(desk.db))["call_id"] == "c3"  # nothing was decided
        posted = {"csrf": guard, "action": "edit", "args": json.dumps(edited, indent=2)}
        decided = await (await browser.post(target, data=posted)).text()
    assert _said(decided) == "Approved with the arguments you sent. It ran: executed."
    async with records.opened(desk.db) as store:
        await records.send_command(store, run_id, "kill", "test")
    await run
    lines = [json.loads(line) for line in await _events(desk.db, run_id)]
    [decision] = [e for e in lines if e["kind"] == "approval_decided"]
    assert decision["approved"] and decision["by"] == "link" and decision["args"] == edited
    assert decision["changes"] == [
        'new_address: "7 New Street, Springfield" → "9 Harbour Lane, Springfield"'
    ]
    [ran] = [e for e in lines if e["kind"] == "tool_finished" and e["call_id"] == "c3"]
    assert ran["status"] == "executed"
    assert ran["result"]["data"]["address"] == edited["new_address"]  # not the model's address


@pytest.mark.slow  # a browser: `make stress` runs it (CI too)
@pytest.mark.parametrize("not_editable", ["", "the agent runs its own input"])
def test_approve_and_reject_are_thumb_sized_apart_and_unlike(
    chromium: Path,  # noqa: F811
    not_editable: str,
) -> None:
    from playwright.sync_api import sync_playwright

    made = page(LinkPage("open", "", RUN, _write(not_editable=not_editable)), "/d/x", "g")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium))
        try:
            context = launched.new_context(
                viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
            )
            phone = context.new_page()
            phone.set_content(made)
            approve, reject = (phone.locator(f'button[value="{v}"]') for v in ("approve", "reject"))
            boxes = [approve.bounding_box(), reject.bounding_box()]
            looks = [
                b.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")
                for b in (approve, reject)
            ]
        finally:
            launched.close()
    [yes, no] = boxes
    assert yes is not None and no is not None
    for box in (yes, no):
        assert box["height"] >= 48 and box["width"] >= 300  # a thumb's target
    assert no["y"] - (yes["y"] + yes["height"]) >= 96, boxes  # a slip lands on neither
    assert looks[0][0] != looks[1][0] and looks[0][1] != looks[1][1], looks
