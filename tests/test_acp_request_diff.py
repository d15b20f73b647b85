"""The diff an ACP agent's permission asks about is its request's `diff` (`loopdeck pending
--json`, the inbox, the approval dialog, a notification): the content the call shows for
each file (its diffs applied, its `content`, its old/new strings: `permitted_writes.py`, the
content a permitted call is then held to) against the file as it is, a unified diff. Gemini CLI
sends no input, only a diff; Claude Code's edit, only old and new strings: both asked with
`"diff": ""` before. Driven through `AcpCalls` with the SDK's messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from acp import tool_diff_content
from acp.schema import ToolCallUpdate
from acp_calls_helpers import OPTIONS, acp_calls, kinds
from conftest import SAMPLES
from store_helpers import loopdeck, start_runner, wait_for_pending

from loopdeck.acp_env.bridge import FileWriteAsked

BROKEN = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BROKEN.replace("a - b", "a + b")
FIX = "-    return a - b\n+    return a + b\n"


@pytest.fixture
def calls(tmp_path: Path) -> Any:
    yield from acp_calls(tmp_path, "diffs")


def permission(call_id: str, **fields: Any) -> ToolCallUpdate:
    return ToolCallUpdate(tool_call_id=call_id, title="Fix add", kind="edit", status="pending",
                          **fields)  # fmt: skip


async def asked_diff(calls: Any, request: ToolCallUpdate) -> str:
    await calls.permission(request, OPTIONS)
    [asked] = kinds(calls, "approval_requested")
    assert isinstance(asked.diff, str)
    return asked.diff


async def test_gemini_clis_edit_asks_with_the_whole_files_diff(calls: Any) -> None:
    """No rawInput: its location and a diff whose old text is the whole file."""
    target = calls.host.workdir / "calc.py"
    shown = tool_diff_content(str(target), FIXED, old_text=BROKEN)
    diff = await asked_diff(calls, permission("g1", content=[shown], locations=[]))
    assert diff.startswith("--- a/calc.py\n+++ b/calc.py\n"), diff
    assert FIX in diff and " def mul(a, b):\n" in diff  # the file around it, as it is


async def test_claude_codes_edit_asks_with_the_diff_its_strings_make(calls: Any) -> None:
    raw = {"file_path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}
    diff = await asked_diff(calls, permission("c1", raw_input=raw))
    assert diff.startswith("--- a/calc.py\n+++ b/calc.py\n") and FIX in diff, diff


async def test_an_edit_that_cannot_be_applied_asks_with_the_diff_as_the_agent_sent_it(
    calls: Any,
) -> None:
    """The old text is not in the file: nothing says the content; the agent's own diff is
    what there is to show, never nothing."""
    target = calls.host.workdir / "calc.py"
    shown = tool_diff_content(str(target), "return a * 2\n", old_text="return a / 2\n")
    diff = await asked_diff(calls, permission("x1", content=[shown], locations=[]))
    assert "-return a / 2\n+return a * 2\n" in diff, diff


async def test_a_command_asks_with_no_diff(calls: Any) -> None:
    request = ToolCallUpdate(tool_call_id="e1", title="ls", kind="execute", status="pending",
                             raw_input={"command": "ls"})  # fmt: skip
    assert await asked_diff(calls, request) == ""


async def test_a_file_loopdeck_writes_for_the_agent_asks_with_its_contents_diff(
    calls: Any,
) -> None:
    target = calls.host.workdir / "calc.py"
    await calls.write(FileWriteAsked(path=str(target), content=FIXED))
    [asked] = kinds(calls, "approval_requested")
    assert asked.diff.startswith("--- a/calc.py\n+++ b/calc.py\n") and FIX in asked.diff
    assert target.read_text() == FIXED


@pytest.mark.slow  # a runner and the scripted agent in processes of their own: seconds
async def test_pending_json_shows_an_agents_edit_as_its_diff(tmp_path: Path) -> None:
    """calc_acp's edit says only `{"path": "calc.py"}` and a diff: `pending --json` shows the
    diff, as the console's approval dialog does."""
    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "calc_acp", "solve", db, "--approve", "wait")
    try:
        await wait_for_pending(db)
        listed = loopdeck("pending", "--json", db=db)
    finally:
        runner.kill()
        runner.communicate()
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in json.loads(listed.stdout) if e.get("tool") == "edit"]
    assert entry["args"] == {"path": "calc.py"}
    assert entry["diff"].startswith("--- a/calc.py\n+++ b/calc.py\n") and FIX in entry["diff"]


def _shown_diff_of_a_write(workdir: Path, path: str) -> str:
    """The diff a call writing `path` whole is asked with, read on a thread of its own: a
    FIFO the read waits on is given a writer (and the test fails) rather than hang the run."""
    import os
    import threading
    from types import SimpleNamespace

    from loopdeck.acp_env.permitted_writes import shown_diff

    call = SimpleNamespace(raw_input={"file_path": path, "content": "new\n"}, locations=None,
                           content=None)  # fmt: skip
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(shown_diff(workdir, call)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # waiting on the FIFO: let it go, then fail
        os.close(os.open(workdir / path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        raise AssertionError(f"the diff of {path} waited on its FIFO")
    return said[0]


def test_a_fifo_at_a_writes_path_is_never_waited_on_for_its_diff(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "pipe")
    assert _shown_diff_of_a_write(tmp_path, "pipe") == "pipe: not a regular file; no diff shown\n"


def test_a_file_past_the_read_cap_is_not_diffed_whole(tmp_path: Path) -> None:
    from loopdeck.core.write_diff import READ_CAP

    (tmp_path / "big.txt").write_text("a\n" * (READ_CAP // 2 + 1), encoding="utf-8")
    said = _shown_diff_of_a_write(tmp_path, "big.txt")
    assert said == f"big.txt: larger than {READ_CAP // 1024} KiB; no diff shown\n", said[:200]
