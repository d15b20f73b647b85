"""What a screen asks of the console: a message it posts, which bubbles up to the app and is
handled there with `@on` (`LoopdeckApp`). A screen never calls the app nor sets what it
holds; what it reads and records is `SharedState`, given to it when it is made.

Light on purpose, like `loopdeck.tui.app`, which imports it: Textual's `Message` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message
from textual.screen import Screen

if TYPE_CHECKING:
    from loopdeck.operator.runview import RunView


@dataclass
class RunChosen(Message):
    """The fleet's enter: open this run (one of this console's, another process's live
    run, or a finished run's replay)."""

    run_id: str
    live: bool


class NewRunAsked(Message):
    """The fleet's `n`: the chooser, then a run of this console."""


class BackToFleet(Message):
    """Escape on a run: the fleet again; nothing stops."""


@dataclass
class RunLeft(Message):
    """A run screen is done with (`q`, its run's stop after a quit, a stop signal): back to
    the fleet it came from, or out of the console with a farewell line from its view."""

    screen: Screen[None]
    view: RunView
