"""A screen's timers that stop with it: a tick that lands while its screen is being removed,
or once its children are gone (the app closing), does nothing; so does a screen's mount that
runs once the app, closing, has removed its children (`unless_gone`)."""

from __future__ import annotations

from collections.abc import Callable

from textual.css.query import NoMatches
from textual.widget import Widget


def every(widget: Widget, seconds: float, callback: Callable[[], object]) -> None:
    """`callback` every `seconds` while `widget` is on screen. Textual runs a timer's callback
    in the timer's own task, so a tick can land after the widget's children were removed (its
    screen popped, the app closing) and before its timers stop: such a tick does nothing."""

    def tick() -> None:
        if widget.display:  # False from the moment the widget is being removed or closed
            unless_gone(widget, callback)

    widget.set_interval(seconds, tick)


def later(widget: Widget, seconds: float, callback: Callable[[], object]) -> None:
    """`callback` once, `seconds` from now, unless `widget` is being removed by then."""

    def fire() -> None:
        if widget.display:
            unless_gone(widget, callback)

    widget.set_timer(seconds, fire)


def unless_gone(widget: Widget, callback: Callable[[], object]) -> None:
    """`callback`, which draws into `widget`'s children. When the app closes, a screen's
    children may be closed before the screen is, its `display` still True (CI saw the run
    screen's spinner find no header then), even before its own mount ran (quitting as a run
    screen was pushed: its `on_mount` found no panel); a screen popped has its children
    removed while it is off the stack, some still there (a loaded CI saw the run screen's
    tick find no header, its other panels left). A query that misses then does nothing; one
    that misses among the children of a widget still on a stacked screen is a fault, and
    raises."""
    try:
        callback()
    except NoMatches:
        if widget.children and _on_stack(widget):
            raise


def _on_stack(widget: Widget) -> bool:
    try:
        return widget.screen in widget.app.screen_stack
    except Exception:  # NoScreen, NoActiveAppError: detached, so gone
        return False
