"""No model output crashes the run: every reply becomes a decision, a correction or a named
stop, and everything it leaves in events can be stored (issue 8, item 7)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import EDGES, prepare
from fake_models import ReplayModel, calls
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopdeck.core.decisions import InvalidDecision, read_decision
from loopdeck.core.events import CallProposed, DecisionInvalid, DecisionMade, EventBase
from loopdeck.core.model import ModelReply, ProviderError, RawToolCall
from loopdeck.core.states import StopReason
from loopdeck.llm.client import _first_message
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter, event_json

TOOLS = prepare(EDGES, "double-note")[0]
TOOL_SPECS = dict(TOOLS.runtime.tools)
TOOLS.cleanup()

text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60)
weird = st.sampled_from(
    ["\ud800", "\udfff", "\u202e", "\x1b[2J", "\x00", "e\u0301", "Step " + "9" * 5000, ""]
)
any_text = st.one_of(text, weird, st.builds(lambda a, b: a + b, text, weird))
numbers = st.one_of(
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.builds(lambda: 10**5000)
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, any_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value)
    except ValueError:  # a number too long to print: send it as raw text instead
        return "{" + "9" * 5000 + "}"


raw_arguments = st.one_of(
    json_values.map(_dumps),
    any_text,
    st.integers(1, 2000).map(lambda n: '{"text": ' + "[" * n + "]" * n + "}"),
    st.just('{"replicas": ' + "9" * 5000 + "}"),
    st.just('{"text": "\\ud800"}'),
    st.fixed_dictionaries({"text": any_text}).map(json.dumps),
    st.fixed_dictionaries({"replicas": json_values}).map(_dumps),
)
tool_names = st.one_of(st.sampled_from(sorted(TOOL_SPECS)), any_text)
tool_calls = st.lists(
    st.builds(
        lambda i, n, a: RawToolCall(id=i, name=n, arguments=a), any_text, tool_names, raw_arguments
    ),
    max_size=3,
)
envelopes = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_call", "final", "ask_user", "handoff", "other"])},
    optional={
        "tool_name": tool_names,
        "arguments": json_values,
        "message": any_text,
        "reason_code": any_text,
        "plan_step": numbers,
    },
).map(_dumps)
replies = st.builds(
    lambda content, calls: ModelReply(model="fuzz", content=content, tool_calls=calls),
    st.one_of(st.none(), any_text, envelopes),
    tool_calls,
)


def _store_row(db: sqlite3.Connection, event: EventBase) -> None:
    body = event_json(event)
    db.execute(
        "INSERT INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
        (event.run_id, event.seq, getattr(event, "kind", ""), event.at.isoformat(), body),
    )


def _through_decision_path(reply: ModelReply, db: sqlite3.Connection) -> str:
    try:
        decision = read_decision(reply, TOOL_SPECS)
    except InvalidDecision as invalid:
        _store_row(db, DecisionInvalid(run_id="r", round=1, error=str(invalid), corrections_used=1))
        return "correction"
    _store_row(
        db,
        DecisionMade(
            run_id="r",
            round=1,
            decision=decision.type,
            reason_code=decision.reason_code,
            message=decision.message,
            via=decision.via,
            plan_step=decision.plan_step,
        ),
    )
    for call in decision.calls:
        _store_row(
            db,
            CallProposed(
                run_id="r", call_id="c", round=1, tool=call.tool, args=call.args,
                risk="read", fingerprint="f", state_hash="s",
            ),
        )  # fmt: skip
    return decision.type


def _memory_store() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE events (run_id, seq, kind, at, body)")
    return db


def fuzz(examples: int) -> None:
    db = _memory_store()
    seen: dict[str, int] = {}

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(replies)
    def every_reply_is_a_decision_or_a_correction(reply: ModelReply) -> None:
        outcome = _through_decision_path(reply, db)
        seen[outcome] = seen.get(outcome, 0) + 1

    every_reply_is_a_decision_or_a_correction()
    assert sum(seen.values()) >= examples * 0.9
    assert seen.get("correction") and len(seen) > 1, seen


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
def test_generated_replies_never_raise() -> None:
    fuzz(int(os.environ.get("LOOPDECK_FUZZ_EXAMPLES", "2000")))


@pytest.mark.slow
def test_ten_thousand_generated_replies_never_raise() -> None:
    fuzz(10_000)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"text": ' + "[" * 1200 + "]" * 1200 + "}", "nested too deep"),
        ('{"replicas": ' + "9" * 5000 + "}", "not valid JSON"),
        ("{" * 100_000, "not valid JSON"),
    ],
    ids=["nested-1200", "digits-5000", "open-braces"],
)
def test_arguments_the_parser_cannot_read_are_corrections(arguments: str, problem: str) -> None:
    reply = ModelReply(
        model="m", tool_calls=[RawToolCall(id="1", name="write_note", arguments=arguments)]
    )
    with pytest.raises(InvalidDecision, match=problem):
        read_decision(reply, TOOL_SPECS)


def test_a_huge_step_number_is_no_step_and_megabyte_arguments_pass() -> None:
    big = "x" * 1_100_000
    reply = calls(("write_note", {"text": big}), content="Step " + "9" * 5000)
    decision = read_decision(reply, TOOL_SPECS)
    assert decision.plan_step is None and decision.calls[0].args["text"] == big


def test_lone_surrogates_are_escaped_not_fatal() -> None:
    reply = calls(("write_note", '{"text": "a\\ud800b"}'), content="Step 1 \ud800")
    decision = read_decision(reply, TOOL_SPECS)
    assert decision.calls[0].args == {"text": "a\\ud800b"}
    assert "\\ud800" in decision.message
    json.dumps(decision.model_dump()).encode("utf-8")


def test_an_empty_provider_response_is_a_provider_failure() -> None:
    class NoChoices:
        choices: list[Any] = []

    with pytest.raises(ProviderError, match="no choices") as raised:
        _first_message(NoChoices())
    assert raised.value.retryable
    with pytest.raises(ProviderError):
        _first_message(object())


async def test_a_model_that_breaks_its_client_ends_provider_failure() -> None:
    class Broken(ReplayModel):
        async def complete(self, request):
            raise IndexError("list index out of range")

    prepared, _ = prepare(EDGES, "double-note")
    prepared.runtime.model = Broken([])
    prepared.runtime.config = prepared.runtime.config.model_copy(update={"model_backoff_s": 0.0})
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.PROVIDER_FAILURE
    assert "IndexError" in outcome.detail


async def test_surrogates_in_content_reach_the_store_and_the_run_stops_cleanly(tmp_path) -> None:
    model = ReplayModel(
        [
            ModelReply(model="fake", content="garbage \ud800"),
            ModelReply(
                model="fake",
                content=json.dumps(
                    {"type": "ask_user", "message": "which? \udfff", "reason_code": "Q"}
                ),
            ),
        ]
    )
    store = await open_store(tmp_path / "s.db")
    try:
        prepared, _ = prepare(EDGES, "double-note")
        prepared.runtime.model = model
        recorded = RecordedRun(store, prepared.runtime, EventWriter(store))
        outcome = await recorded.run()
        prepared.cleanup()
        assert recorded.persist_error is None
        rows = await store.fetchall("SELECT kind, body FROM events ORDER BY seq")
    finally:
        await store.close()
    assert outcome.stop_reason is StopReason.ASK_USER
    assert "\\udfff" in outcome.detail
    assert rows[-1]["kind"] == "run_stopped"
    assert not list(Path(os.environ["XDG_DATA_HOME"]).glob("**/unsaved-*"))


async def test_a_writer_failure_of_any_kind_is_spilled_and_the_run_still_stops(tmp_path) -> None:
    store = await open_store(tmp_path / "s.db")
    try:
        prepared, _ = prepare(EDGES, "poll-job")
        writer = EventWriter(store)

        async def broken_commit(batch):
            raise RuntimeError("disk on fire")

        writer.commit = broken_commit  # type: ignore[method-assign]
        recorded = RecordedRun(store, prepared.runtime, writer)
        outcome = await recorded.run()
        prepared.cleanup()
    finally:
        await store.close()
    assert outcome.stop_reason is StopReason.GOAL_MET  # the poll needs no approval to be durable
    assert recorded.persist_error and "disk on fire" in recorded.persist_error
    [spill] = list(Path(os.environ["XDG_DATA_HOME"]).glob("loopdeck/spill/unsaved-*.jsonl"))
    assert stat.S_IMODE(spill.stat().st_mode) == 0o600
    header, *events = spill.read_text().splitlines()
    assert json.loads(header)["store"] == str((tmp_path / "s.db").resolve())
    kinds = [json.loads(line)["kind"] for line in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_stopped"
