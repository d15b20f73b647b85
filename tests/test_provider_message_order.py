"""The message order a real provider sees when the guard trips inside a batch (issue 26, 3).

A loopback OpenAI-compatible server stands in for the provider: it checks every request body
against the chat-completions rules (`order_problems`) and, like OpenAI, answers a request that
breaks them with a 400, so the run fails loudly. The model replies with three tool calls, the
second repeating an earlier call from the same state; the operator answers the loop question
with a nudge, an allow or a stop. The scripted model never builds a request, so it hides what
this server sees.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest
from conftest import HARNESS
from fake_openai import Reply, completion, error, text, tool_call

from loopdeck.core.approvals import Answer, AutoApprover
from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

Message = dict[str, Any]
ROLES = {"system", "user", "assistant", "tool"}
KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}
NUDGE = "write the note done instead"
Mode = Literal["rounds", "react"]


def _content_problem(message: Message) -> str | None:
    """A message's content as the API takes it: text, or a list of text parts; null only for
    an assistant message that carries tool calls."""
    content = message.get("content")
    if content is None:
        ok = message["role"] == "assistant" and bool(message.get("tool_calls"))
        return None if ok else "content is null"
    if isinstance(content, str):
        return None
    if isinstance(content, list) and content and message["role"] != "assistant":
        parts = all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content
        )
        return None if parts else "content parts other than text"
    return f"content of type {type(content).__name__}"


def _calls_problem(calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return "tool_calls is not a non-empty list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(function, dict)
            and isinstance(call.get("id"), str)
            and call["id"]
            and call.get("type") == "function"
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), str)
        ):
            return f"malformed tool call {call!r}"
    ids = [call["id"] for call in calls]
    return None if len(set(ids)) == len(ids) else f"tool call ids repeated: {ids}"


def _message_problems(i: int, message: Any) -> list[str]:
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        return [f"{i}: role {message.get('role') if isinstance(message, dict) else message!r}"]
    role = message["role"]
    problems = [f"{i}: {role} with {key!r}" for key in sorted(set(message) - KEYS[role])]
    if (content := _content_problem(message)) is not None:
        problems.append(f"{i}: {role}: {content}")
    calls = _calls_problem(message["tool_calls"]) if "tool_calls" in message else None
    if calls is not None:
        problems.append(f"{i}: {calls}")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        problems.append(f"{i}: tool message without a tool_call_id")
    return problems


def order_problems(messages: Any) -> list[str]:
    """What the OpenAI chat API refuses in `messages`: an unknown role or key, bad content, a
    system message after the conversation began, a first non-system message that is not the
    user's, an assistant message with tool calls not followed at once by exactly one tool
    message per call (any order, nothing in between), a tool message answering anything else,
    a tool call id used twice."""
    if not isinstance(messages, list) or not messages:
        return ["messages is not a non-empty list"]
    problems = [p for i, m in enumerate(messages) for p in _message_problems(i, m)]
    if problems:
        return problems
    roles = [m["role"] for m in messages]
    started = next((i for i, role in enumerate(roles) if role != "system"), None)
    if started is None or roles[started] != "user":
        problems.append(f"the first non-system message is {roles[started:][:1]}, not user")
    problems += [f"{i}: a system message after the first turn" for i in _systems_after(roles)]
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        if message["role"] == "tool":
            problems.append(f"{i}: a tool message that follows no assistant tool_calls")
        if message["role"] != "assistant" or not message.get("tool_calls"):
            i += 1
            continue
        ids = [call["id"] for call in message["tool_calls"]]
        if seen & set(ids):
            problems.append(f"{i}: tool call ids used again: {sorted(seen & set(ids))}")
        seen |= set(ids)
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            j += 1
        answered = [m["tool_call_id"] for m in messages[i + 1 : j]]
        if sorted(answered) != sorted(ids):
            after = roles[j] if j < len(roles) else "the end"
            problems.append(f"{i}: calls {ids} answered by {answered}, then {after}")
        i = j
    return problems


def _systems_after(roles: list[str]) -> list[int]:
    started = next((i for i, role in enumerate(roles) if role != "system"), len(roles))
    return [i for i, role in enumerate(roles) if role == "system" and i > started]


def body_problems(body: Any) -> list[str]:
    """The request as a whole: a model name, messages, tools of the function kind."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    problems = [] if isinstance(body.get("model"), str) else ["no model"]
    tools = body.get("tools", [])
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" and "name" in t.get("function", {})
        for t in tools
    ):
        problems.append("tools are not a list of functions")
    return problems + order_problems(body.get("messages"))


class StrictOpenAI:
    """A loopback chat-completions server that refuses, with OpenAI's 400 and error body, any
    request `body_problems` finds fault with; otherwise it gives the next queued reply. Every
    body is kept (`requests`), with what was wrong in it (`refused`)."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.refused: list[tuple[int, list[str]]] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    reply = server.reply_to(body)
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply_to(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        problems = body_problems(body)
        if problems:
            self.refused.append((len(self.requests) - 1, problems))
            reply = error(400, "Invalid 'messages': " + "; ".join(problems))
            reply.body["error"].update(type="invalid_request_error", param="messages")
            return reply
        if not self.replies:
            return error(400, "the test queued no reply for this request")
        return self.replies.pop(0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> StrictOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def calls(*named: tuple[str, str, dict[str, Any]]) -> Reply:
    """One reply with several native tool calls: (id, tool, arguments) each."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in named
        ],
    }
    return completion(message, finish="tool_calls")


PLAN = text("1. Echo a.\n2. Echo b, a and c.\n3. Write the note done.")
# call_2a repeats call_1 (echo a) from the same state: the guard trips on the batch's second.
BATCH = calls(
    ("call_2b", "echo", {"text": "b"}),
    ("call_2a", "echo", {"text": "a"}),
    ("call_2c", "echo", {"text": "c"}),
)
EXECUTOR = [
    tool_call("echo", {"text": "a"}, "call_1"),
    BATCH,
    tool_call("write_note", {"text": "done"}, "call_3"),
]


def replies(mode: Mode) -> list[Reply]:
    """The planner's reply first in rounds; react has no planner."""
    return [PLAN, *EXECUTOR] if mode == "rounds" else list(EXECUTOR)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")


async def _run(answer: str, mode: Mode) -> tuple[Any, StrictOpenAI, list[str]]:
    asked: list[str] = []

    class Operator:
        async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
            asked.append(question)
            return Answer(text=answer, by="test")

    with StrictOpenAI(replies(mode)) as server:
        options = RunOptions(
            env=str(HARNESS), model="openai/gpt-4o-mini", api_base=server.url, mode=mode,
            approve="auto",
        )  # fmt: skip
        prepared = prepare_run(options, approver=AutoApprover(), answerer=Operator())
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert not server.refused, (outcome.stop_reason, server.refused)
    return outcome, server, asked


def _after_batch(request: dict[str, Any]) -> list[Message]:
    """The request's messages from the batch's assistant message on."""
    messages = request["messages"]
    at = next(
        i
        for i, m in enumerate(messages)
        if any(c["id"] == "call_2b" for c in m.get("tool_calls") or [])
    )
    return messages[at:]


@pytest.mark.parametrize("mode", ["rounds", "react"])
async def test_a_nudge_inside_a_batch_comes_after_all_of_its_results(mode: Mode) -> None:
    outcome, server, asked = await _run(f"nudge {NUDGE}", mode)
    assert len(asked) == 1 and "repeats a call from the same state" in asked[0]
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    statuses = [c.status for c in outcome.calls]
    assert statuses[1:4] == [CallStatus.EXECUTED, CallStatus.BLOCKED_REPEAT, CallStatus.EXECUTED]
    assert len(server.requests) == len(replies(mode))
    tail = _after_batch(server.requests[-1])
    assert [m["role"] for m in tail] == ["assistant", "tool", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in tail[1:4]] == ["call_2b", "call_2a", "call_2c"]
    assert "REPEATED_CALL" in tail[2]["content"]
    assert tail[4] == {"role": "user", "content": f"The operator says: {NUDGE}"}


@pytest.mark.parametrize("mode", ["rounds", "react"])
async def test_an_allow_inside_a_batch_runs_the_call_and_keeps_the_pairs(mode: Mode) -> None:
    outcome, server, asked = await _run("allow", mode)
    assert len(asked) == 1
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert [c.status for c in outcome.calls] == [CallStatus.EXECUTED] * 5
    assert len(server.requests) == len(replies(mode))
    tail = _after_batch(server.requests[-1])
    assert [m["role"] for m in tail] == ["assistant", "tool", "tool", "tool"]
    assert all('"ok": true' in m["content"] for m in tail[1:])


@pytest.mark.parametrize("mode", ["rounds", "react"])
async def test_a_stop_inside_a_batch_ends_the_run_with_no_request_after_it(mode: Mode) -> None:
    outcome, server, asked = await _run("stop", mode)
    assert len(asked) == 1
    assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
    assert "stopped by test" in outcome.detail
    # planner (rounds only), echo a, the batch: nothing is sent once the operator stopped it
    assert len(server.requests) == (3 if mode == "rounds" else 2)
    assert [c.status for c in outcome.calls][2:] == [CallStatus.SKIPPED]


def test_the_checker_refuses_what_the_issue_saw() -> None:
    """The order the issue reported, and its neighbours, are each refused."""
    head: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    batch = calls(("x", "echo", {}), ("y", "echo", {}), ("z", "echo", {}))
    assistant = batch.body["choices"][0]["message"]

    def result(call_id: str) -> Message:
        return {"role": "tool", "tool_call_id": call_id, "content": "{}"}

    x, y, z = result("x"), result("y"), result("z")

    nudge = {"role": "user", "content": "The operator says: try"}
    good = [*head, assistant, y, x, z, nudge]
    assert order_problems(good) == []
    broken = {
        "the issue's order": [*head, assistant, x, y, nudge, z],
        "a result missing": [*head, assistant, x, y, nudge],
        "a result of no call": [*head, assistant, x, y, z, result("w")],
        "a result with no assistant": [*head, x],
        "a result answered twice": [*head, assistant, x, x, z],
        "the first turn not the user's": [head[0], assistant, x, y, z],
        "a system message later": [*head, {"role": "system", "content": "s"}],
        "a role the API has not": [*head, {"role": "function", "content": "f"}],
        "an assistant with nothing": [*head, {"role": "assistant", "content": None}],
        "a tool result as an object": [*head, assistant, {**x, "content": {}}, y, z],
        "a tool call with no id": [*head, {**assistant, "tool_calls": [{"type": "function"}]}],
    }
    assert [name for name, messages in broken.items() if not order_problems(messages)] == []
