"""Words typed with a choice that takes none (`allow try reading the code instead`,
`continue 50`) are refused by name, nothing recorded, wherever the answer comes from: the
check every front end applies (`entries.not_offered`: `loopdeck answer`, a link, the inbox)
and the run's own reading (the guard's and a budget's: asked again, never carried out as the
bare choice). A link's page sends its box only with the choice that takes it."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_answer_checks import _budget_run
from test_answers import _loop_run
from test_decision_refusals import Cli, Recorded, record, recorded, rows
from test_notify_links import Desk, _session, desk  # noqa: F401

from loopdeck.caps import Cap
from loopdeck.core.budget_answer import read_answer
from loopdeck.core.events import CallStatus
from loopdeck.core.loop_say import parse_say
from loopdeck.core.states import RunState
from loopdeck.operator.entries import not_offered
from loopdeck.store.opening import open_store

LOOP = ("stop", "allow", "nudge")


@pytest.mark.parametrize(
    ("choices", "text", "problem"),
    [
        (LOOP, "allow try reading the code instead", "`allow` takes no words"),
        (LOOP, "Stop now", "`stop` takes no words"),
        (("continue", "raise", "stop"), "continue 50", "`continue` takes no words"),
        (("continue", "raise", "stop"), "stop please", "`stop` takes no words"),
    ],
)
def test_words_after_a_choice_that_takes_none_are_refused(
    choices: tuple[str, ...], text: str, problem: str
) -> None:
    assert not_offered(choices, text).startswith(problem)
    assert not_offered(choices, text.split()[0]) == ""


def test_the_runs_own_reading_refuses_them_too() -> None:
    assert parse_say("allow try reading the code instead") == ("?", "")
    assert parse_say("stop it") == ("?", "")
    assert parse_say("allow") == ("allow", "")
    assert parse_say("nudge read the code") == ("nudge", "read the code")
    said = read_answer("continue 50", Cap.TURNS, 2.0)
    assert said == "`continue` takes no words: answer `continue` alone, or `raise N` for a new cap"


def test_loopdeck_answer_refuses_words_a_choice_does_not_take(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    loop = Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", list(LOOP))
    recorded(db, loop, _budget_run("r2"))
    code, said, err = cli("answer", "r1", "allow foo", "--json", "--db", str(db))
    assert code == 2 and said is None
    assert "run r1's question q1: `allow` takes no words: answer `allow` alone" in err
    code, _, err = cli("answer", "r2", "continue 50", "--db", str(db))
    assert code == 2 and "`continue` takes no words" in err
    assert {state for state, _, _ in rows(db).values()} == {"pending"}
    assert cli("answer", "r1", "nudge try reading the code", "--db", str(db))[0] == 0


async def test_allow_with_words_is_asked_again_and_never_runs_the_call() -> None:
    outcome, _, asked = await _loop_run(
        ["allow try reading the code instead", "stop"], script="wrong-guess"
    )
    assert len(asked) == 2 and asked[1].startswith("`allow` takes no words: answer `allow` alone")
    statuses = {c.call_id: c.status for c in outcome.calls}
    assert statuses["c5"] is not CallStatus.EXECUTED  # not allowed: the words were not taken


def _forms(page: str) -> list[str]:
    return re.findall(r"<form .*?</form>", page, re.S)


async def test_a_links_box_goes_only_with_the_choice_that_takes_it(
    desk: Desk,  # noqa: F811 (the fixture)
) -> None:
    store = await open_store(desk.db)
    try:
        await record(store, Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", LOOP))
    finally:
        await store.close()
    claim = desk.server.claim("r1", "q1", "q1", "question", int(time.time()) + 600)
    async with _session() as browser:
        page = await (await browser.get(desk.server.link(claim))).text()
        bare, nudge = _forms(page)
        assert 'value="stop"' in bare and 'value="allow"' in bare and 'name="text"' not in bare
        assert 'value="nudge"' in nudge and 'name="text"' in nudge
        assert "allow" not in nudge and "stop" not in nudge
        guard = re.search(r'name="csrf" value="([^"]+)"', bare)
        action = re.search(r'action="([^"]+)"', bare)
        assert guard is not None and action is not None
        posted: dict[str, Any] = {"csrf": guard.group(1), "action": "answer"}
        posted |= {"choice": "allow", "text": "try reading the code instead"}  # a hand-made post
        said = await (await browser.post(desk.base + action.group(1), data=posted)).text()
    assert "Nothing was decided: `allow` takes no words" in html.unescape(said)
    store = await open_store(desk.db)
    try:
        found = await store.fetchall("SELECT state FROM approvals WHERE call_id = 'q1'")
    finally:
        await store.close()
    assert [row["state"] for row in found] == ["pending"]
