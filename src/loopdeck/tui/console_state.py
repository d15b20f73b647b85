"""What the console holds (`ConsoleState`, the base of `LoopdeckApp`) and what it opens on
(`ConsoleStart`). `console_start` and `console_quit` work on a `ConsoleState`, so neither
names the app that uses them. What its screens share is its `SharedState`, given to each
screen as it is made: no screen reads the app.

Light on purpose, like `loopdeck.tui.app`: only Textual and the stop signals are imported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App

from loopdeck.stop_signals import StopSignals
from loopdeck.tui.shared_state import SharedState

if TYPE_CHECKING:
    from loopdeck.operator.launch import PreparedRun, RunOptions
    from loopdeck.operator.links import RunLink
    from loopdeck.operator.records import Location
    from loopdeck.operator.session import RunSession
    from loopdeck.tui.console_failure import ConsoleFailure
    from loopdeck.tui.inbox import InboxScreen
    from loopdeck.tui.run_screen import RunScreen


def _utcnow() -> datetime:
    return datetime.now(UTC)


# A run prepared behind the first frame: its session (the run, its queue, its store).
Preparation = Callable[[], "RunSession"]


@dataclass(frozen=True)
class ConsoleStart:
    """What the console opens on: one prepared run, a link (attached or replayed), a run
    prepared behind the first frame, or, with none of these, the fleet of `db_path`."""

    session: RunSession | None = None
    link: RunLink | None = None
    prepare: Preparation | None = None
    preparing: str = ""  # what is being prepared, in words, for the first frame
    db_path: Location | None = None
    launch_options: RunOptions | None = None  # what a run started from the fleet inherits
    said: tuple[str, ...] = ()  # what the console says as it opens (a store it made)

    @classmethod
    def for_run(cls, session: RunSession) -> ConsoleStart:
        return cls(session=session, db_path=session.location)

    @classmethod
    def for_link(cls, link: RunLink, db_path: Location | None = None) -> ConsoleStart:
        return cls(link=link, db_path=db_path)

    @classmethod
    def for_fleet(
        cls,
        db_path: Location | None,
        launch_options: RunOptions | None = None,
        said: tuple[str, ...] = (),
    ) -> ConsoleStart:
        return cls(db_path=db_path, launch_options=launch_options, said=said)

    @classmethod
    def for_preparing(
        cls, prepare: Preparation, preparing: str, db_path: Location | None = None
    ) -> ConsoleStart:
        return cls(prepare=prepare, preparing=preparing, db_path=db_path)

    @property
    def fleet_home(self) -> bool:
        """The fleet is home when the console was opened on a store rather than on one run."""
        return self.session is None and self.link is None and self.prepare is None


class ConsoleState(App[int]):
    """The console's own state: what it was opened on, its runs, its farewell line."""

    # The theme asked for and the folder read when the themes were last chosen; None until
    # they are (already while `App.__init__` runs: `LoopdeckApp.get_css_variables`).
    themes_from: tuple[str | None, Path | None] | None = None

    def __init__(
        self,
        start: ConsoleStart | None = None,
        *,
        theme_name: str | None = None,
        themes_folder: Path | None = None,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        """`start` is what the console opens on (the fleet of the default store if none);
        the theme (a name or a file) and the clock are how it looks and tells time."""
        super().__init__()
        start = start or ConsoleStart()
        self.session = start.session
        self.prepare = start.prepare
        self.preparing = start.preparing
        # Why preparing the run failed (a bad scenario, a locked store): the CLI reports it.
        self.launch_error: BaseException | None = None
        self.requested_theme = theme_name
        self.themes_folder = themes_folder
        self._launch_options = start.launch_options
        self.now = now
        self.db_path = start.db_path
        self.link = start.link
        self.theme_problems: list[str] = []
        self.said_at_start = start.said
        # One line for the terminal once the console is gone: the run, how it ended, replay.
        self.farewell = ""
        # What its screens share: the fleet as home, the runs looked at, what waits in each
        # run, this console's own drives.
        self.shared = SharedState(fleet_home=start.fleet_home, looked_at=self._looked_at)
        self.stop_counting = asyncio.Event()
        self.bell_enabled = True
        self.local_runs: dict[str, RunScreen] = {}
        self.quitting_all = False  # this console's live runs are being killed, to leave
        self.prepared_runs: list[PreparedRun] = []  # runs started from the fleet, to clean up
        # The chooser's path box as last left, and the (env, script) that then failed to start.
        self.chooser_kept: tuple[str, tuple[str, str] | None] = ("", None)
        # The run screen's class and the inbox's, once a screen of theirs was made: the app
        # knows them in its stack by these, without importing their modules (and all a run
        # needs) before the first frame.
        self.run_screen_type: type[RunScreen] | None = None
        self.inbox_type: type[InboxScreen] | None = None
        # The failure the console could not go on from, once there is one (`console_failure`).
        self.failure: ConsoleFailure | None = None
        # SIGTERM and SIGINT kill this console's live runs, then leave as `q` does.
        self.stop_signals = StopSignals()

    @property
    def prepared(self) -> PreparedRun | None:
        """The run this console was opened on, once prepared."""
        return None if self.session is None else self.session.prepared

    def shown_runs(self) -> list[RunScreen]:
        """The run screens in the stack, the bottom one first."""
        kind = self.run_screen_type
        return [] if kind is None else [s for s in self.screen_stack if isinstance(s, kind)]

    def shown_run(self) -> RunScreen | None:
        """The topmost run screen in the stack (under a dialog, say)."""
        shown = self.shown_runs()
        return shown[-1] if shown else None

    def _looked_at(self) -> str | None:
        """The run of the topmost run screen, once its events named it."""
        shown = self.shown_run()
        return shown.view.run_id or None if shown is not None else None

    def inbox_shown(self) -> bool:
        """The inbox is the screen on top."""
        kind = self.inbox_type
        return kind is not None and isinstance(self.screen, kind)

    @property
    def launch_options(self) -> RunOptions:
        if self._launch_options is None:
            from loopdeck.operator.launch import RunOptions

            self._launch_options = RunOptions(env="")
        return self._launch_options
