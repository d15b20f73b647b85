"""A runner's background work that fails is said, never swallowed: its command poller, and
what its recording says while the console watches."""

import asyncio
from types import SimpleNamespace
from typing import Any

from loopdeck.operator.session import RunSession
from loopdeck.store import runner


class _Ticks:
    """A store whose every wait is one tick; after `ticks` of them the poller is done."""

    def __init__(self, done: asyncio.Event, ticks: int) -> None:
        self.done, self.left = done, ticks

    async def wait_for_change(self, timeout_s: float) -> None:
        self.left -= 1
        if self.left <= 0:
            self.done.set()


async def test_a_command_poller_that_breaks_says_so_once_and_tries_again(monkeypatch) -> None:
    polls: list[int] = []

    async def take_commands(store: Any, run_id: str) -> list[dict[str, Any]]:
        polls.append(1)
        if len(polls) <= 3:
            raise RuntimeError("the commands table went away")
        return [{"command": "kill", "by": "cli:ops"}] if len(polls) == 4 else []

    monkeypatch.setattr(runner.queries, "take_commands", take_commands)
    killed: list[str] = []
    runtime = SimpleNamespace(
        config=SimpleNamespace(run_id="r1"), kill=lambda by: killed.append(by)
    )
    said: list[str] = []
    done = asyncio.Event()
    await runner.serve_commands(_Ticks(done, 5), runtime, done, said.append)  # type: ignore[arg-type]
    assert len(said) == 2, said  # once when it broke (not at every tick), once when it healed
    assert "cannot be read: RuntimeError: the commands table went away — retrying" in said[0]
    assert "reach the run again" in said[1]
    assert killed == ["cli:ops"]  # the poller went on: the kill sent afterwards arrived


def test_a_consoles_listener_hears_what_the_recording_said_before_and_after() -> None:
    session = RunSession(None)
    session.say("2 spilled events brought back")
    heard: list[str] = []
    unsubscribe = session.listen(heard.append)
    session.say("commands from other terminals cannot be read")
    unsubscribe()
    session.say("after the screen left")
    assert heard == [
        "2 spilled events brought back",
        "commands from other terminals cannot be read",
    ]
    assert session.said[-1] == "after the screen left"
