"""A long tool's progress, live and recorded: what a call reports of itself (an MCP server's
`notifications/progress`, a Python tool's `report_progress`) is a `tool_progress` event, at
most one per call a second plus the last before the call ends; the console shows a running
call's latest in its row and panel and clears it as the call ends; the replay's transcript has
each; export and verify take them as any other event. The server is
`tests/envs/mcp_progress/server.py`."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from console_helpers import console_app, run_screen, wait_until
from test_decision_refusals import Recorded, record
from textual.app import App, ComposeResult

from loopdeck.cli import main
from loopdeck.core import report_progress
from loopdeck.core.call_progress import reporting
from loopdeck.core.dispatcher import Dispatcher
from loopdeck.core.environment import Environment, tool
from loopdeck.core.events import (
    EVENT_ADAPTER,
    CallProposed,
    CallStatus,
    EventBus,
    RunStopped,
    ToolFinished,
    ToolProgress,
)
from loopdeck.core.outcome import CallRecord, RunOutcome
from loopdeck.core.progress_events import MESSAGE_CAP
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.links import ReplayLink
from loopdeck.operator.otel_spans import TraceBuilder
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.panels import CallDetail
from loopdeck.tui.replay import ReplayScreen

ENV = Path(__file__).parent / "envs" / "mcp_progress"


def _recorded(bus: EventBus) -> list[ToolProgress]:
    got: list[ToolProgress] = []
    bus.subscribe(lambda e: got.append(e) if isinstance(e, ToolProgress) else None)
    return got


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


# -- the run's side: recorded, throttled, from any thread ------------------------------------
async def test_a_burst_is_recorded_once_as_it_begins_then_its_last_as_the_call_ends() -> None:
    bus = EventBus()
    got = _recorded(bus)
    with reporting(bus.emit, "r1", "c1", "copy", every_s=3600) as progress:
        progress.told(1, 100, "item 1")
        await _until(lambda: len(got) == 1)
        for step in range(2, 101):
            progress.told(step, 100, f"item {step}")
        for _ in range(5):  # the loop goes round: nothing more within the second
            await asyncio.sleep(0)
        assert len(got) == 1
    progress.told(101, 100, "too late")  # the call is over
    for _ in range(5):
        await asyncio.sleep(0)
    assert [(e.call_id, e.tool, e.progress, e.total, e.message) for e in got] == [
        ("c1", "copy", 1.0, 100.0, "item 1"),
        ("c1", "copy", 100.0, 100.0, "item 100"),
    ]


async def test_a_report_held_back_is_recorded_when_its_time_comes() -> None:
    bus = EventBus()
    got = _recorded(bus)
    with reporting(bus.emit, "r1", "c1", "copy", every_s=0.05) as progress:
        progress.told(1)
        await _until(lambda: len(got) == 1)
        progress.told(2)
        progress.told(3, None, "third")
        await _until(lambda: len(got) == 2)  # while the call still runs
        assert (got[1].progress, got[1].total, got[1].message) == (3.0, None, "third")
    assert len(got) == 2  # nothing new to say as it ends


async def test_a_report_from_another_thread_is_recorded_on_the_runs_loop() -> None:
    bus = EventBus()
    got = _recorded(bus)
    threads: list[int] = []
    bus.subscribe(lambda e: threads.append(threading.get_ident()))
    with reporting(bus.emit, "r1", "c1", "copy") as progress:
        told = threading.Thread(target=progress.told, args=(3, 10, "copying"))
        told.start()
        await asyncio.to_thread(told.join)
        await _until(lambda: len(got) == 1)
    assert got[0].words() == "3/10 (30%): copying"
    assert threads == [threading.get_ident()]


async def test_a_report_that_is_not_a_number_is_no_report_and_a_long_message_is_capped() -> None:
    bus = EventBus()
    got = _recorded(bus)
    with reporting(bus.emit, "r1", "c1", "copy") as progress:
        for bad in (float("nan"), float("inf"), True, "3"):
            progress.told(bad)  # type: ignore[arg-type]
        progress.told(2, float("nan"), "x" * 5000)
    assert len(got) == 1 and got[0].total is None
    assert got[0].message is not None and got[0].message.startswith("x" * MESSAGE_CAP)
    assert len(got[0].message) < 300
    assert EVENT_ADAPTER.validate_json(got[0].as_json()) == got[0]  # stored and read back


class Copier(Environment):
    @tool()
    def copy(self, args: Any) -> str:
        """Copies, saying how far it is (on the env thread)."""
        report_progress(1, 2, "first half")
        return "copied"

    @tool()
    async def fetch(self, args: Any) -> str:
        """Fetches, saying how far it is (on the run's loop)."""
        report_progress(7, None, "pages")
        return "fetched"


async def test_a_python_tool_reports_its_progress_with_report_progress() -> None:
    bus = EventBus()
    got = _recorded(bus)
    specs = {spec.name: spec for spec in Copier(Path("."), {}).tools()}
    dispatcher = Dispatcher()
    for call_id, name in (("c1", "copy"), ("c2", "fetch")):
        with reporting(bus.emit, "r1", call_id, name):
            result = await dispatcher.run(specs[name], call_id, {})
        assert result.ok, result
    report_progress(9)  # outside a call: nothing
    assert [(e.call_id, e.words()) for e in got] == [
        ("c1", "1/2 (50%): first half"),
        ("c2", "7: pages"),
    ]


@pytest.mark.slow  # a server started, a second of reports, the server stopped: over three
def test_an_mcp_burst_is_recorded_bounded_with_its_last_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """100 reports in a second: the first at once, at most one more a second, the last kept,
    all before the call's result; in the hash chain, exported and verified as any event."""
    db = str(tmp_path / "s.db")
    code = main(["run", str(ENV), "--script", "burst", "--headless", "--approve", "auto",
                 "--json", "--db", db])  # fmt: skip
    outcome = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 1 and outcome["stop_reason"] == "stalled", outcome  # its goal is never met
    assert outcome["calls"][0]["status"] == "executed", outcome
    run_id = outcome["run_id"]
    assert main(["export", run_id, "--db", db]) == 0
    kinds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    progress = [e for e in kinds if e["kind"] == "tool_progress"]
    assert 2 <= len(progress) <= 4, progress
    assert progress[0]["message"] == "item 1"
    assert (progress[-1]["progress"], progress[-1]["message"]) == (100.0, "item 100")
    finished = next(i for i, e in enumerate(kinds) if e["kind"] == "tool_finished")
    assert all(kinds.index(e) < finished and e["call_id"] == "c1" for e in progress)
    assert main(["verify", run_id, "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["intact"] is True


# -- what the operator sees ------------------------------------------------------------------
def _events(*progress: ToolProgress, finished: bool = False) -> list[Any]:
    made: list[Any] = [
        CallProposed(run_id="r1", seq=1, call_id="c1", round=1, tool="copy", args={},
                     risk="read", fingerprint="f" * 8, state_hash="s" * 8),
    ]  # fmt: skip
    made += progress
    if finished:
        made.append(ToolFinished(run_id="r1", seq=9, call_id="c1", tool="copy",
                                 status=CallStatus.EXECUTED, result={"data": 1},
                                 duration_ms=5.0))  # fmt: skip
    return made


def _progress(seq: int, done: float, total: float | None, message: str | None) -> ToolProgress:
    return ToolProgress(run_id="r1", seq=seq, call_id="c1", tool="copy", progress=done,
                        total=total, message=message)  # fmt: skip


class CallsApp(App[None]):
    CSS = "CallDetail { height: 8; }"

    def compose(self) -> ComposeResult:
        yield CallsTable()
        yield CallDetail()


async def test_the_calls_row_and_panel_show_a_running_calls_progress_until_it_ends() -> None:
    view = RunView(run_id="r1")
    hostile = "[b]copying[/b]"  # the tool's words: never markup
    for event in _events(_progress(2, 1, 10, "starting"), _progress(3, 3, 10, hostile)):
        view.apply(event)
    app = CallsApp()
    async with app.run_test(size=(160, 24)) as pilot:
        table, panel = app.query_one(CallsTable), app.query_one(CallDetail)

        def shown() -> tuple[str, str]:
            table.sync(view)
            panel.show(view.calls["c1"])
            status = table.get_row("c1")[table.columns_shown.index("status")].plain
            return status, str(panel.query_one("#detail-body").render())

        await pilot.pause()
        status, body = shown()
        assert status == "running 30% [b]copying[/b]"
        assert "status running · 3/10 (30%): [b]copying[/b]" in body
        view.apply(_events(finished=True)[-1])
        await pilot.pause()
        status, body = shown()
        assert status == "executed" and "30%" not in body and "copying" not in body


def test_a_progress_of_unknown_total_is_said_without_a_share() -> None:
    view = RunView(run_id="r1")
    for event in _events(_progress(2, 42, None, None)):
        view.apply(event)
    row = view.calls["c1"]
    assert row.progress is not None
    assert (row.progress.short(), row.progress.words()) == ("42", "42")


def test_the_transcript_has_each_progress_in_the_calls_history() -> None:
    transcript = Transcript()
    for event in _events(_progress(2, 3, 10, "copying"), finished=True):
        transcript.apply(event)
    titles = [entry.title for entry in transcript.entries]
    assert titles[1] == "progress c1 · copy · 3/10 (30%): copying"
    assert titles[2].startswith("result c1 · copy · executed")


def test_a_calls_progress_is_the_consoles_never_in_the_runs_outcome() -> None:
    row = CallRecord("c1", 1, "copy", {}, "read", "f", "s")
    row.progress = _progress(2, 3, 10, "copying")
    outcome = RunOutcome(
        run_id="r1", env="e", script=None, model="m", mode="react", state=RunState.STOPPED,
        stop_reason=StopReason.STALLED, detail="", rounds=1, model_calls=1, tool_calls=1,
        tokens=None, cost_usd=None, cost_unknown_calls=0, elapsed_s=1.0, findings=[],
        calls=[row],
    )  # fmt: skip
    assert "progress" not in outcome.model_dump()["calls"][0]
    assert "progress" not in json.loads(outcome.model_dump_json())["calls"][0]


@pytest.mark.slow  # a live console on a server that works two seconds
async def test_the_live_console_shows_a_running_mcp_calls_progress() -> None:
    app = console_app(ENV, "steady")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: run_screen(app) is not None)
        screen = run_screen(app)
        assert screen is not None
        table = screen.query_one(CallsTable)

        def status() -> str:
            if "c1" not in table._rows:
                return ""
            return table.get_row("c1")[table.columns_shown.index("status")].plain

        await wait_until(pilot, lambda: status().startswith("running ") and "% step " in status())
        await wait_until(pilot, lambda: status() == "executed")


def _stored_run(run_id: str, *progress: tuple[float, str]) -> Recorded:
    run = Recorded(run_id).started(RunState.DECIDING)
    run.add(CallProposed, call_id="c1", round=1, tool="copy", args={}, risk="read",
            fingerprint="f" * 8, state_hash="s" * 8)  # fmt: skip
    for done, message in progress:
        run.add(ToolProgress, call_id="c1", tool="copy", progress=done, total=10, message=message)
    run.add(ToolFinished, call_id="c1", tool="copy", status=CallStatus.EXECUTED,
            result={"data": 1}, duration_ms=5.0)  # fmt: skip
    return run.add(RunStopped, state=RunState.STOPPED, stop_reason=StopReason.STALLED,
                   detail="")  # fmt: skip


@pytest.mark.parametrize("progress", [(), ((3, "copying"), (10, "done"))], ids=["old", "new"])
async def test_a_stored_run_replays_with_its_progress_in_the_calls_history_or_without_any(
    tmp_path: Path, progress: tuple[tuple[float, str], ...]
) -> None:
    """A store from before progress was recorded has none: its runs replay as they did."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(store, _stored_run("run0progress", *progress))
    finally:
        await store.close()
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, "run0progress")))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(run_screen(app), ReplayScreen))
        screen = run_screen(app)
        assert screen is not None
        table = screen.query_one(CallsTable)
        await wait_until(pilot, lambda: "c1" in table._rows and screen.view.finished)
        status = table.get_row("c1")[table.columns_shown.index("status")].plain
        assert status == "executed"
        titles = [entry.title for entry in screen.transcript.entries]
        said = [title for title in titles if title.startswith("progress c1")]
        assert said == [f"progress c1 · copy · {d:g}/10 ({d * 10:g}%): {m}" for d, m in progress]


@pytest.mark.parametrize("content", [False, True])
def test_a_trace_has_each_progress_on_its_calls_span_its_words_only_as_content(
    content: bool,
) -> None:
    builder = TraceBuilder(content=content)
    for event in _stored_run("run0progress", (3, "copying")).events:
        builder.take(event)
    [call] = [span for span in builder.finish() if span.name == "execute_tool copy"]
    [mark] = [dict(e.attributes or {}) for e in call.events if e.name == "loopdeck.tool.progress"]
    said = {"loopdeck.progress": 3.0, "loopdeck.total": 10.0}
    assert mark == ({**said, "loopdeck.message": "copying"} if content else said)
