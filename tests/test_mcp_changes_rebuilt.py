"""A run rebuilt from its log keeps the writes its MCP server made of its reads
(`mcp_env/tool_changes.py`, `core/recorded_inputs.py`): the change is the finding's data
(`Finding.raised`), never found again in its words (which name the server by a command that
differs on each worker), and the finding is stored once, at its place.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from test_mcp_changes import ENV, _rebuilt, _whole_turned

from loopdeck.core.events import (
    ApprovalRequested,
    CallProposed,
    Event,
    Finding,
    RunStopped,
)
from loopdeck.core.finding_events import RiskRaised
from loopdeck.core.replay_log import key
from loopdeck.mcp_env.listing import ServerTool
from loopdeck.mcp_env.tool_changes import ToolChanges


def _peek_said(events: list[Event]) -> list[Finding]:
    return [e for e in events if isinstance(e, Finding) and "tool peek" in e.text]


async def test_a_rebuilt_run_whose_server_command_names_its_workdir_keeps_the_write(
    tmp_path: Path,
) -> None:
    """The server's command names `{workdir}`, a new directory for each run's process: the
    rebuilt run's server is named otherwise than in its log's finding, and `peek` is still a
    write there, asked for before it runs."""
    env = tmp_path / "env"
    shutil.copytree(ENV, env)
    scenario = env / "scenario.toml"
    said = '"{envdir}/server.py"]'
    scenario.write_text(scenario.read_text().replace(said, '"{envdir}/server.py", "{workdir}"]'))
    whole = await _whole_turned(env)
    peek = next(e for e in whole if isinstance(e, CallProposed) and e.tool == "peek")
    [finding] = _peek_said(whole)
    assert finding.raised is not None and finding.raised.tool == "peek", finding
    replay, events = await _rebuilt(whole[: whole.index(peek)], env)
    assert replay.diverged is None, replay.diverged
    proposed = next(e for e in events if isinstance(e, CallProposed) and e.tool == "peek")
    assert proposed.risk == "write", proposed
    assert proposed.call_id in {e.call_id for e in events if isinstance(e, ApprovalRequested)}


def test_a_tool_named_like_the_words_of_another_is_made_a_write_by_its_own_name() -> None:
    """A server offering `peek` and `peek during the run (z`, making the second a write: a
    rebuild makes that one a write again, and `peek` stays the read it is."""
    hostile = "peek during the run (z"

    def tool(name: str, read_only: bool) -> ServerTool:
        return ServerTool(name, name, {"type": "object"}, read_only, None)

    def changes(said: list[tuple[str, RiskRaised | None]]) -> ToolChanges:
        start = [tool("peek", True), tool(hostile, True)]
        risks: dict[str, Any] = {"peek": "read", hostile: "read"}
        return ToolChanges(
            "srv", start, risks, start, lambda *told: said.append(told), lambda t, _: t.name
        )

    said: list[tuple[str, RiskRaised | None]] = []
    changes(said).listed([tool("peek", True), tool(hostile, False)])
    [(words, raised)] = said
    assert raised is not None and raised.tool == hostile, (words, raised)
    rebuilt = changes([])
    assert list(rebuilt.made_again(raised)) == [hostile]
    rebuilt.vet("peek", "read")  # still a read: not refused


async def test_a_plain_rebuild_does_not_store_its_finding_again() -> None:
    """The log ends just after the finding: the rebuilt run, going live there, does not say
    it again (the store has it), and `peek` is a write."""
    whole = await _whole_turned()
    [finding] = _peek_said(whole)
    replay, events = await _rebuilt(whole[: whole.index(finding) + 1])
    assert replay.diverged is None, replay.diverged
    assert _peek_said(events) == [], _peek_said(events)
    proposed = next(e for e in events if isinstance(e, CallProposed) and e.tool == "peek")
    assert proposed.risk == "write", proposed


def _around(events: list[Event], finding: Finding) -> tuple[Any, Any]:
    """The compared events just before and just after `finding`."""
    at = events.index(finding)
    keyed = [(i, key(e)) for i, e in enumerate(events) if key(e) is not None]
    return (
        next(k for i, k in reversed(keyed) if i < at),
        next((k for i, k in keyed if i > at), None),
    )


async def test_a_fork_says_its_finding_at_its_place_in_its_own_log() -> None:
    """A fork rebuilt from the whole run: its own log has the finding once, between the same
    events as its source's, with the change as data."""
    whole = await _whole_turned()
    [finding] = _peek_said(whole)
    replay, events = await _rebuilt(whole, fork="fork-1")
    assert replay.diverged is None, replay.diverged
    [again] = _peek_said(events)
    assert again.raised == finding.raised and again.run_id == "fork-1"
    assert _around(events, again) == _around(whole, finding)
    stop = events[-1]
    assert isinstance(stop, RunStopped) and "could not be rebuilt" not in stop.detail
