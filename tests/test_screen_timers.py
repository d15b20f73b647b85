"""A screen's timers (`tui/timers.py`) do nothing once the screen is being removed: Textual
runs a timer's callback in the timer's own task, so a tick can land after the screen's
children were pruned (CI saw the run screen's spinner raise NoMatches there). The test is
Textual's `display`, False from the prune on, and for a hidden widget: held here with a hidden
screen, whose timers would otherwise fire before a later one of the app's."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen

from loopdeck.tui.timers import every, later


class Host(App[None]):
    pass


async def _after_the_screens_timers(app: App[None], pilot: Pilot[Any]) -> None:
    """Wait until a timer of the app's due after the screen's (1 ms) has fired."""
    done: list[bool] = []
    app.set_timer(0.02, lambda: done.append(True))
    while not done:
        await pilot.pause()


@pytest.mark.parametrize("shown", [True, False])
async def test_a_screens_timers_fire_only_while_it_is_shown(shown: bool) -> None:
    """Hidden (as a screen being removed is, from the prune on), its timers do nothing."""
    fired: list[str] = []
    app = Host()
    async with app.run_test() as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        screen.display = shown
        every(screen, 0.001, lambda: fired.append("every"))
        later(screen, 0.001, lambda: fired.append("later"))
        await _after_the_screens_timers(app, pilot)
        assert ("every" in fired and "later" in fired) if shown else fired == []
