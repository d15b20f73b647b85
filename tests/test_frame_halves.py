"""A runaway's frame is drawn in two halves (issue 43, "the keys never wait on the loop"): the
transcript's entries and the Call panel once the rest of the frame is painted, so no paint
holds the loop for the whole screen; nothing of a frame is lost or drawn twice, and a stop's
frame is whole at once."""

from __future__ import annotations

import asyncio
from itertools import count
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from console_helpers import run_screen, wait_until
from fake_models import calls
from pydantic import BaseModel

from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, tool
from loopdeck.core.model import ModelReply, ModelRequest
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import PreparedRun
from loopdeck.operator.session import RunSession
from loopdeck.operator.transcript import Entry
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.frame_pacing import SecondHalf
from loopdeck.tui.run_screen import RunScreen
from loopdeck.tui.transcript_view import TranscriptLog


def halves(panels: list[SimpleNamespace]) -> tuple[SecondHalf, list[str]]:
    """A second half whose draws and refreshes asked for are said in one list, in order."""
    drawn: list[str] = []
    screen = SimpleNamespace(
        display=True, children=[], call_after_refresh=lambda cb: drawn.append(f"refresh {cb()}")
    )
    return SecondHalf(screen, lambda: drawn.append("rest"), lambda: panels), drawn  # type: ignore[arg-type]


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_second_half_waits_for_every_panel_of_the_first() -> None:
    table, budgets = SimpleNamespace(unpainted=True), SimpleNamespace(unpainted=True)
    second, drawn = halves([table, budgets])
    second.owe()
    table.unpainted = False
    second.first_painted()  # the budgets' refresh has not reached the screen yet
    await turns()
    assert drawn == []
    budgets.unpainted = False
    second.first_painted()
    second.first_painted()  # asked once
    assert drawn == []  # on a later turn of the loop, not in the paint's
    await turns()
    assert drawn == ["rest"] and not second.owed
    second.first_painted()  # nothing owed: nothing drawn
    await turns()
    assert drawn == ["rest"]


async def test_a_second_half_no_paint_asks_for_is_drawn_by_the_second_tick() -> None:
    second, drawn = halves([SimpleNamespace(unpainted=True)])  # a panel not shown
    second.owe()
    second.due()  # the first half may be waiting for its paint
    assert drawn == []
    second.due()
    assert drawn == ["rest"]
    second.due()
    second.now()
    assert drawn == ["rest"]


async def test_now_draws_what_is_owed_once() -> None:
    second, drawn = halves([SimpleNamespace(unpainted=False)])
    second.now()
    assert drawn == []
    second.owe()
    second.first_painted()  # asked for the next turn ...
    second.now()  # ... and drawn at once first (a stop's frame)
    await turns()
    assert drawn == ["rest"]


async def test_a_frame_is_on_screen_once_its_second_half_is_painted() -> None:
    second, drawn = halves([SimpleNamespace(unpainted=False)])
    second.after(lambda: "whole")  # nothing owed: the next refresh
    assert drawn == ["refresh whole"]
    drawn.clear()
    second.owe()
    second.after(lambda: "frame")
    assert drawn == []
    second.first_painted()
    await turns()
    assert drawn == ["rest", "refresh frame"]  # after the refresh that paints what it drew


class PollArgs(BaseModel):
    i: int = 0


class PollingEnv(Environment):
    def snapshot(self) -> dict[str, Any]:
        return {"job": "running"}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["the job is still running"]

    @tool(args=PollArgs, exempt=True)
    def poll(self, args: PollArgs) -> dict[str, Any]:
        """Poll the job."""
        return {"status": "running", "i": args.i}


class Polling:
    name = "fake"
    context_window: int | None = None

    def __init__(self) -> None:
        self.n = count()

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.role == "planner":
            return ModelReply(model="fake", content="1. Poll.", prompt_tokens=1)
        return calls(("poll", {"i": next(self.n)}))


def runaway_app() -> LoopdeckApp:
    budget = Budget(max_turns=10**9, max_tool_calls=10**9, max_tokens=10**12, max_cost_usd=10**6,
                    deadline_s=3600, max_rounds=1)  # fmt: skip
    config = RunConfig(env="test", model="fake", goal="the job finishes", budget=budget)
    runtime = Runtime(config, PollingEnv(Path("."), {}), Polling(), AutoApprover())
    prepared = PreparedRun(env_dir=None, runtime=runtime, workdir=Path("/nonexistent"))  # type: ignore[arg-type]
    return LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, ApprovalQueue())))


async def test_a_runaway_s_transcript_follows_its_frame_and_its_stop_is_whole() -> None:
    app = runaway_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)
        assert isinstance(screen, RunScreen)
        log = screen.query_one("#transcript-panel", TranscriptLog)
        flush = screen.flush
        frames: list[tuple[Entry, bool]] = []  # each frame's last entry, in the panel at once

        def watched() -> None:
            flush()
            if screen.transcript.entries:
                last = screen.transcript.entries[-1]
                frames.append((last, any(entry is last for entry in log.entries)))

        screen.flush = watched  # type: ignore[method-assign]
        await wait_until(pilot, lambda: len(frames) >= 8)
        # Right after a frame's fold the panel lacks its entries: they are its second half's.
        assert not all(shown for _, shown in frames)
        # ... drawn once the first half is painted: the panel has them, in order.
        last = frames[-1][0]
        await wait_until(pilot, lambda: any(entry is last for entry in log.entries))
        shown = [entry for entry in log.entries]
        assert len(set(map(id, shown))) == len(shown)  # none twice
        screen.link.kill(by="operator")
        await wait_until(pilot, lambda: screen.outcome is not None)
        # The stop's frame is whole at once: the panel ends where the transcript does.
        assert not screen.second_half.owed
        assert log.entries[-1] is screen.transcript.entries[-1]
