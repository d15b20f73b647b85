"""The headless summary says why a call failed: a tool that raised is named with its exception
and its line (the calls table's status alone said `outcome_unknown`), and a write whose
outcome is unknown comes with the command that settles it."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from loopdeck.cli.summary import print_summary
from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord, RunOutcome
from loopdeck.core.states import RunState, StopReason

CRASHED = (
    "bump may or may not have taken effect (TOOL_CRASHED: ZeroDivisionError: integer division"
    " or modulo by zero (env.py:27, in bump)); it is not retried."
)


def _call(call_id: str, status: CallStatus, code: str, message: str) -> CallRecord:
    return CallRecord(
        call_id=call_id, round=1, tool="bump", args={"by": 3}, risk="write",
        fingerprint="ea17249ec0d6", state_hash="s", status=status,
        result={"ok": False, "error": {"code": code, "message": message}},
    )  # fmt: skip


def _printed(*calls: CallRecord) -> str:
    outcome = RunOutcome(
        run_id="68b73452d69f", env="mine", script="solve", model="scripted", mode="rounds",
        state=RunState.STOPPED, stop_reason=StopReason.STALLED, detail="count is 0", rounds=1,
        model_calls=3, tool_calls=len(calls), tokens=10, cost_usd=0.0, cost_unknown_calls=0,
        elapsed_s=0.1, findings=[], calls=list(calls),
    )  # fmt: skip
    out = StringIO()
    print_summary(outcome, Console(file=out, width=300))
    return out.getvalue()


def test_a_tool_that_raised_is_named_with_its_exception_and_line() -> None:
    said = _printed(_call("c1", CallStatus.OUTCOME_UNKNOWN, "OUTCOME_UNKNOWN", CRASHED))
    line = next(line for line in said.splitlines() if line.startswith("outcome_unknown c1"))
    assert "ZeroDivisionError" in line and "(env.py:27, in bump)" in line, said
    assert "loopdeck resolve 68b73452d69f c1 applied|not-applied" in line, said


def test_a_tools_own_error_is_said_with_its_code() -> None:
    said = _printed(
        _call("c1", CallStatus.FAILED, "CONFLICT", "counter locked"),
        _call("c2", CallStatus.EXECUTED, "", ""),
    )
    assert "failed c1 bump: CONFLICT: counter locked" in said, said
    assert "c2 bump:" not in said and "resolve" not in said, said  # an executed call: nothing
