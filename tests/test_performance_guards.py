"""What issue 11's optimisations rely on, checked as behaviour (bench/ has the timings)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from datetime import UTC, timedelta, timezone
from typing import Any

import pytest
from conftest import SAMPLES, prepare
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult

from loopdeck import tuning
from loopdeck.core.budgets import Budget, BudgetLedger, Cap
from loopdeck.core.events import CallStatus
from loopdeck.core.model import ModelRequest, ProviderError
from loopdeck.core.outcome import CallRecord
from loopdeck.core.scenario import Script, ScriptedPrice, ScriptTurn
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module
from loopdeck.llm.script_player import count_tokens, prompt_text, prompt_tokens
from loopdeck.operator.runview import RunView
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tuning import collector, lock_switching

text = st.text(max_size=40)
call = st.fixed_dictionaries(
    {
        "id": text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": text, "arguments": text}),
    }
)
odd_call = st.dictionaries(text, st.one_of(text, st.integers()), max_size=3)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": st.one_of(st.none(), text),
        "tool_calls": st.lists(st.one_of(call, odd_call), max_size=3),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(message, max_size=12), st.lists(st.just({"name": "t"}), max_size=2))
def test_the_scripted_token_count_is_the_same_figure_with_or_without_its_cache(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> None:
    expected = count_tokens(prompt_text(messages, tools))
    assert prompt_tokens(messages, tools) == expected
    assert prompt_tokens(messages, tools) == expected  # the second time from the cache


async def test_litellm_keeps_cost_and_usage_with_its_base64_log_walk_off() -> None:
    litellm_module()
    assert os.environ["MAX_BASE64_LENGTH_FOR_LOGGING"] == "0"
    price = ScriptedPrice(input_per_million=3.0, output_per_million=15.0)
    script = Script(executor=[ScriptTurn(tool="poll", args={"job": "j1"}, repeat=True)])
    model = LiteLLMModel("scripted", script=script, price=price)
    history: list[dict[str, Any]] = [{"role": "user", "content": "poll the job"}]
    for i in range(50):  # a long history: the path that used to walk every message
        call = {"id": f"c{i}", "type": "function", "function": {"name": "poll", "arguments": "{}"}}
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"i": i})},
        ]
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=history))
    assert reply.tool_calls[0].name == "poll"
    assert reply.prompt_tokens == count_tokens(prompt_text(history, []))
    expected = (reply.prompt_tokens * 3.0 + reply.completion_tokens * 15.0) / 1e6
    assert reply.cost_usd is not None and abs(reply.cost_usd - expected) < 1e-12


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CallsTable()


async def test_calls_table_cells_are_plain_text_never_markup() -> None:
    view = RunView()
    row = CallRecord(
        call_id="c1", round=1, tool="[b]poll[/b]", args={"q": "[red]x[/red]"}, risk="read",
        fingerprint="f" * 12, state_hash="s" * 12, status=CallStatus.EXECUTED, duration_ms=12.0,
    )  # fmt: skip
    view.calls["c1"] = row
    view.changed_calls.add("c1")
    app = TableApp()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(CallsTable)
        table.sync(view)
        await pilot.pause()
        cells = table.get_row("c1")
        assert all(isinstance(cell, Text) for cell in cells)
        shown = " ".join(cell.plain for cell in cells)
        assert "[b]poll[/b]" in shown and "[red]x[/red]" in shown


def test_the_bus_numbers_a_copy_and_leaves_the_frozen_event_as_it_was() -> None:
    from loopdeck.core.events import EventBus, StateChanged
    from loopdeck.core.states import RunState

    bus, seen = EventBus(), []
    bus.subscribe(seen.append)
    event = StateChanged(run_id="r", source=RunState.READY, target=RunState.PLANNING)
    first = bus.publish(event)
    again = bus.publish(event)  # published twice: two numbers, two events
    assert (first.seq, again.seq) == (1, 2) and event.seq == 0
    assert seen == [first, again] and seen[0] is first and first is not event
    assert first.model_copy(update={"seq": 0}) == event


def test_transcript_entries_made_late_read_as_if_made_at_once() -> None:
    from datetime import UTC, datetime

    from loopdeck.core.events import CallProposed, ToolFinished
    from loopdeck.operator.transcript import Transcript

    transcript = Transcript(max_entries=3)
    args = {"q": "\x1b[31mred\x1b[0m", "n": 1}
    events = [
        CallProposed(run_id="r", seq=1, at=datetime(2026, 1, 1, tzinfo=UTC), call_id="c1",
                     round=1, tool="look", args=args, risk="read", fingerprint="f" * 12,
                     state_hash="s" * 12),
        ToolFinished(run_id="r", seq=2, call_id="c1", tool="look", status=CallStatus.EXECUTED,
                     result={"ok": True, "data": [1, 2]}, duration_ms=3.0),
    ]  # fmt: skip
    entries = [transcript.apply(event) for event in events]
    call, result = entries
    assert call is not None and result is not None
    assert call.kind == "call" and call.seq == 1 and "look(" in call.title
    assert "\\u001b[31mred" in call.body  # escapes shown, never obeyed, when made late
    assert result.kind == "result" and '"data"' in result.body
    for n in range(3, 7):  # the oldest entries are let go, counted
        transcript.apply(
            ToolFinished(run_id="r", seq=n, call_id=f"c{n}", tool="t",
                         status=CallStatus.EXECUTED, result={}, duration_ms=1.0)
        )  # fmt: skip
    assert len(transcript.entries) == 3 and transcript.dropped == 3


async def test_a_long_stored_history_reaches_the_console_whole_with_the_collector_back(
    tmp_path,
) -> None:
    """More events than one read: every one arrives, in order, and the collector, held while
    full batches come, is on again once the link caught up."""
    import gc

    from test_store_link_history import stored_run

    from loopdeck.operator.store_link import StoreLink

    db = tmp_path / "runs.db"
    count = await stored_run(db, StoreLink.BATCH * 2 + 11)

    link, seen = StoreLink(db, "long"), []
    link.subscribe(seen.append)
    history_flags: list[bool] = []
    link.subscribe(lambda _: history_flags.append(link.reading_history))
    assert gc.isenabled()
    await link.drive()
    assert [e.seq for e in seen] == list(range(1, count + 1))
    assert any(history_flags) and not link.reading_history
    assert gc.isenabled()


async def test_the_keys_line_stays_one_widget_and_a_click_presses_its_key() -> None:
    from conftest import SAMPLES
    from console_helpers import console_app, finished, run_screen, wait_until

    from loopdeck.core.approvals import AutoApprover
    from loopdeck.tui.keys_bar import KeysBar
    from loopdeck.tui.transcript_view import TranscriptScreen

    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        bar = run_screen(app).query_one(KeysBar)
        for _ in range(6):  # focus moves; the bindings shown change with it
            await pilot.press("tab")
        await pilot.pause()
        assert run_screen(app).query_one(KeysBar) is bar and not list(bar.children)
        assert "t Transcript" in str(bar.render())
        start, _, _ = next(span for span in bar.key_spans if span[2] == "t")
        await pilot.click(KeysBar, offset=(start + 1, 0))
        await wait_until(pilot, lambda: isinstance(app.screen, TranscriptScreen))


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]) | st.none()),
    st.text(max_size=30),
)
def test_an_event_rows_time_is_the_events_own_isoformat(at, run_id) -> None:
    """The writer reads `at` off the serialized body instead of formatting it again."""
    from loopdeck.core.events import StateChanged
    from loopdeck.core.states import RunState
    from loopdeck.store.writer import event_row

    event = StateChanged(run_id=run_id, seq=7, at=at, source=RunState.READY,
                         target=RunState.PLANNING)  # fmt: skip
    row = event_row(event)
    assert row[:3] == (run_id, 7, "state_changed")
    assert row[3] == event.at.isoformat()


async def test_an_event_that_fails_to_serialize_as_published_is_still_committed(
    tmp_path, monkeypatch
) -> None:
    """Rows are made as events are published (the next batch overlaps the insert); a failure
    there never reaches the publisher, and the commit serializes the event again."""
    from loopdeck.core.events import EventBus, RunStarted, StateChanged
    from loopdeck.core.states import RunState
    from loopdeck.store import writer as writer_module
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    real_row = writer_module.event_row
    failing = {"on": True}

    def flaky_row(event: Any) -> Any:
        if failing["on"] and getattr(event, "kind", "") == "state_changed":
            raise RuntimeError("serializer hiccup")
        return real_row(event)

    monkeypatch.setattr(writer_module, "event_row", flaky_row)
    store = await open_store(tmp_path / "runs.db")
    bus, writer = EventBus(), EventWriter(store)
    bus.subscribe(writer)
    bus.publish(RunStarted(run_id="r", env="e", script=None, model="m", mode="rounds",
                           goal="g", budget={}))  # fmt: skip
    bus.publish(StateChanged(run_id="r", source=RunState.READY, target=RunState.PLANNING))
    failing["on"] = False
    await writer.flush()
    rows = await store.fetchall(
        "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq", ("r",)
    )
    await store.close()
    assert [tuple(r) for r in rows] == [(1, "run_started"), (2, "state_changed")]


def test_the_ledgers_usage_table_names_every_cap_with_its_use_and_limit() -> None:
    budget = Budget(
        max_turns=5, max_tool_calls=6, max_tokens=700, max_cost_usd=0.5, deadline_s=90,
        max_rounds=3, max_corrections=1,
    )  # fmt: skip
    ledger = BudgetLedger(budget)
    ledger.record_model_call(tokens=120, cost_usd=0.01)
    ledger.record_tool_call()
    ledger.rounds, ledger.corrections = 2, 1
    usage = ledger.usage()
    assert list(usage) == [cap.value for cap in Cap]
    for cap in Cap:
        used, limit = usage[cap.value]
        assert limit == budget.limit(cap)
        if cap is Cap.DEADLINE:
            assert 0 <= used <= ledger.elapsed()
        else:
            assert used == ledger.used(cap)


@pytest.mark.slow
def test_importing_litellm_headless_tunes_the_collector_and_keeps_an_embedders_choice() -> None:
    """`loopdeck run --headless` (`tuning.for_headless`): Python's thresholds become loopdeck's
    once LiteLLM is imported, an embedder's own are kept, and LiteLLM's modules are frozen.
    Without an entry point's tuning (an embedder), the import changes nothing."""
    probe = (
        "import gc, sys; from loopdeck import tuning; "
        "from loopdeck.llm.loader import litellm_module; {before}litellm_module(); "
        "print(gc.isenabled(), *gc.get_threshold(), gc.get_freeze_count())"
    )
    headless = "tuning.for_headless(); "
    cases = {
        headless: ("True", (20_000, 5, 100), True),  # Python's defaults: loopdeck's thresholds
        f"gc.set_threshold(1000, 20, 20); {headless}": ("True", (1000, 20, 20), True),  # kept
        f"gc.disable(); {headless}": ("False", (20_000, 5, 100), True),  # still held
        "": ("True", (700, 10, 10), False),  # an embedder: nothing changed, nothing frozen
    }
    for before, (enabled, thresholds, frozen) in cases.items():
        out = subprocess.run(
            [sys.executable, "-c", probe.format(before=before)],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert out[0] == enabled, before
        assert tuple(map(int, out[1:4])) == thresholds, before
        # LiteLLM's modules frozen out of the walks, or nothing frozen
        assert (int(out[4]) > 100_000) is frozen, before


async def test_only_the_console_holds_the_interpreters_lock_longer() -> None:
    """A headless run (and an embedder) keeps the process's switch interval; the console's
    tuning sets its own, so a paint and LiteLLM's request building do not cut into each other
    (see `loopdeck.tuning.lock_switching`); building the console's app changes nothing."""
    from loopdeck.tui.app import LoopdeckApp

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # Python's default, whatever tests ran before
    try:
        prepared, _ = prepare(SAMPLES / "order_support", "solve")
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
        assert outcome.stop_reason.value == "goal_met"
        assert sys.getswitchinterval() == 0.005
        LoopdeckApp()
        assert sys.getswitchinterval() == 0.005
        assert "switch interval" not in " ".join(tuning.for_console())  # measured on 3.11
        assert sys.getswitchinterval() == lock_switching.CONSOLE_SWITCH_INTERVAL_S
    finally:
        sys.setswitchinterval(before)


def test_the_call_panel_skips_layout_only_when_its_height_cannot_change() -> None:
    from loopdeck.tui.panels import _same_height

    assert _same_height("a\nb\nc", "x\n[b]y[/]\nz", width=10)
    assert not _same_height("a\nb", "a\nb\nc", width=10)  # one more line
    assert not _same_height("a\nb", "a\n" + "b" * 11, width=10)  # wraps at 10 columns
    assert not _same_height("a\n" + "b" * 11, "a\nb", width=10)  # the old text wrapped
    assert not _same_height("a\nb", "a\n" + "日" * 6, width=10)  # 12 cells, 6 characters
    assert not _same_height("a\nb", "a\n\tb", width=10)  # tabs are expanded


def test_collector_holds_nest_and_overlap_and_give_back_only_what_was_on() -> None:
    assert gc.isenabled()
    collector.hold()
    collector.hold()
    assert not gc.isenabled()
    collector.release()
    assert not gc.isenabled()  # one hold is left
    collector.release()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        collector.release()
    history = collector.Hold()  # a link's: held across batches, taken and given back at will
    history.hold()
    history.hold()
    history.release()
    assert gc.isenabled()
    history.release()
    gc.disable()  # off before the first hold: off after the last
    try:
        with collector.held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_holds_from_many_threads_give_the_collector_back_once_all_are_done() -> None:
    inside, leave = threading.Barrier(5), threading.Event()

    def holder() -> None:
        with collector.held():
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=holder) for _ in range(4)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert not gc.isenabled()
    leave.set()
    for thread in threads:
        thread.join()
    assert gc.isenabled()


def test_holds_that_overlap_past_the_bound_collect_the_young_generations(monkeypatch) -> None:
    monkeypatch.setattr(collector, "MAX_HELD_S", -1.0)
    collected: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collected.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with collector.held(), collector.held():
            assert collected == [1]  # the second hold found the first one held too long
        assert collected == [1, 1]  # and so did the release of the second
    finally:
        gc.callbacks.remove(seen)
    assert gc.isenabled()


async def test_a_model_call_holds_the_collector_and_gives_it_back(monkeypatch) -> None:
    """LiteLLM's copies of the conversation live only during the call, and a collection that
    lands in it walks them all: with a console (which asks for it) the call holds the
    collector, failed or not; headless it does not."""
    litellm = litellm_module()
    monkeypatch.setattr(collector, "_model_calls_hold", False)
    collector.hold_during_model_calls()
    acompletion = litellm.acompletion
    during: list[bool] = []

    async def watched(**kwargs: Any) -> Any:
        during.append(gc.isenabled())
        if kwargs["metadata"]["loopdeck_round"] == 2:
            raise litellm.RateLimitError("slow down", llm_provider="x", model="y")
        return await acompletion(**kwargs)

    monkeypatch.setattr(litellm, "acompletion", watched)
    model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll")]))
    messages = [{"role": "user", "content": "poll"}]
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=messages))
    assert reply.tool_calls[0].name == "poll"
    assert gc.isenabled()
    with pytest.raises(ProviderError):
        await model.complete(ModelRequest(role="executor", round=2, messages=messages))
    assert during == [False, False]
    assert gc.isenabled()
    collector.hold_during_model_calls(False)
    await model.complete(ModelRequest(role="executor", round=1, messages=messages))
    assert during == [False, False, True]


async def test_the_scripted_model_plays_off_the_loop_and_fails_where_a_provider_fails(
    monkeypatch,
) -> None:
    """The offline model's work (counting a long conversation's tokens) is done in LiteLLM's
    thread pool, where a real provider's request is made; its errors still come back through
    LiteLLM's mapping when the call is awaited."""
    from loopdeck.llm import scripted_provider

    threads: list[threading.Thread] = []
    play = scripted_provider.play

    def watched(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return play(*args, **kwargs)

    monkeypatch.setattr(scripted_provider, "play", watched)
    model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll")]))
    messages = [{"role": "user", "content": "poll"}]
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=messages))
    assert reply.tool_calls[0].name == "poll" and reply.prompt_tokens > 0
    assert threads and threads[0] is not threading.current_thread()
    assert model.script_key is not None
    scripted_provider.release_script(model.script_key)
    with pytest.raises(ProviderError, match="without a registered script"):
        await model.complete(ModelRequest(role="executor", round=1, messages=messages))
