"""A finding (something a run noticed that its operator must see: a file whose content no
permission showed, what changed while a command ran, an upstream's failed call) is an event,
`finding`: made with the outcome's line in one place (`RunHost.finding`), shown live in the
Findings panel, in the store as it is made, so a replay shows it and `export` carries it,
chained with the rest (`verify` says intact), and a span event of the run's trace. A change no
approved call explains stays one event (`unrequested_change`), said once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from acp_calls_helpers import OPTIONS, acp_calls, kinds, update
from conftest import SAMPLES
from console_helpers import console_app, finished, run_screen, wait_until
from gateway_helpers import AGENT
from test_acp_shown_content import BACKDOOR, codex_edit
from test_gateway_recorded import MODEL, REFUSAL, refusing  # noqa: F401 (the fixture)

from loopdeck.cli import main
from loopdeck.core.control import StopRun
from loopdeck.core.events import EVENT_ADAPTER, Finding, ReviewVerdict
from loopdeck.core.run_host import RunHost
from loopdeck.operator.links import ReplayLink
from loopdeck.operator.otel_attributes import mark
from loopdeck.operator.run_findings import RunFindings
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.replay import ReplayScreen

SIZE = (160, 48)


@pytest.fixture
def calls(tmp_path: Path) -> Any:
    yield from acp_calls(tmp_path, "findings")


def folded(events: list[Any]) -> tuple[RunView, Transcript]:
    view, transcript = RunView(), Transcript()
    for event in events:
        view.apply(event)
        transcript.apply(event)
    return view, transcript


async def test_a_finding_of_the_folder_watch_is_an_event_and_the_outcomes_line(
    calls: Any,
) -> None:
    """A change the permission showed no content for: explained, unchecked, a finding."""
    _, asked = codex_edit(calls)
    await calls.look("start")
    await calls.permission(asked, OPTIONS)
    (calls.host.workdir / "calc.py").write_text(BACKDOOR)
    await calls.progress(update("x1", status="completed"))
    [found] = kinds(calls, "finding")
    assert "unchecked: calc.py (c1)" in found.text and found.round == calls.host.round
    assert calls.host._rt.findings == [f"round {found.round}: {found.text}"]
    view, transcript = folded(calls.recorder.events)
    assert view.findings.found == [found]
    [entry] = [entry for entry in transcript.entries if entry.kind == "finding"]
    assert (entry.title, entry.body) == (f"finding · round {found.round}", found.text)


async def test_a_change_no_approval_explains_is_one_event_and_one_line(calls: Any) -> None:
    started, asked = codex_edit(calls)
    await calls.look("start")
    await calls.proposed(started)
    await calls.permission(asked, OPTIONS)
    (calls.host.workdir / "calc.py").write_text(BACKDOOR)
    with pytest.raises(StopRun):
        await calls.progress(update("x1", status="completed"))
    assert kinds(calls, "finding") == []  # its event is the unrequested change
    [unrequested] = kinds(calls, "unrequested_change")
    [line] = calls.host._rt.findings
    assert line.startswith("round 0: unrequested change after c1") and "calc.py" in line
    view, _ = folded(calls.recorder.events)
    assert len(view.findings.unrequested) == 1 and view.findings.found == []
    assert unrequested.changed == ["calc.py"]


def test_a_finding_the_rounds_verdict_says_is_shown_once() -> None:
    """The operator's word that a goal is met is the verdict's reason and a finding."""
    findings = RunFindings()
    said = "accepted by cli:ops"
    findings.take(ReviewVerdict(run_id="r", round=2, verdict="pass", reasons=[said],
                                before_hash="a", after_hash="b"))  # fmt: skip
    findings.take(Finding(run_id="r", round=2, text=said))
    other = Finding(run_id="r", round=3, text=said)
    findings.take(other)
    assert [type(f).__name__ for f in findings.found] == ["RoundVerdict", "Finding"]
    assert findings.found[1] == other


async def test_a_finding_made_while_the_operator_watches_is_shown_live() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        screen = run_screen(app)
        assert screen is not None
        await wait_until(pilot, lambda: app.screen is screen)
        body = screen.query_one("#findings-body")
        assert "changed while" not in str(body.render())
        RunHost(screen.runtime).finding("changed while c1 ran: calc.py [b]")
        await wait_until(pilot, lambda: "changed while c1 ran" in str(body.render()))
        assert "⚑ round 1  changed while c1 ran: calc.py [b]" in str(body.render())
        await pilot.press("w")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        outcome = screen.outcome
        assert outcome is not None and "round 1: changed while c1 ran: calc.py [b]" in (
            outcome.findings
        )


def _loopdeck(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


async def _replayed(db: Path, run_id: str) -> tuple[RunView, str]:
    """The stored run in the console's replay, at its stop: its view and its Findings panel."""
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, run_id)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.view.finished
        )
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        await pilot.pause()
        return screen.view, str(screen.query_one("#findings-body").render())


def test_a_gateway_runs_finding_is_stored_replayed_exported_and_verified(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    refusing: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    work, db, run_id = tmp_path / "work", tmp_path / "s.db", "gw-finding"
    work.mkdir()
    code, out = _loopdeck(
        capsys, "gateway", "--goal", "g", "--workdir", str(work), "--model", MODEL,
        "--api-base", refusing, "--headless", "--json", "--approve", "auto", "--db", str(db),
        "--run-id", run_id, "--", sys.executable, AGENT, "chat", "whole", "go",
    )  # fmt: skip
    [listed] = json.loads(out.splitlines()[-1])["findings"]
    with sqlite3.connect(db) as store:
        bodies = store.execute(
            "select body from events where run_id = ? and kind = 'finding'", (run_id,)
        ).fetchall()
        [(last_finding,)] = store.execute("select last_finding from runs where run_id = ?",
                                          (run_id,))  # fmt: skip
    [stored] = [EVENT_ADAPTER.validate_json(body) for (body,) in bodies]
    assert isinstance(stored, Finding) and REFUSAL in stored.text
    assert listed == f"round {stored.round}: {stored.text}"  # the outcome's, from one place
    assert last_finding == stored.text  # the fleet's column

    view, panel = asyncio.run(_replayed(db, run_id))
    assert stored in view.findings.found
    assert f"⚑ round {stored.round}  the upstream ({MODEL}) failed a call" in panel

    code, exported = _loopdeck(capsys, "export", run_id, "--db", str(db))
    [line] = [json.loads(text) for text in exported.splitlines() if '"kind":"finding"' in text]
    assert code == 0 and line["text"] == stored.text and line["hash"]
    export = tmp_path / "run.jsonl"
    export.write_text(exported)
    for where in (("--export", str(export)), (run_id, "--db", str(db))):
        code, said = _loopdeck(capsys, "verify", *where, "--json")
        assert code == 0 and json.loads(said.splitlines()[-1])["intact"] is True, said

    told = mark(stored, content=False)
    assert told is not None and told.name == "loopdeck.finding"
    assert told.attributes == {"loopdeck.round": stored.round}  # its words are content
    told = mark(stored, content=True)
    assert told is not None and told.attributes["loopdeck.text"] == stored.text
