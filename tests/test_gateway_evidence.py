"""A tool use as the gateway reads it, whichever agent sent it: where its risk came from, the
diff it makes to a file in the folder (Claude Code's `Edit`, opencode's `edit`, a multi-edit,
Codex's `apply_patch`), the files it names (what a released write explains when they change;
a command names none and may change anything), and its input without what the agent renews on
every call."""

from __future__ import annotations

from pathlib import Path

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, approve, door_command, door_run
from loopback_server import Call

from loopdeck.core.events import ApprovalRequested
from loopdeck.core.write_diff import write_diff
from loopdeck.gateway.evidence import diff_of, label, named_paths
from loopdeck.gateway.tool_risk import SCENARIO, UNKNOWN, ToolRisks
from loopdeck.workdir.volatile import renewed, steady

PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a - b\n+    return a + b\n"
    "*** End Patch\n"
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return tmp_path


def test_where_a_tools_risk_came_from() -> None:
    risks = ToolRisks({"Bash": "read", "deploy": "write"})
    assert risks.risk_of("Bash") == ("read", "--tool Bash=read")
    assert risks.risk_of("Read") == ("read", "loopdeck's default for Claude Code's Read: it reads")
    assert risks.risk_of("apply_patch")[0] == "write" and "Codex" in risks.risk_of("apply_patch")[1]
    assert risks.risk_of("bash")[0] == "write" and "opencode" in risks.risk_of("bash")[1]
    assert risks.risk_of("my_tool") == ("write", UNKNOWN)  # nobody said: a write
    said = ToolRisks({"Write": "read"}, SCENARIO).risk_of("Write")[1]
    assert said == '[gateway.tools.Write] risk = "read" in scenario.toml'


@pytest.mark.parametrize(
    "given",
    [
        {"file_path": "ABS/calc.py", "old_string": "a - b", "new_string": "a + b"},  # Claude Code
        {"filePath": "calc.py", "oldString": "a - b", "newString": "a + b"},  # opencode
        {"file_path": "calc.py", "edits": [{"old_string": "a - b", "new_string": "a + b"}]},
        PATCH,  # Codex's apply_patch: the patch is its own diff
    ],
)
def test_an_edit_is_shown_as_the_diff_it_makes(given: dict[str, object] | str, work: Path) -> None:
    """An edit's diff is the approval's own (`Environment.write_diff`, the ACP kind's reading
    of old and new strings); a patch is shown as it was sent."""
    if isinstance(given, dict) and str(given.get("file_path", "")).startswith("ABS/"):
        given = {**given, "file_path": str(work / "calc.py")}
    diff = diff_of(given) if isinstance(given, str) else write_diff(work, given)
    assert "-    return a - b" in diff and "+    return a + b" in diff
    assert named_paths(given, work) == {"calc.py"}  # absolute or relative, named relative
    if isinstance(given, dict):
        assert diff_of(given) == ""  # not shown twice


def test_a_whole_file_write_is_the_approvals_own_diff(work: Path) -> None:
    assert diff_of({"file_path": "calc.py", "content": "x\n"}) == ""
    assert write_diff(work, {"filePath": "new.py", "content": "x\n"}).startswith("--- /dev/null")
    missing = write_diff(work, {"file_path": "calc.py", "old_string": "nope", "new_string": "x"})
    assert missing == "calc.py: the edit's old text is not in it once as it is now; no diff shown"


def test_edits_that_fail_at_one_are_said_to_fail_whole(work: Path) -> None:
    """A MultiEdit whose first edit finds no old text fails as a whole: a later edit with an
    empty old text is no new file (it was shown replacing the whole file)."""
    edits = [{"old_string": "absent", "new_string": "X"},
             {"old_string": "", "new_string": "whole new\n"}]  # fmt: skip
    said = write_diff(work, {"file_path": "calc.py", "edits": edits})
    assert said == "calc.py: the edit's old text is not in it once as it is now; no diff shown"


def test_an_edit_of_a_crlf_file_is_shown_as_claude_code_makes_it(work: Path) -> None:
    """Claude Code edits with `\n` and writes back the file's own `\r\n`: the diff of such an
    edit (its strings in `\n`, the file in `\r\n`) shows that change, not "old text not
    found"; an emptied line is taken out with its end, as the agent's edit does."""
    (work / "calc.py").write_bytes(b"def add(a, b):\r\n    # sum\r\n    return a - b\r\n")
    fix = {"file_path": "calc.py", "old_string": "    # sum\n    return a - b",
           "new_string": "    return a + b"}  # fmt: skip
    diff = write_diff(work, fix)
    assert "-    # sum\r\n-    return a - b\r\n+    return a + b\r\n" in diff
    gone = write_diff(work, {"file_path": "calc.py", "old_string": "    # sum", "new_string": ""})
    assert "-    # sum\r\n" in gone and "+\r\n" not in gone


async def test_a_claude_code_edit_is_asked_with_the_whole_files_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's `Edit` through the gateway (an absolute `file_path`, `old_string`,
    `new_string`): the operator is asked with the diff it makes to the file as it is now, as an
    ACP agent's edit is shown, not with an empty diff."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")
    work = tmp_path / "work"
    work.mkdir()
    (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fix = {"file_path": str(work / "calc.py"), "old_string": "a - b", "new_string": "a + b"}
    door_file = tmp_path / "door.json"
    with AnthropicLoopback([Call("Edit", fix)]) as upstream:
        run = GatewayRun(work, door_command(door_file), "anthropic/claude-loop", upstream.url,
                         approver=Decider(approve))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "messages", stream=True)
            client.user("fix calc.py")
            await client.ask()
        await run.outcome()
    [asked] = run.events(ApprovalRequested)
    assert asked.diff.startswith("--- a/calc.py\n+++ b/calc.py\n")
    assert "-    return a - b\n+    return a + b\n" in asked.diff
    assert " def add(a, b):" in asked.diff  # the whole file's, not the strings alone


def test_a_command_names_no_file_and_is_labelled_by_its_words(work: Path) -> None:
    shell = {"command": ["bash", "-lc", "pytest   -q"], "workdir": str(work)}
    assert named_paths(shell, work) is None  # it may change anything while it runs
    assert label(shell) == "bash -lc pytest -q"
    assert label({"file_path": "src/a.py", "content": "x"}) == "src/a.py"
    assert label({}) == "(no input)"


def test_what_an_agent_renews_per_call_is_left_out_and_put_back_after_an_edit() -> None:
    given = {"command": ["cat", "calc.py"], "call_id": "call_9f8e7d6c5b4a", "issue_id": 2,
             "started_at_ms": 1_760_000_000_000}  # fmt: skip
    assert steady(given) == {"command": ["cat", "calc.py"], "issue_id": 2}
    assert renewed(given) == {"call_id": "call_9f8e7d6c5b4a", "started_at_ms": 1_760_000_000_000}
    assert steady(given, frozenset({"issue_id"})) == {"command": ["cat", "calc.py"]}
