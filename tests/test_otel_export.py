"""A run as one OpenTelemetry trace (`loopdeck export RUN_ID --otlp URL`, `loopdeck run …
--otlp URL`), received by a loopback OTLP/HTTP collector this test runs and read back from
the protobuf it was sent."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from loopdeck.cli import main
from loopdeck.cli.runs import run_recorded_headless
from loopdeck.core.event_base import CallStatus
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    CallProposed,
    Event,
    GrantGiven,
    GuardTripped,
    ModelCalled,
    OperatorMessage,
    PlanWritten,
    QuestionAnswered,
    QuestionAsked,
    RunStarted,
    RunStopped,
    StateChanged,
    ToolFinished,
)
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.otel_export import LiveTrace
from loopdeck.operator.otel_spans import TraceBuilder, ns
from loopdeck.store.liveness import this_host

ORDER_SUPPORT = str(SAMPLES / "order_support")


class Collector:
    """An OTLP/HTTP endpoint on the loopback: every POST to /v1/traces decoded and kept."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        kept = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                kept.requests.append(request)
                kept.bodies.append(body)
                kept.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list[Span]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def collector() -> Iterator[Collector]:
    kept = Collector()
    kept.thread.start()
    yield kept
    kept.server.shutdown()
    kept.server.server_close()


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attrs(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def named(spans: list[Span], name: str) -> list[Span]:
    return [span for span in spans if span.name == name]


def recorded(db: Path, *, mode: str | None = None, trace: LiveTrace | None = None) -> str:
    """order_support's `solve` recorded headless to `db` (writes approved `auto`): its id."""
    options = RunOptions(env=ORDER_SUPPORT, script="solve", approve="auto", mode=mode)
    with contextlib.redirect_stderr(io.StringIO()):  # "run … started": not what is tested
        outcome = asyncio.run(run_recorded_headless(options, db, trace=trace))
    assert outcome.stop_reason is StopReason.GOAL_MET
    return outcome.run_id


def test_a_run_is_one_trace_in_the_conventions_shape(
    tmp_path, capsys, collector, monkeypatch
) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Basic bG9vcGRlY2s6eA==")
    assert main(["export", run_id, "--db", str(db), "--otlp", collector.url]) == 0
    out, err = capsys.readouterr()
    spans = collector.spans()
    said_line = f"trace {spans[0].trace_id.hex()}: {len(spans)} spans sent to {collector.url}"
    assert (out.strip(), err) == (said_line, "")
    assert collector.headers[0]["authorization"] == "Basic bG9vcGRlY2s6eA=="
    assert len({span.trace_id for span in spans}) == 1
    (root,) = [span for span in spans if not span.parent_span_id]
    assert root.name == "invoke_agent order_support"
    said = attrs(root.attributes)
    assert said["gen_ai.operation.name"] == "invoke_agent"
    assert said["gen_ai.conversation.id"] == run_id
    assert said["gen_ai.agent.name"] == "order_support"
    assert said["gen_ai.request.model"] == "scripted"
    assert (said["loopdeck.stop_reason"], said["loopdeck.mode"]) == ("goal_met", "rounds")
    assert said["loopdeck.budget.tool_calls.used"] == 3.0
    assert root.status.code == Status.STATUS_CODE_UNSET

    (plan,) = named(spans, "plan order_support")
    assert plan.parent_span_id == root.span_id
    assert attrs(plan.attributes)["gen_ai.operation.name"] == "plan"
    chats = sorted(named(spans, "chat scripted"), key=lambda span: span.start_time_unix_nano)
    assert len(chats) == 4 and {chat.parent_span_id for chat in chats} == {plan.span_id}
    assert attrs(chats[0].attributes)["loopdeck.role"] == "planner"
    assert attrs(chats[1].attributes)["gen_ai.usage.input_tokens"] > 0

    (write,) = named(spans, "execute_tool update_delivery_address")
    assert write.parent_span_id == plan.span_id
    tool = attrs(write.attributes)
    assert tool["gen_ai.tool.name"] == "update_delivery_address"
    assert (tool["gen_ai.tool.call.id"], tool["loopdeck.risk"]) == ("c3", "write")
    assert (tool["loopdeck.status"], len(tool["loopdeck.fingerprint"])) == ("executed", 12)
    decided = [event for event in write.events if event.name == "loopdeck.approval.decided"]
    assert [attrs(event.attributes)["loopdeck.by"] for event in decided] == ["auto"]
    assert write.start_time_unix_nano <= decided[0].time_unix_nano <= write.end_time_unix_nano

    # Nothing the run said is on the spans unless asked for.
    assert b"7 New Street" not in collector.bodies[0] and b"ORD-1042" not in collector.bodies[0]
    assert "gen_ai.tool.call.arguments" not in tool


def test_the_runs_words_go_only_with_otlp_content(tmp_path, cli, collector) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    code, _, _ = cli("export", run_id, "--db", str(db), "--otlp", collector.url, "--otlp-content")
    assert code == 0
    spans = collector.spans()
    (write,) = named(spans, "execute_tool update_delivery_address")
    arguments = attrs(write.attributes)["gen_ai.tool.call.arguments"]
    assert "7 New Street, Springfield" in arguments
    assert "gen_ai.tool.call.result" in attrs(write.attributes)
    chats = sorted(named(spans, "chat scripted"), key=lambda span: span.start_time_unix_nano)
    assert "ORD-1042" in attrs(chats[0].attributes)["gen_ai.output.messages"]
    # a reply's tool calls are in its output message as the conventions' tool_call parts
    replies = [json.loads(attrs(chat.attributes)["gen_ai.output.messages"]) for chat in chats]
    calls = [part for [message] in replies for part in message["parts"]
             if part["type"] == "tool_call"]  # fmt: skip
    writing = next(part for part in calls if part["name"] == "update_delivery_address")
    assert writing["arguments"]["new_address"] == "7 New Street, Springfield" and writing["id"]


MARK = "zq7-vault-4417"  # the env's words: in its goal, plan, arguments, results, errors, check
VAULT_ENV = f'''
from loopdeck.core import Environment, ErrorCode, ToolError, tool
from pydantic import BaseModel, ConfigDict

class Key(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str

class Vault(Environment):
    reads = 0

    def snapshot(self):
        return {{"sealed": True}}

    def unmet(self, snapshot):
        return ["still sealed: db_url=postgres://{MARK}@db/prod"]

    @tool(args=Key)
    def read_secret(self, args):
        """Read a secret."""
        self.reads += 1
        if self.reads == 1:
            raise ToolError(ErrorCode.TEMPORARY_UNAVAILABLE, "vault busy: {MARK}")
        return {{"db_url": "postgres://{MARK}@db/prod"}}

    @tool(args=Key)
    def open_door(self, args):
        """Open a door."""
        raise ToolError(ErrorCode.NOT_FOUND, "no door {MARK}")

def make_env(workdir, data):
    return Vault(workdir, data)
'''
VAULT_SCENARIO = f'''
name = "vault"
goal = "Unseal the vault {MARK}."
model = "scripted"
mode = "rounds"
[budgets]
max_rounds = 1
[scripts.leak]
planner = ["1. Read the secret {MARK}.\\n2. Open the door."]
[[scripts.leak.executor]]
tool = "read_secret"
args = {{ key = "{MARK}" }}
[[scripts.leak.executor]]
tool = "open_door"
args = {{ key = "{MARK}" }}
[[scripts.leak.executor]]
final = "Done with {MARK}."
reason_code = "SAW_{MARK}"
'''


def _carrying(spans: list[Span], words: str) -> list[str]:
    """Where on the spans `words` are: "span name: attribute" or "span name: event/attribute"."""
    found = [
        f"{span.name}: {key}"
        for span in spans
        for key, said in attrs(span.attributes).items()
        if words in str(said)
    ]
    found += [
        f"{span.name}: {event.name}/{key}"
        for span in spans
        for event in span.events
        for key, said in attrs(event.attributes).items()
        if words in str(said)
    ]
    return found + [f"{span.name}: status" for span in spans if words in span.status.message]


def test_without_otlp_content_no_word_of_the_env_leaves(tmp_path, cli, collector) -> None:
    """The env's words (a retried read's error, a result, a failed call's message, the goal
    check's finding in the stop's detail, the model's plan and reason code) go nowhere in what
    is sent, live or exported, without `--otlp-content`; with it they do."""
    env = tmp_path / "vault"
    env.mkdir()
    (env / "env.py").write_text(VAULT_ENV)
    (env / "scenario.toml").write_text(VAULT_SCENARIO)
    db = str(tmp_path / "runs.db")
    code, outcome, err = cli("run", str(env), "--script", "leak", "--headless", "--json",
                             "--db", db, "--otlp", collector.url)  # fmt: skip
    assert code == 1 and outcome is not None and "spans sent to" in err
    assert outcome["stop_reason"] == "stalled" and MARK in outcome["detail"]
    assert cli("export", outcome["run_id"], "--db", db, "--otlp", collector.url)[0] == 0
    assert _carrying(collector.spans(), MARK) == []
    assert len(collector.bodies) >= 2 and not [b for b in collector.bodies if MARK.encode() in b]
    spans = collector.spans()  # the live trace's, then the exported one's
    assert {attrs(root.attributes)["loopdeck.stop_reason"]
            for root in named(spans, "invoke_agent vault")} == {"stalled"}  # fmt: skip
    door = named(spans, "execute_tool open_door")[0]
    assert attrs(door.attributes)["error.type"] == "NOT_FOUND"  # loopdeck's code, not words

    sent = len(collector.bodies)
    argv = ["export", outcome["run_id"], "--db", db, "--otlp", collector.url, "--otlp-content"]
    assert cli(*argv)[0] == 0
    root = named(collector.spans()[len(spans) :], "invoke_agent vault")[0]
    assert MARK in attrs(root.attributes)["loopdeck.detail"]
    assert all(MARK.encode() in body for body in collector.bodies[sent:])


def test_in_react_mode_the_calls_hang_under_the_run(tmp_path, cli, collector) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db, mode="react")
    assert cli("export", run_id, "--db", str(db), "--otlp", collector.url)[0] == 0
    spans = collector.spans()
    (root,) = named(spans, "invoke_agent order_support")
    assert not [span for span in spans if span.name.startswith("plan")]
    assert {span.parent_span_id for span in spans if span is not root} == {root.span_id}


def _crash_after(db: Path, run_id: str, call_id: str) -> int:
    """The run as its runner left it had it died just after proposing `call_id`: the later
    events gone, the run live, its runner a dead process. Returns that proposal's time."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT seq, at FROM events WHERE run_id = ? AND kind = 'call_proposed'"
            " AND body LIKE ?",
            (run_id, f'%"call_id":"{call_id}"%'),
        ).fetchall()
        ((seq, at),) = rows
        conn.execute("DELETE FROM events WHERE run_id = ? AND seq > ?", (run_id, seq))
        conn.execute(
            "UPDATE runs SET state = 'executing', stop_reason = NULL, ended_at = NULL, pid = ?,"
            " host = ?, pid_started = NULL WHERE run_id = ?",
            (dead.pid, this_host(), run_id),
        )
    return ns(datetime.fromisoformat(at))


def test_a_crashed_run_ends_at_its_last_event(tmp_path, cli, collector) -> None:
    """Its runner died after proposing the write: the export marks the run crashed, and the
    trace ends where the runner stopped recording, not when the crash was found."""
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    last = _crash_after(db, run_id, "c3")
    assert cli("export", run_id, "--db", str(db), "--otlp", collector.url)[0] == 0
    spans = collector.spans()
    (root,) = named(spans, "invoke_agent order_support")
    assert root.end_time_unix_nano == last
    assert attrs(root.attributes)["loopdeck.stop_reason"] == "crashed"
    assert root.status.code == Status.STATUS_CODE_ERROR
    (write,) = named(spans, "execute_tool update_delivery_address")
    assert (write.start_time_unix_nano, write.end_time_unix_nano) == (last, last)
    assert attrs(write.attributes)["loopdeck.status"] == "interrupted"
    assert max(span.end_time_unix_nano for span in spans) == last


def test_a_record_cut_after_a_proposal_ends_there() -> None:
    """A record with no stop at all (a run still going, or cut short): the spans end at its
    last event, the call without a status of its own."""
    events = _a_run()
    cut = events[: next(i for i, e in enumerate(events) if isinstance(e, CallProposed)) + 1]
    builder = TraceBuilder()
    for event in cut:
        builder.take(event)
    spans = {span.name: span for span in builder.finish()}
    end = ns(cut[-1].at)
    assert max(span.end_time or 0 for span in spans.values()) == end
    assert spans["invoke_agent shop"].end_time == end
    assert spans["execute_tool refund"].end_time == end
    said = dict(spans["execute_tool refund"].attributes or {})
    assert said["loopdeck.unfinished"] is True and "loopdeck.status" not in said
    assert "loopdeck.stop_reason" not in dict(spans["invoke_agent shop"].attributes or {})


def test_an_unreachable_endpoint_is_named_exit_2(tmp_path, cli, monkeypatch) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    url = f"http://127.0.0.1:{port}/v1/traces"
    code, _, err = cli("export", run_id, "--db", str(db), "--otlp", url)
    assert code == 2
    spans = "(9 of 9 spans not sent)"
    assert err.strip() == f"loopdeck: cannot send the trace to {url}: Connection refused {spans}"


def test_an_endpoint_that_refuses_the_trace_says_its_status(tmp_path, cli, collector) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    url = collector.url.replace("/v1/traces", "/elsewhere")
    code, _, err = cli("export", run_id, "--db", str(db), "--otlp", url)
    assert (code, err.strip()) == (
        2,
        f"loopdeck: cannot send the trace to {url}: HTTP 404 Not Found (9 of 9 spans not sent)",
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--otlp", "localhost:4318"], "must be an http:// or https:// URL"),
        (["--otlp-content"], "--otlp-content goes with --otlp URL"),
    ],
)
def test_otlp_flags_are_checked(tmp_path, capsys, argv, said) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    try:
        code = main(["export", run_id, "--db", str(db), *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = int(exc.code or 0)
    assert code == 2 and said in capsys.readouterr().err


def test_a_bare_collector_address_gets_the_traces_path(tmp_path, cli, collector) -> None:
    db = tmp_path / "runs.db"
    run_id = recorded(db)
    bare = collector.url.removesuffix("/v1/traces")
    assert cli("export", run_id, "--db", str(db), "--otlp", bare)[0] == 0
    assert collector.spans()


@pytest.mark.parametrize("every_s", [3600.0, 0.0])
def test_a_live_trace_is_the_exported_trace(tmp_path, cli, collector, every_s) -> None:
    """`run --otlp` builds the spans from the bus as the run goes, and sends what has ended
    while it runs (`every_s` 0: at each chance); exported again from the store they are the
    same spans (ids, names, parents, times), so a backend keeps one."""
    db = tmp_path / "runs.db"
    live = LiveTrace(collector.url, every_s=every_s)
    run_id = recorded(db, trace=live)
    sent = live.send()
    live_requests = len(collector.requests)
    assert sent.spans == len(collector.spans()) == 9
    assert (live_requests > 1) == (every_s == 0.0)  # ended spans went before the stop
    assert cli("export", run_id, "--db", str(db), "--otlp", collector.url)[0] == 0
    shape = [
        sorted(
            (s.span_id, s.parent_span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano)
            for request in requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for s in scope.spans
        )
        for requests in (collector.requests[:live_requests], collector.requests[live_requests:])
    ]
    assert shape[0] == shape[1]
    assert sent.trace_id == collector.spans()[0].trace_id.hex()


def _two_rounds() -> list[Event]:
    """Round 1: a plan and a read; round 2: a plan and a write whose outcome is unknown,
    then the model called again."""
    run = {"run_id": "r2"}

    def called(seq: int, round: int, role: str = "executor") -> ModelCalled:
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0, "latency_ms": 100}
        return ModelCalled(**run, seq=seq, at=_at(seq), role=role, round=round, model="m", **usage)

    def call(seq: int, round: int, call_id: str, status: CallStatus) -> list[Event]:
        said = {"call_id": call_id, "tool": "t"}
        return [
            CallProposed(**run, **said, seq=seq, at=_at(seq), round=round, args={},
                         risk="write", fingerprint=call_id, state_hash="h"),
            ToolFinished(**run, **said, seq=seq + 1, at=_at(seq + 1), status=status,
                         result={}, duration_ms=1.0),
        ]  # fmt: skip

    planning = {"source": RunState.DECIDING, "target": RunState.PLANNING}
    return [
        RunStarted(**run, seq=1, at=_at(1), env="e", script=None, model="m", mode="rounds",
                   goal="g", budget={}),
        StateChanged(**run, seq=2, at=_at(2), source=RunState.READY, target=RunState.PLANNING),
        called(3, 1, "planner"),
        *call(4, 1, "c1", CallStatus.EXECUTED),
        called(6, 1),
        StateChanged(**run, seq=7, at=_at(7), **planning),
        called(8, 2, "planner"),
        *call(9, 2, "c2", CallStatus.OUTCOME_UNKNOWN),
        called(11, 2),
    ]  # fmt: skip


def test_what_can_take_nothing_more_is_ended_before_the_run_stops() -> None:
    """A model call and a finished tool call end at the next model call, a round at the
    next round; a write whose outcome is unknown waits for the operator's word."""
    builder = TraceBuilder()
    for event in _two_rounds():
        builder.take(event)
    ended = sorted(span.name for span in builder.ended)
    assert ended == ["chat m", "chat m", "chat m", "execute_tool t", "plan e"]
    spans = builder.finish()
    unknown = next(s for s in spans if dict(s.attributes or {}).get("gen_ai.tool.call.id") == "c2")
    assert unknown in spans[len(ended) :]  # ended only now: it could still be resolved
    assert len(spans) == 9


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_run_sends_to_the_opentelemetry_variables_endpoint(
    tmp_path, cli, collector, monkeypatch, variable
) -> None:
    """Without --otlp, the SDKs' variables name the endpoint: the base one gets `v1/traces`
    put on its path, the traces one is taken as it is."""
    base = collector.url.removesuffix("v1/traces")
    monkeypatch.setenv(variable, base if variable.endswith("_OTLP_ENDPOINT") else collector.url)
    argv = ["run", "order_support", "--headless", "--approve", "auto"]
    code, _, err = cli(*argv, "--db", str(tmp_path / "runs.db"), "--json")
    assert code == 0 and f"spans sent to {collector.url}" in err
    assert named(collector.spans(), "execute_tool update_delivery_address")


def test_a_variable_that_names_no_endpoint_is_refused_naming_it(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
    argv = ["run", "order_support", "--headless", "--db", str(tmp_path / "runs.db")]
    code, _, err = cli(*argv)
    assert code == 2 and "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL" in err
    assert not (tmp_path / "runs.db").exists()  # refused before any run


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_console_run_sends_its_trace(tmp_path, collector) -> None:
    """`run --otlp` in the console: the trace goes as the run goes, the rest once the
    console is left, said on the terminal after the console's last line."""
    from test_tmux_console import LOOPDECK, Terminal

    command = [str(LOOPDECK), "run", "order_support", "--approve", "auto",
               "--db", str(tmp_path / "runs.db"), "--otlp", collector.url]  # fmt: skip
    terminal = Terminal(command, size=(100, 30))
    try:
        terminal.wait_for("GOAL_MET")
        terminal.press("q")
        screen = terminal.wait_for("EXITED 0")
        assert "spans sent to" in screen
    finally:
        terminal.close()
    assert named(collector.spans(), "execute_tool update_delivery_address")


def test_run_headless_sends_its_trace_when_it_stops(tmp_path, cli, collector) -> None:
    db = tmp_path / "runs.db"
    argv = ["run", "order_support", "--headless", "--approve", "auto", "--db", str(db)]
    code, _, err = cli(*argv, "--json", "--otlp", collector.url)
    assert code == 0
    spans = collector.spans()
    assert f"trace {spans[0].trace_id.hex()}: {len(spans)} spans sent to" in err
    assert named(spans, "execute_tool update_delivery_address")


T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _a_run() -> list[Event]:
    """A run's record: a round, a write edited and approved by the operator with a grant, a
    message and a question on the way, the guard on a repeat."""
    run = {"run_id": "r1"}
    write = {"call_id": "c1", "tool": "refund"}
    return [
        RunStarted(**run, seq=1, at=_at(0), env="shop", script=None, model="openai/gpt-4o",
                   mode="rounds", goal="refund order 7", budget={"max_turns": 5}),
        StateChanged(**run, seq=2, at=_at(0.1), source=RunState.READY, target=RunState.PLANNING),
        ModelCalled(**run, seq=3, at=_at(2), role="planner", round=1, model="gpt-4o-2024",
                    prompt_tokens=10, completion_tokens=5, cost_usd=0.01, latency_ms=1500,
                    content="1. refund order 7"),
        PlanWritten(**run, seq=4, at=_at(2.1), round=1, steps=["refund order 7"]),
        CallProposed(**run, **write, seq=5, at=_at(3), round=1, args={"order": 7, "usd": 70},
                     risk="write", fingerprint="f1", state_hash="h1"),
        ApprovalRequested(**run, **write, seq=6, at=_at(3.1), args={"order": 7, "usd": 70},
                          args_sha256="s", state_hash="h1", fingerprint="f1", plan_step=None,
                          requested_at=_at(3.1), expires_at=_at(300)),
        OperatorMessage(**run, seq=7, at=_at(4), text="only 50 please", by="cli:ann"),
        ApprovalDecided(**run, call_id="c1", seq=8, at=_at(5), approved=True, reason="capped",
                        by="cli:ann", args={"order": 7, "usd": 50}, changes=["usd: 70 → 50"]),
        GrantGiven(**run, **write, seq=9, at=_at(5), grant_id="g1", scope="tool", by="cli:ann"),
        ToolFinished(**run, **write, seq=10, at=_at(5.5), status=CallStatus.EXECUTED,
                     result={"ok": True}, duration_ms=2.0),
        GuardTripped(**run, call_id="c9", tool="refund", seq=11, at=_at(6), fingerprint="f1"),
        QuestionAsked(**run, seq=12, at=_at(7), question_id="q1", question="which card?"),
        QuestionAnswered(**run, seq=13, at=_at(8), question_id="q1", answer="visa", by="cli:bo"),
        RunStopped(**run, seq=14, at=_at(9), state=RunState.STOPPED,
                   stop_reason=StopReason.TURN_LIMIT, detail="5 turns"),
    ]  # fmt: skip


def _marks(span: Any) -> dict[str, dict[str, Any]]:
    return {event.name: dict(event.attributes or {}) for event in span.events}


@pytest.mark.parametrize("content", [False, True])
def test_the_operators_decisions_are_events_on_what_they_concern(content) -> None:
    builder = TraceBuilder(content=content)
    for event in _a_run():
        builder.take(event)
    spans = {span.name: span for span in builder.finish()}
    root, plan = spans["invoke_agent shop"], spans["plan shop"]
    write, chat = spans["execute_tool refund"], spans["chat openai/gpt-4o"]
    assert dict(chat.attributes or {})["gen_ai.provider.name"] == "openai"
    assert chat.start_time == ns(_at(0.5)) and chat.end_time == ns(_at(2))
    assert root.status.status_code.name == "ERROR"  # a budget ran out: not the goal met
    on_write = _marks(write)
    assert set(on_write) == {
        "loopdeck.approval.requested", "loopdeck.approval.decided", "loopdeck.grant.given",
    }  # fmt: skip
    decided = on_write["loopdeck.approval.decided"]
    assert decided["loopdeck.by"] == "cli:ann"
    assert (decided["loopdeck.edited"], decided["loopdeck.changed_fields"]) == (True, ("usd",))
    assert on_write["loopdeck.grant.given"]["loopdeck.grant_id"] == "g1"
    on_round = _marks(plan)
    assert on_round["loopdeck.operator.message"]["loopdeck.by"] == "cli:ann"
    assert on_round["loopdeck.question.answered"]["loopdeck.by"] == "cli:bo"
    # The guard's call was never proposed in this record: its trip says which call it was.
    assert on_round["loopdeck.guard.tripped"]["gen_ai.tool.call.id"] == "c9"
    words = {
        "loopdeck.changes": decided,
        "loopdeck.reason": decided,
        "loopdeck.detail": dict(root.attributes or {}),
        "loopdeck.text": on_round["loopdeck.operator.message"],
        "loopdeck.question": on_round["loopdeck.question.asked"],
        "loopdeck.answer": on_round["loopdeck.question.answered"],
        "gen_ai.tool.call.arguments": dict(write.attributes or {}),
        "gen_ai.output.messages": dict(chat.attributes or {}),
        "gen_ai.input.messages": dict(root.attributes or {}),
    }
    assert {name: name in said for name, said in words.items()} == dict.fromkeys(words, content)


def test_the_sdk_is_imported_only_to_send_a_trace() -> None:
    """The command line, its store commands and its runs load no OpenTelemetry until `--otlp`
    asks for it."""
    code = (
        "import sys, loopdeck.cli, loopdeck.cli.store_commands, loopdeck.cli.runs\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
