"""A screen's timers (`tui/timers.py`) do nothing once the screen is being removed: Textual
runs a timer's callback in the timer's own task, so a tick can land after the screen's
children were pruned (CI saw the run screen's spinner raise NoMatches there). The test is
Textual's `display`, False from the prune on, and for a hidden widget: held here with a hidden
screen, whose timers would otherwise fire before a later one of the app's."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.css.query import NoMatches
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Static

from loopdeck.tui.timers import every, later, unless_gone


class Host(App[None]):
    pass


async def _after_the_screens_timers(app: App[None], pilot: Pilot[Any]) -> None:
    """Wait until a timer of the app's due after the screen's (1 ms) has fired."""
    done: list[bool] = []
    app.set_timer(0.02, lambda: done.append(True))
    while not done and app.is_running:  # a tick that raised ends the app: said at its exit
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


async def test_a_screens_timers_do_nothing_once_its_children_are_gone() -> None:
    """The app closing may close a screen's children before the screen: a tick between the two
    finds nothing to draw into, and does nothing more (it raised NoMatches there)."""
    fired: list[str] = []
    app = Host()
    async with app.run_test() as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        await screen.mount(Static(id="drawn"))

        def draw() -> None:
            fired.append("tick")
            screen.query_one("#drawn", Static).update("tick")

        every(screen, 0.001, draw)
        later(screen, 0.001, draw)
        await _after_the_screens_timers(app, pilot)
        assert len(fired) >= 2
        await screen.query_one("#drawn").remove()
        fired.clear()
        await _after_the_screens_timers(app, pilot)
        assert fired and app.is_running  # ticks that found nothing to draw into, and no fault


async def test_a_query_that_misses_among_children_is_still_a_fault() -> None:
    app = Host()
    with pytest.raises(NoMatches):
        async with app.run_test() as pilot:
            screen: Screen[None] = Screen()
            await app.push_screen(screen)
            await screen.mount(Static(id="drawn"))
            every(screen, 0.001, lambda: screen.query_one("#elsewhere"))
            await _after_the_screens_timers(app, pilot)


async def test_a_tick_of_a_screen_off_the_stack_that_finds_nothing_does_nothing() -> None:
    """A screen popped is off the stack while its children go (a loaded CI saw the run screen's
    tick find no header with its other panels still there): a query that misses then is no
    fault. Held here with an installed screen switched away from, its children kept."""
    app = Host()
    async with app.run_test() as pilot:
        screen: Screen[None] = Screen()
        app.install_screen(screen, name="left")
        await app.push_screen("left")
        await screen.mount(Static(id="kept"))
        await app.switch_screen(Screen())
        await pilot.pause()
        assert screen not in app.screen_stack and screen.children
        unless_gone(screen, lambda: screen.query_one("#drawn"))  # nothing, no fault
        with pytest.raises(NoMatches):  # on the stack, a miss among children is a fault
            await app.push_screen("left")
            unless_gone(screen, lambda: screen.query_one("#drawn"))
