"""Evidence in the operator's shape: a file write is asked as a diff against the working copy
(a new file as added lines), and the outcome question names the error that left it unknown."""

from datetime import UTC, datetime

import pytest
from conftest import SAMPLES, run_env
from textual.app import App
from textual.widgets import Static

from loopdeck.core.approvals import request_for
from loopdeck.core.write_diff import write_diff
from loopdeck.tui.decision_dialogs import OutcomeDialog
from loopdeck.tui.dialogs import ApprovalDialog


def test_a_new_file_is_all_added_lines(tmp_path) -> None:
    diff = write_diff(tmp_path, {"path": "notes/todo.md", "content": "one\ntwo"})
    assert diff.splitlines() == ["--- /dev/null", "+++ b/notes/todo.md", "@@ -0,0 +1,2 @@",
                                 "+one", "+two"]  # fmt: skip


def test_a_changed_file_is_diffed_against_the_working_copy(tmp_path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    diff = write_diff(tmp_path, {"file_path": str(tmp_path / "a.py"), "text": "x = 1\ny = 3\n"})
    assert "--- a/a.py" in diff and "-y = 2" in diff and "+y = 3" in diff
    assert " x = 1" in diff


def test_no_diff_for_other_calls_or_paths_outside_the_working_copy(tmp_path) -> None:
    assert write_diff(tmp_path, {"order": "A1", "address": "x"}) == ""
    assert write_diff(tmp_path, {"path": "../elsewhere.txt", "content": "x"}) == ""
    assert write_diff(tmp_path, {"path": 3, "content": "x"}) == ""


@pytest.mark.slow  # a whole run with its model: seconds (make stress)
async def test_the_runtime_asks_a_file_write_with_its_diff() -> None:
    _, rec = await run_env(SAMPLES / "repo_triage", "solve")
    asked = [e for e in rec.kinds("approval_requested") if e.tool == "write_file"]
    assert asked, "the script writes calculator.py"
    assert "--- a/calculator.py" in asked[0].diff
    assert any(line.startswith("+") for line in asked[0].diff.splitlines()[2:])


def _shown(app: App) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(Static))


async def test_the_approval_dialog_shows_the_diff_not_the_escaped_content() -> None:
    args = {"path": "a.py", "content": "x = 1\nSECRET_LINE = 2\n"}
    request = request_for(
        run_id="r1", call_id="c1", tool="write_file", args=args, state_hash="s",
        fingerprint="f", plan_step=None, ttl_s=300, diff="--- a/a.py\n+++ b/a.py\n+SECRET_LINE = 2",
    )  # fmt: skip
    app = App()
    async with app.run_test(size=(120, 48)) as pilot:
        app.push_screen(ApprovalDialog(request, 1, "write", lambda: datetime.now(UTC)))
        await pilot.pause()
        shown = _shown(app)
    assert "+SECRET_LINE = 2" in shown
    assert "\\nSECRET_LINE" not in shown  # the content is not shown again as one JSON string
    assert '"path": "a.py"' in shown


async def test_the_outcome_question_names_the_error_that_left_it_unknown() -> None:
    error = {"code": "OUTCOME_UNKNOWN", "message": "timed out after 5 s mid-write"}
    result = {"ok": False, "data": None, "error": error}
    app = App()
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(OutcomeDialog("c7", "write_file", {"path": "a"}, result))
        await pilot.pause()
        shown = _shown(app)
    assert "OUTCOME_UNKNOWN" in shown and "timed out after 5 s mid-write" in shown
