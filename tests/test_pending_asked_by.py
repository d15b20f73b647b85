"""`loopdeck pending` says which policy rule sent a write to the operator, as the console's
dialog does: the rule and its level on the write's line (its message too, where the line has
room), and the rule's fields in `--json`."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_decision_refusals import Cli, Recorded, recorded

from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.states import RunState

RULE = DecidedBy(
    who="rule", rule_id="notes-asked", level="env", policy_sha256="ab" * 32,
    why="notes are read by customers",
)  # fmt: skip


def _asked(db: Path) -> None:
    """r1's c1 sent to the operator by a rule; c2 asked as any write is."""
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
    run.events[-1] = run.events[-1].model_copy(update={"asked_by": RULE})
    recorded(db, run.write("c2"))


@pytest.mark.parametrize(("columns", "said"), [
    ("200", "rule notes-asked (env): notes are read by customers"),
    ("80", "rule notes-asked (env)"),
])  # fmt: skip
def test_pending_says_which_rule_asked_on_the_writes_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    columns: str, said: str,
) -> None:  # fmt: skip
    from loopdeck.cli import main

    monkeypatch.setenv("COLUMNS", columns)
    db = tmp_path / "s.db"
    _asked(db)
    assert main(["pending", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "asked by" in next(line for line in lines if "call_id" in line)
    [ruled] = [line for line in lines if " c1 " in line]
    [plain] = [line for line in lines if " c2 " in line]
    assert said in ruled and "rule" not in plain, lines


def test_pending_json_carries_the_rule_that_asked(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    _asked(db)
    code, listed, _ = cli("pending", "--json", "--db", str(db))
    assert code == 0 and listed is not None
    asked = {item["call_id"]: item["asked_by"] for item in listed}
    assert asked == {"c1": RULE.model_dump(), "c2": None}
