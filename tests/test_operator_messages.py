"""Messaging the agent (issue 27): the operator's words reach the model before its next turn,
as the operator's (a user message, never a tool result), in an order every provider takes.

A loopback OpenAI server (`StrictOpenAI`, which refuses what the chat API refuses) holds a
chosen request open while the test speaks, so "in flight" is exact: the held request must not
carry the message and the next one must.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Any, Literal

import pytest
from conftest import HARNESS, Recorder
from fake_openai import Reply, envelope, text, tool_call
from store_helpers import last_json, loopdeck, open_existing
from test_provider_message_order import PLAN, StrictOpenAI, calls, order_problems

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest, AutoApprover
from loopdeck.core.events import EventBus, OperatorMessage
from loopdeck.core.operator_messages import MESSAGE_CAP
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import StopReason
from loopdeck.core.text import TRUNCATION_MARK, capped
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.replay_link import ReplayLink
from loopdeck.operator.transcript import Transcript
from loopdeck.store.base import Location

Mode = Literal["rounds", "react"]
SAID = "use the note text done, nothing else"
# Controls, an escape sequence, bidi overrides and isolates, a lone surrogate, then 1 MB.
HOSTILE = "\x1b[2J\x00\x07\u202eevil\u2066x\u2069\ud800 [b]bold[/] " + "A" * 1_000_000
PIPED = HOSTILE.replace("\ud800", "?")  # what a pipe can carry (no lone surrogate)


class HeldOpenAI(StrictOpenAI):
    """Holds request `hold` open until `release` is set; `on_hold` runs as it is held."""

    def __init__(self, replies: list[Reply], hold: int, on_hold: Any) -> None:
        super().__init__(replies)
        self.hold = hold
        self.on_hold = on_hold
        self.release = threading.Event()

    def reply_to(self, body: dict[str, Any]) -> Reply:
        if len(self.requests) == self.hold:
            self.on_hold()
            assert self.release.wait(30), "the test never let the held request go"
        return super().reply_to(body)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")


def _options(url: str, mode: Mode) -> RunOptions:
    return RunOptions(
        env=str(HARNESS), model="openai/gpt-4o-mini", api_base=url, mode=mode, approve="auto"
    )


def _operator_words(request: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in request["messages"]
        if m["role"] == "user" and m["content"].startswith("The operator says: ")
    ]


def _speak_when_held(runtime_of: Any, said: str, server_of: Any) -> Any:
    """What the server runs as it holds a request: the message given to the run on its own
    loop, the request let go once the run recorded it."""
    loop = asyncio.get_running_loop()

    def on_hold() -> None:
        runtime: Runtime = runtime_of()
        heard = threading.Event()
        runtime.bus.subscribe(lambda e: heard.set() if isinstance(e, OperatorMessage) else None)
        loop.call_soon_threadsafe(runtime.message, said, "test")
        assert heard.wait(10), "the run never recorded the message"
        server_of().release.set()

    return on_hold


async def _run_holding(
    replies: list[Reply], hold: int, mode: Mode, said: str = SAID
) -> tuple[Any, HeldOpenAI, Recorder]:
    box: dict[str, Any] = {}
    on_hold = _speak_when_held(lambda: box["runtime"], said, lambda: box["server"])
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    with HeldOpenAI(replies, hold, on_hold) as server:
        box["server"] = server
        prepared = prepare_run(_options(server.url, mode), approver=AutoApprover(), bus=bus)
        box["runtime"] = prepared.runtime
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert not server.refused, (outcome.stop_reason, server.refused)
    return outcome, server, recorder


ECHO_THEN_NOTE = [
    tool_call("echo", {"text": "a"}, "call_1"),
    tool_call("write_note", {"text": "done"}, "call_2"),
]


@pytest.mark.parametrize("mode", ["rounds", "react"])
async def test_a_message_sent_while_the_model_call_is_in_flight_reaches_the_next_request(
    mode: Mode,
) -> None:
    replies = [PLAN, *ECHO_THEN_NOTE] if mode == "rounds" else list(ECHO_THEN_NOTE)
    held = 1 if mode == "rounds" else 0  # the executor's first call
    outcome, server, recorder = await _run_holding(replies, held, mode)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert len(server.requests) == len(replies)
    assert _operator_words(server.requests[held]) == []  # sent while this one was in flight
    nxt = server.requests[held + 1]["messages"]
    assert [m["role"] for m in nxt[-3:]] == ["assistant", "tool", "user"]
    assert nxt[-2]["tool_call_id"] == "call_1"
    assert nxt[-1] == {"role": "user", "content": f"The operator says: {SAID}"}
    [message] = recorder.kinds("operator_message")
    assert (message.text, message.by) == (SAID, "test")
    assert all(not order_problems(r["messages"]) for r in server.requests)


class SpeakingApprover(AutoApprover):
    """Approves every write; as it is asked, the operator speaks (inside the batch)."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        assert self.runtime is not None
        self.runtime.message(SAID, by="test")
        return await super().ask(request)


@pytest.mark.parametrize("mode", ["rounds", "react"])
async def test_a_message_arriving_inside_a_batch_comes_after_its_last_result(mode: Mode) -> None:
    batch = calls(
        ("call_b", "echo", {"text": "b"}),
        ("call_w", "write_note", {"text": "draft"}),
        ("call_c", "echo", {"text": "c"}),
    )
    executor = [batch, tool_call("write_note", {"text": "done"}, "call_d")]
    replies = [PLAN, *executor] if mode == "rounds" else executor
    approver = SpeakingApprover()
    with StrictOpenAI(replies) as server:
        prepared = prepare_run(_options(server.url, mode), approver=approver)
        approver.runtime = prepared.runtime
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert not server.refused, server.refused
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    last = server.requests[-1]["messages"]
    at = next(i for i, m in enumerate(last) if m.get("tool_calls"))
    tail = last[at:]
    assert [m["role"] for m in tail] == ["assistant", "tool", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in tail[1:4]] == ["call_b", "call_w", "call_c"]
    assert tail[4] == {"role": "user", "content": f"The operator says: {SAID}"}


async def test_the_next_planner_and_round_hear_the_runs_messages() -> None:
    """Rounds: a message sent while the executor's call is in flight reaches the executor's
    next turn, then the next round's planner and executor are reminded of it."""
    replies = [
        PLAN,
        tool_call("write_note", {"text": "draft"}, "call_1"),
        envelope(type="final", message="round one is done", reason_code="done"),
        text("1. Write the note done."),
        tool_call("write_note", {"text": "done"}, "call_2"),
    ]
    outcome, server, _ = await _run_holding(replies, 1, "rounds")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert len(server.requests) == 5
    assert _operator_words(server.requests[1]) == []
    assert _operator_words(server.requests[2]) == [f"The operator says: {SAID}"]
    planner, executor = server.requests[3]["messages"], server.requests[4]["messages"]
    reminder = f"THE OPERATOR HAS SAID, EARLIER IN THIS RUN\n- {SAID}"
    assert planner[0]["content"].startswith("You are the planner")
    assert reminder in planner[1]["content"]
    assert reminder in executor[1]["content"] and executor[1]["content"].startswith("PLAN\n")
    assert _operator_words(server.requests[4]) == []  # reminded, not said again


async def test_a_hostile_message_is_capped_for_the_model_and_escaped_in_the_transcript() -> None:
    replies = [PLAN, *ECHO_THEN_NOTE]
    outcome, server, recorder = await _run_holding(replies, 1, "rounds", said=HOSTILE)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    [heard] = _operator_words(server.requests[2])
    expected = capped(HOSTILE.replace("\ud800", "\\ud800"), MESSAGE_CAP)
    assert heard == f"The operator says: {expected}"
    assert heard.endswith(TRUNCATION_MARK.format(len(HOSTILE) + 5 - MESSAGE_CAP))
    [message] = recorder.kinds("operator_message")
    assert message.text == expected and len(message.text) < MESSAGE_CAP + 40
    transcript = Transcript()
    entry = transcript.apply(message)
    assert entry is not None and entry.title.startswith("the operator says · by test")
    for raw in ("\x1b", "\x00", "\x07", "\u202e", "\u2066", "\u2069"):
        assert raw not in entry.body
    assert entry.body.startswith("\\u001b[2J\\u0000\\u0007\\u202eevil")


async def test_a_stopped_run_takes_no_message() -> None:
    with StrictOpenAI([PLAN, *ECHO_THEN_NOTE]) as server:
        prepared = prepare_run(_options(server.url, "rounds"), approver=AutoApprover())
        try:
            await prepared.runtime.run()
            assert prepared.runtime.message("too late", by="test") is False
        finally:
            prepared.cleanup()


# -- through the real CLI and the store, on SQLite and PostgreSQL -----------------------------
def _runner(url: str, db: Location) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "run", str(HARNESS), "--model", "openai/gpt-4o-mini",
         "--api-base", url, "--headless", "--json", "--approve", "auto", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


async def _recorded_messages(db: Location, run_id: str, count: int) -> list[dict[str, Any]]:
    """The run's `operator_message` events, once `count` of them are in the store."""
    for _ in range(300):
        store = await open_existing(db)
        if store is not None:
            try:
                rows = await store.fetchall(
                    "SELECT body FROM events WHERE run_id = ? AND kind = 'operator_message'"
                    " ORDER BY seq",
                    (run_id,),
                )
            finally:
                await store.close()
            if len(rows) >= count:
                return [json.loads(row["body"]) for row in rows]
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id}: {count} messages never recorded")


# Several seconds of subprocesses or console: in `make stress` (CI runs both).
@pytest.mark.slow
async def test_loopdeck_message_reaches_a_headless_run_through_the_store(db) -> None:
    """`loopdeck message` from another terminal while the model call is in flight: the
    runner takes it from the store, records it, and the next request carries it (one from
    the command line, one read from stdin: 1 MB of hostile text, capped)."""
    in_flight = threading.Event()
    server = HeldOpenAI([PLAN, *ECHO_THEN_NOTE], 1, in_flight.set)
    with server:
        runner = _runner(server.url, db)
        try:
            run_id = runner.stderr.readline().split()[1]  # "run ID started · watch: …"
            assert await asyncio.to_thread(in_flight.wait, 60), "the executor never called"
            said = loopdeck("message", run_id, SAID, "--json", db=db)
            assert said.returncode == 0, said.stderr
            assert last_json(said.stdout) == {
                "run_id": run_id,
                "command": "message",
                "chars": len(SAID),
                "cut": False,
            }
            piped = subprocess.run(
                [sys.executable, "-m", "loopdeck", "message", run_id, "-", "--db", str(db)],
                input=PIPED, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert piped.returncode == 0, piped.stderr
            # what the model hears is said: the first MESSAGE_CAP characters
            assert f"message sent ({len(PIPED):,} characters, cut to {MESSAGE_CAP:,})" in (
                piped.stdout
            )
            recorded = await _recorded_messages(db, run_id, 2)
            server.release.set()
            out, _ = runner.communicate(timeout=60)
        finally:
            server.release.set()
            runner.kill()
    assert last_json(out)["stop_reason"] == "goal_met"
    assert not server.refused, server.refused
    assert _operator_words(server.requests[1]) == []
    long = capped(PIPED, MESSAGE_CAP)
    assert _operator_words(server.requests[2]) == [
        f"The operator says: {SAID}",
        f"The operator says: {long}",
    ]
    assert [m["text"] for m in recorded] == [SAID, long]
    assert all(m["by"].startswith("cli") for m in recorded)
    exported = loopdeck("export", run_id, db=db).stdout
    assert [
        json.loads(line)["text"] for line in exported.splitlines() if '"operator_message"' in line
    ] == [SAID, long]
    replay = ReplayLink(db, run_id)  # `loopdeck replay`: the same events, the same entries
    await replay.drive()
    transcript = Transcript()
    entries = [transcript.apply(e) for e in replay.events if isinstance(e, OperatorMessage)]
    assert [e.title.split(" at ")[0] for e in entries if e] == [
        f"the operator says · by {m['by']}" for m in recorded
    ]
    assert not any(raw in entries[1].body for raw in ("\x1b", "\x00", "\u202e"))
    late = loopdeck("message", run_id, "again", db=db)
    assert late.returncode == 1 and "already ended (goal_met): nothing to message" in late.stderr


def test_an_empty_message_is_refused_before_the_store_is_opened(cli, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("message", "r-none", "  ")
    assert exit_info.value.code == 2
    assert "TEXT: is empty: nothing to say to the agent" in capsys.readouterr().err
