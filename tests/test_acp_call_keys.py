"""What an exploratory run of real agents (opencode, Codex's ACP adapter) and a hostile one
found in how loopdeck records and keys an ACP agent's tool calls, driven through `AcpCalls`
itself with the SDK's messages (as the agents sent them):

- a value that looks like a uuid is the call's input: shown, approved and keyed whole; only
  per-call ids and times by name (and the agent's own list) are left out of the key;
- a call with no input and nothing shown (Codex's "List files") is nobody's repeat, and a call
  the agent reports as run is never recorded as blocked;
- opencode says a shell call's input one way in its permission and another in its updates,
  in an order that races: the key is the same whichever came first;
- a write loopdeck refuses for being outside the working copy is recorded, refused by
  loopdeck;
- an agent's call input is taken whole up to the one cap on a call's arguments, the runtime's
  (`MAX_ARGUMENTS_CHARS`); past it, stored by its digest and size (never a part shown for
  approval), keyed whole, and refused by loopdeck by name when it asks, as a model's
  arguments past it are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    ToolCallStart,
    ToolCallUpdate,
)
from acp_calls_helpers import OPTIONS, acp_calls, kinds, update

from loopdeck.acp_env.bridge import FileWriteAsked
from loopdeck.acp_env.workspace import FS_WRITE
from loopdeck.core.canonical import canonical_json
from loopdeck.core.decisions import MAX_ARGUMENTS_CHARS
from loopdeck.core.events import CallStatus

DOCUMENTS = ("3f1c2a9e-8b7d-4c1e-9a2b-1d2e3f4a5b6c", "a7d9e0f1-2b3c-4d5e-8f90-123456789abc")


@pytest.fixture
def calls(tmp_path: Path) -> Any:
    yield from acp_calls(tmp_path, "keys")


def start(call_id: str, title: str, kind: str, status: Any = "pending", **fields: Any) -> Any:
    return ToolCallStart(
        session_update="tool_call", tool_call_id=call_id, title=title, kind=kind, status=status,
        **fields,
    )  # fmt: skip


def asked(call_id: str, title: str, kind: str, raw_input: Any) -> ToolCallUpdate:
    return ToolCallUpdate(
        tool_call_id=call_id, title=title, kind=kind, status="pending", raw_input=raw_input
    )


def allowed(answer: Any) -> bool:
    return isinstance(answer.outcome, AllowedOutcome) and answer.outcome.option_id == "allow"


# -- 1. a uuid is input -------------------------------------------------------------------------
async def test_a_uuid_valued_input_is_shown_approved_and_keyed_whole(calls: Any) -> None:
    """Two deletes of two documents, each named by a uuid: two calls, each shown and
    approved with its document, neither the other's repeat."""
    for index, document in enumerate(DOCUMENTS):
        raw = {"tool": "fetch_document", "document_id": document}
        await calls.proposed(start(f"u{index}", "delete_document", "delete", raw_input=raw))
        answer = await calls.permission(
            asked(f"u{index}", "delete_document", "delete", raw), OPTIONS
        )
        assert allowed(answer)
    proposed = kinds(calls, "call_proposed")
    assert [e.args["document_id"] for e in proposed] == list(DOCUMENTS)
    assert proposed[0].fingerprint != proposed[1].fingerprint
    assert kinds(calls, "guard_tripped") == [] and calls.tripped is None
    requests = kinds(calls, "approval_requested")
    assert [e.args for e in requests] == [e.args for e in proposed]


async def test_ids_and_times_renewed_per_call_are_shown_but_left_out_of_the_key(
    calls: Any,
) -> None:
    """`requestId`, `nonce` and `timestamp` are the agent's, new on every call: the operator
    sees them, the key leaves them out, so the same command twice is a repeat."""
    for index in range(2):
        raw = {"command": ["ls"], "requestId": f"req-{index}", "nonce": f"{index:016x}",
               "timestamp": 1_760_000_000 + index}  # fmt: skip
        await calls.proposed(start(f"r{index}", "Run ls", "execute", raw_input=raw))
        await calls.permission(asked(f"r{index}", "Run ls", "execute", raw), OPTIONS)
    first, second = kinds(calls, "call_proposed")
    assert first.args["requestId"] == "req-0" and second.args["nonce"] == f"{1:016x}"
    assert first.fingerprint == second.fingerprint
    [tripped] = kinds(calls, "guard_tripped")
    assert tripped.call_id == second.call_id
    await calls.progress(update("r1", status="failed"))  # its permission refused: it failed
    [blocked] = [e for e in kinds(calls, "tool_finished") if e.call_id == second.call_id]
    assert blocked.status is CallStatus.BLOCKED_REPEAT


# -- 2. no input: cannot tell; a call the agent ran is never blocked -------------------------------
async def test_calls_with_no_input_and_nothing_shown_are_no_repeat_of_each_other(
    calls: Any,
) -> None:
    """Codex's adapter (2.6) runs `ls`, then `ls -la`: both "List files", no input, nothing
    shown, each already running when first said."""
    for call_id in ("c1", "c2"):
        await calls.proposed(start(call_id, "List files", "read", status="in_progress"))
        await calls.progress(update(call_id, status="completed", raw_output={"exit_code": 0}))
    first, second = kinds(calls, "call_proposed")
    assert first.args == {} == second.args
    assert first.fingerprint != second.fingerprint
    assert kinds(calls, "guard_tripped") == [] and calls.tripped is None
    statuses = [e.status for e in kinds(calls, "tool_finished")]
    assert statuses == [CallStatus.EXECUTED, CallStatus.EXECUTED]


async def test_a_repeat_already_running_is_recorded_as_run_and_still_stops_the_loop(
    calls: Any,
) -> None:
    raw = {"command": "cat calc.py"}
    for call_id in ("x1", "x2"):
        await calls.proposed(start(call_id, "cat", "read", status="in_progress", raw_input=raw))
        await calls.progress(update(call_id, status="completed", raw_output="def add"))
    assert len(kinds(calls, "guard_tripped")) == 1 and calls.tripped is not None
    assert calls.agent.conn.cancelled == 1
    statuses = [e.status for e in kinds(calls, "tool_finished")]
    assert statuses == [CallStatus.EXECUTED, CallStatus.EXECUTED]


async def test_a_blocked_repeat_the_agent_runs_anyway_is_recorded_as_run(calls: Any) -> None:
    raw = {"command": "rm notes.txt"}
    for call_id in ("b1", "b2"):
        await calls.proposed(start(call_id, "rm", "execute", raw_input=raw))
        await calls.permission(asked(call_id, "rm", "execute", raw), OPTIONS)
        await calls.progress(update(call_id, status="completed"))
    [*_, last] = kinds(calls, "tool_finished")
    second = kinds(calls, "call_proposed")[1]
    assert last.call_id == second.call_id and last.status is CallStatus.EXECUTED
    assert last.result["data"]["ran_although_blocked"] is True


# -- 3. opencode: one key, whichever form came first -------------------------------------------
FULL = {"command": "ls", "description": "Lists files", "cwd": "/w"}
ASKED = {"command": "ls"}


async def opencode_call(calls: Any, call_id: str, update_first: bool) -> Any:
    """opencode's `bash`: pending with only its `cwd`, then an in_progress update with its
    whole input and a permission with `{command}` only, in either order."""
    await calls.proposed(start(call_id, "bash", "execute", raw_input={"cwd": "/w"}))
    running = update(call_id, status="in_progress", title="ls", kind="execute", raw_input=FULL)
    if update_first:
        await calls.progress(running)
    answer = await calls.permission(asked(call_id, "ls", "execute", ASKED), OPTIONS)
    if not update_first and allowed(answer):
        await calls.progress(running)
    status = "completed" if allowed(answer) else "failed"
    await calls.progress(update(call_id, status=status))
    return answer


@pytest.mark.parametrize(
    "orders", [(True, False), (False, True), (True, True), (False, False)], ids=str
)
async def test_opencodes_repeat_is_one_key_whichever_message_came_first(
    calls: Any, orders: tuple[bool, bool]
) -> None:
    first, second = orders
    assert allowed(await opencode_call(calls, "o1", first))
    assert not allowed(await opencode_call(calls, "o2", second))
    [tripped] = kinds(calls, "guard_tripped")
    [_, repeat] = kinds(calls, "call_proposed")
    assert tripped.call_id == repeat.call_id
    statuses = {e.call_id: e.status for e in kinds(calls, "tool_finished")}
    assert statuses[repeat.call_id] is CallStatus.BLOCKED_REPEAT


# -- 8. a write outside the working copy --------------------------------------------------------
async def test_a_write_outside_the_working_copy_is_recorded_as_refused_by_loopdeck(
    calls: Any,
) -> None:
    ask = FileWriteAsked(path="../outside.txt", content="pwned\n")
    with pytest.raises(RequestError):
        await calls.write(ask)
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.tool == f"{FS_WRITE}: write ../outside.txt"
    assert proposed.args == {"path": "../outside.txt", "content": "pwned\n"}
    [decided] = kinds(calls, "approval_decided")
    assert decided.call_id == proposed.call_id and not decided.approved
    assert decided.decided_by is not None and decided.decided_by.who == "loopdeck"
    [finished] = kinds(calls, "tool_finished")
    assert finished.status is CallStatus.REJECTED
    assert "outside the run's working copy" in finished.result["error"]["message"]
    assert not (calls.host.workdir.parent / "outside.txt").exists()


# -- 9. an input past the cap ------------------------------------------------------------------
PAST = MAX_ARGUMENTS_CHARS  # a blob this long puts an input past the cap, as JSON
CAP_WORDS = f"characters as JSON; at most {MAX_ARGUMENTS_CHARS} are taken"


async def test_a_large_input_within_the_cap_is_taken_whole(calls: Any) -> None:
    """3 MB is within the cap a model's arguments have: the agent's input is shown whole."""
    blob = "y" * 3_000_000
    raw = {"path": "calc.py", "blob": blob}
    await calls.proposed(start("w1", "flood", "read", status="in_progress", raw_input=raw))
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.args == raw


async def test_an_input_past_the_cap_is_stored_by_its_digest_and_keyed_whole(calls: Any) -> None:
    for call_id, blob in (("f1", "y" * PAST), ("f2", "y" * (PAST - 1) + "z")):
        raw = {"path": "calc.py", "blob": blob}
        await calls.proposed(start(call_id, "flood", "read", status="in_progress", raw_input=raw))
        await calls.progress(update(call_id, status="completed"))
    first, second = kinds(calls, "call_proposed")
    for proposed in (first, second):
        assert set(proposed.args) == {"input_sha256", "not_taken"}, list(proposed.args)
        assert CAP_WORDS in proposed.args["not_taken"]
        assert len(canonical_json(proposed.args)) < 1000  # no part of it kept
    assert first.args["input_sha256"] != second.args["input_sha256"]
    assert first.fingerprint != second.fingerprint  # the key hashes each whole
    assert kinds(calls, "guard_tripped") == []


async def test_a_permission_for_an_input_past_the_cap_is_refused_by_loopdeck(calls: Any) -> None:
    """Nobody is asked to approve what they could not see whole: refused by name, as a
    model's arguments past the cap are."""
    raw = {"path": "calc.py", "content": "x" * PAST}
    await calls.proposed(start("p1", "Write calc.py", "edit", raw_input=raw))
    answer = await calls.permission(asked("p1", "Write calc.py", "edit", raw), OPTIONS)
    assert not allowed(answer) and answer.outcome.option_id == "reject"
    [decided] = kinds(calls, "approval_decided")
    assert not decided.approved and decided.decided_by.who == "loopdeck"
    [finished] = kinds(calls, "tool_finished")
    assert finished.status is CallStatus.REJECTED
    said = finished.result["error"]["message"]
    assert said.startswith("refused by loopdeck: its input is ") and CAP_WORDS in said
    assert any(CAP_WORDS in note for note in calls.take_notes())  # told with the next prompt


async def test_a_file_write_past_the_cap_is_refused_by_loopdeck_and_not_written(
    calls: Any,
) -> None:
    target = calls.host.workdir / "big.txt"
    with pytest.raises(RequestError) as refused:
        await calls.write(FileWriteAsked(path=str(target), content="x" * PAST))
    assert CAP_WORDS in str(refused.value)
    assert not target.exists()
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.tool == f"{FS_WRITE}: write big.txt"
    assert set(proposed.args) == {"input_sha256", "not_taken"}
    [decided] = kinds(calls, "approval_decided")
    assert not decided.approved and decided.decided_by.who == "loopdeck"


async def test_a_call_the_agent_said_was_running_is_interrupted_when_cut_short(calls) -> None:
    """The agent said it runs a read (`in_progress`) and never said it ended: the run's stop
    records it interrupted as it ran, never skipped as if it never started."""
    from acp.schema import ToolCallStart

    start = ToolCallStart(
        session_update="tool_call", tool_call_id="t1", title="Read calc.py", kind="read",
        status="in_progress", raw_input={"path": "calc.py"},
    )  # fmt: skip
    record = await calls.proposed(start)
    assert record is not None and record.status.value == "running"
    calls.host._rt.calls.withdraw_pending("the agent went away")  # the run's stop
    [ended] = [e for e in calls.recorder.kinds("tool_finished") if e.call_id == record.call_id]
    assert ended.status.value == "interrupted"
