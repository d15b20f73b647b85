"""The look after the agent's stop says what every look says: a permit spent there whose file
changed with no content to check it against is a finding (`unchecked`), as at a turn's end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from loopdeck.acp_env.calls import AcpCalls
from loopdeck.acp_env.loop import AcpLoop
from loopdeck.core.control import StopRun
from loopdeck.core.states import StopReason
from loopdeck.core.workspace_changes import ChangeWatch


async def _nothing(*_: Any) -> None:
    return None


async def test_a_permit_spent_at_the_agents_stop_is_said_unchecked() -> None:
    findings: list[str] = []
    snapshot = {"files": {"a.py": "new"}}

    async def snap() -> dict[str, Any]:
        return snapshot

    host = SimpleNamespace(snapshot=snap, finding=findings.append, run_id="r")
    watch = ChangeWatch()
    watch.look({"files": {"a.py": "old"}})
    watch.permit("c1 edit a.py", {"a.py"}, {"a.py": None})  # its content cannot be told
    calls = SimpleNamespace(host=host, watch=watch, settle_blocked=lambda: None,
                            terminals=SimpleNamespace(close=_nothing))  # fmt: skip
    calls.said_beside = lambda after, changes: AcpCalls.said_beside(calls, after, changes)  # type: ignore[arg-type]
    loop = SimpleNamespace(stopping=False, watcher=None, calls=calls, host=host,
                           agent=SimpleNamespace(stop=_nothing, proc=object()))  # fmt: skip
    await AcpLoop._stopped(loop, StopRun(StopReason.NO_PROGRESS, "looping"))  # type: ignore[arg-type]
    [said] = findings
    assert "changed after the agent's stop, unchecked: a.py (c1 edit a.py)" in said


async def test_a_change_at_the_agents_stop_on_another_stop_is_recorded_once_beside_it() -> None:
    """Seen as the run ends on another stop: one `unrequested_change` (not stopping), which
    the outcome lists among the findings; never a second `finding` of the same change."""
    findings: list[str] = []
    unrequested: list[tuple[str, Any, bool | None]] = []
    snapshot = {"files": {"a.py": "new"}}

    async def snap() -> dict[str, Any]:
        return snapshot

    host = SimpleNamespace(
        snapshot=snap, finding=findings.append, run_id="r",
        unrequested=lambda after, changes, stops=None: unrequested.append((after, changes, stops)),
    )  # fmt: skip
    watch = ChangeWatch()
    watch.look({"files": {"a.py": "old"}})
    calls = SimpleNamespace(host=host, watch=watch, settle_blocked=lambda: None,
                            terminals=SimpleNamespace(close=_nothing))  # fmt: skip
    calls.said_beside = lambda after, changes: AcpCalls.said_beside(calls, after, changes)  # type: ignore[arg-type]
    loop = SimpleNamespace(stopping=False, watcher=None, calls=calls, host=host,
                           agent=SimpleNamespace(stop=_nothing, proc=object()))  # fmt: skip
    await AcpLoop._stopped(loop, StopRun(StopReason.NO_PROGRESS, "looping"))  # type: ignore[arg-type]
    [(after, changes, stops)] = unrequested
    assert (after, stops, changes.changed) == ("the agent's stop", False, ["a.py"])
    assert findings == []
