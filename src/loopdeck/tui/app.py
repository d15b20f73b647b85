"""The console application: its keys, and one RunScreen per run.

This module is light on purpose (Textual, the themes, the preparing screen): `loopdeck run`
paints its first frame before the run's own modules are imported. Those (pydantic models, the
runtime, the store, the screens) are imported where they are first needed, and a run given
as `ConsoleStart.prepare` is prepared on a thread behind that frame. How the console opens is
`loopdeck.tui.console_start`; how it is left, `loopdeck.tui.console_quit`.

An action (a key, a click, a command) that raises is said and the console goes on
(`run_action`); a failure Textual cannot go on from ends the console with a non-zero exit,
each of its runs recording its stop `crashed` first (`console_failure`).

What a screen asks of the console arrives here as a message (`console_messages`: open a run,
start one, back to the fleet, done with a run), handled with `@on`; no screen calls the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from loopdeck.tui import console_quit
from loopdeck.tui.console_messages import BackToFleet, NewRunAsked, RunChosen, RunLeft
from loopdeck.tui.console_start import (
    apply_themes,
    first_screen,
    read_styles,
    run_screen_for,
    start_local,
    tell_theme_problems,
)
from loopdeck.tui.console_state import ConsoleStart, ConsoleState, Preparation
from loopdeck.tui.failures import handler_failed, worker_failed
from loopdeck.tui.preparing import PreparingScreen
from loopdeck.tui.shown_input import typing_into
from loopdeck.tui.themes import APP_VARIABLES

if TYPE_CHECKING:
    from textual.actions import ActionParseResult
    from textual.dom import DOMNode

__all__ = ["ConsoleStart", "LoopdeckApp", "Preparation"]


class LoopdeckApp(ConsoleState, inherit_bindings=False):
    # No CSS_PATH: `console_start.read_styles` reads the stylesheet after the first frame.
    TITLE = "loopdeck"
    # The kill switch lives on the app, with priority, so it works over any dialog. Textual's
    # own keys are not inherited: ctrl+q is bound below, after the keys it is listed with.
    BINDINGS = [
        Binding("s", "run_stop", "Stop after tools", priority=True, id="run.stop"),
        Binding("k", "run_kill", "Kill now", priority=True, id="run.kill"),
        Binding("p", "run_pause", "Pause/Resume", priority=True, id="run.pause"),
        # Over any dialog too: quitting is always one key away, and always asked first.
        Binding("q", "quit_run", "Quit", priority=True, id="app.quit_run"),
        Binding("i", "inbox", "Inbox", id="app.inbox"),
        # While a text box has the focus, letters are typed: stop and kill take ctrl.
        Binding("ctrl+s", "typed_stop", "Stop", priority=True, id="run.typed_stop"),
        Binding("ctrl+k", "typed_kill", "Kill", priority=True, id="run.typed_kill"),
        # ctrl+q quits from anywhere (asked first, as `q`); the keys line says so while typing.
        Binding("ctrl+q", "typed_quit", "Quit", priority=True, id="app.typed_quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("ctrl+c", "help_quit", show=False, system=True),
    ]

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLES)

    def get_css_variables(self) -> dict[str, str]:
        """The theme's variables; none while `App.__init__` asks, before the console's theme
        is chosen (`apply_themes`, just after, sets the stylesheet's from that theme): Textual's
        default theme's would be generated for nothing before the first frame."""
        if self.themes_from is None:
            return {}
        return super().get_css_variables()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        apply_themes(self)  # before the stylesheet's first parse (`console_start.open_in`)

    def on_compose(self) -> None:
        """Themes asked for after the app was made (a folder set on it): chosen again."""
        if self.themes_from != (self.requested_theme, self.themes_folder):
            apply_themes(self)

    def on_mount(self) -> None:
        self.screen_change_signal.subscribe(self, self._toasts_on_top, immediate=True)
        self.stop_signals.install()
        self.stop_signals.aim(
            lambda by: console_quit.stop_by_signal(self, by),
            lambda by: console_quit.signal_again(self, by),
        )
        tell_theme_problems(self)
        counts = not self.shared.fleet_home and self.db_path is not None
        if counts and self.prepare is None:
            self.call_after_refresh(self._count_waiting)  # after the first frame
        if self.prepare is not None:
            # The preparing screen is up (`get_default_screen`). Once its frame is painted: the
            # stylesheet, then the preparation, whose imports, on a thread, would take the
            # interpreter's lock from the first frame's layout and paint.
            self.call_after_refresh(self._after_first_frame)
        else:
            read_styles(self)
            self.push_screen(first_screen(self))

    def _toasts_on_top(self, top: Screen[Any]) -> None:
        """The toasts on the top screen only: a screen under a dialog shows through it, and
        its own toasts beside the dialog's strip said each toast twice. Textual shows them
        again on a screen that is on top again (`ScreenResume`)."""
        for screen in self.screen_stack:
            if screen is not top:
                for rack in screen.query("#textual-toastrack"):
                    rack.display = False

    def get_default_screen(self) -> Screen[Any]:
        """While a run is prepared, the first screen is its preparing screen (the run's goes
        over it): the first frame composes, styles and lays out that one screen, not Textual's
        empty default screen as well."""
        if self.prepare is not None:
            return PreparingScreen(self.preparing)
        return super().get_default_screen()

    def _after_first_frame(self) -> None:
        read_styles(self)
        self._prepare_run()

    def preparing_phase(self, doing: str) -> None:
        """The first frame says what the preparation waits for now."""
        if isinstance(self.screen, PreparingScreen):
            self.screen.phase(doing)

    @work(thread=True, group="prepare", exit_on_error=False, description="preparing the run")
    def _prepare_run(self) -> Screen[None]:
        """Behind the first frame: the heavy imports, the store's check, the env and model."""
        assert self.prepare is not None
        self.session = self.prepare()
        return first_screen(self)

    @work(group="waiting", exit_on_error=False, description="counting what waits elsewhere")
    async def _count_waiting(self) -> None:
        """`run` and `attach`: what waits in the store's other runs (the header's "+N in
        other runs · i"), counted until the console leaves."""
        # Its modules (the store's) are imported off the loop: the first frames and the
        # run's preparation do not wait behind them.
        await asyncio.to_thread(import_module, "loopdeck.tui.waiting_elsewhere")
        from loopdeck.tui.waiting_elsewhere import count_waiting  # imported just now

        await count_waiting(self.shared, self.db_path, self.stop_counting)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "prepare":  # any other worker of the app: said if it fails
            worker_failed(self, event)
            return
        if event.state is WorkerState.SUCCESS:
            # Over the preparing screen, the first on the stack (Textual switches no screen
            # it did not push), as other screens are over Textual's default one.
            self.push_screen(cast(Screen[None], event.worker.result))
            # Only now: two threads importing loopdeck's packages at once can deadlock in
            # Python's import locks (the count's thread took `core.timeouts` while the
            # preparation was inside `loopdeck.core`'s own import).
            if not self.shared.fleet_home and self.db_path is not None:
                self._count_waiting()
        elif event.state is WorkerState.ERROR:
            self.launch_error = event.worker.error
            self.exit(return_code=2)  # the CLI names the error once the terminal is back

    @on(NewRunAsked)
    def _new_run(self) -> None:
        """The chooser, with the path typed in it last time; a script that failed to start
        is offered again (enter starts it once its env is mended)."""
        from loopdeck.tui.launcher import Choice, LauncherScreen

        path_typed, again = self.chooser_kept
        chooser = LauncherScreen(path_typed, Choice(*again) if again else None)

        def launch(choice: tuple[str, str] | None) -> None:
            offered = again if choice is None else None  # left as it was, or chosen
            if choice is not None and not start_local(self, *choice):
                offered = choice
            self.chooser_kept = (chooser.path_typed, offered)

        self.push_screen(chooser, launch)

    @on(RunChosen)
    def _open_run(self, chosen: RunChosen) -> None:
        """From the fleet: a run of this console, another process's live run, or a replay."""
        from loopdeck.operator.links import ReplayLink
        from loopdeck.operator.store_link import StoreLink

        if chosen.run_id in self.local_runs:
            self.push_screen(f"run-{chosen.run_id}")
        elif chosen.live:
            self.push_screen(run_screen_for(self, StoreLink(self.db_path, chosen.run_id)))
        else:
            self.push_screen(run_screen_for(self, ReplayLink(self.db_path, chosen.run_id)))

    @on(BackToFleet)
    def _back_to_fleet(self) -> None:
        """Escape from a run: the fleet again; nothing stops."""
        if self.shared.fleet_home and len(self.screen_stack) > 2:
            self.pop_screen()

    @on(RunLeft)
    def _leave_run(self, left: RunLeft) -> None:
        """A run screen is done with: back to the fleet it came from, or out."""
        console_quit.leave_run(self, left.screen, left.view)

    def action_inbox(self) -> None:
        from loopdeck.tui.inbox import InboxScreen

        self.inbox_type = InboxScreen
        if (self.shared.fleet_home or self.db_path) and not self.inbox_shown():
            self.push_screen(InboxScreen(self.db_path, self.now))

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Every key's, click's and command's action: one that raises is said (what failed,
        why) and taken as done; the console goes on."""
        try:
            return await super().run_action(action, default_namespace, namespaces)
        except Exception as error:  # said, not dropped: failures.py's one place
            name = action if isinstance(action, str) else action[1]
            handler_failed(self, f"the action {name}", error)
            return True

    def _handle_exception(self, error: Exception) -> None:
        """Textual's one door for an exception nothing caught, which ends the console: each
        run of this console told to stop `crashed` first (`console_failure`)."""
        try:
            from loopdeck.tui import console_failure  # here: not before the first frame

            console_failure.failed(self, error)
        finally:
            super()._handle_exception(error)

    async def on_unmount(self) -> None:
        self.stop_counting.set()
        self.stop_signals.remove()
        # Before the sessions are cleaned up: after a failure, each run's stop is recorded.
        from loopdeck.tui import console_failure

        await console_failure.runs_recorded(self)
        if self.session is not None:
            self.session.cleanup()
        for prepared in self.prepared_runs:
            prepared.cleanup()

    async def action_quit(self) -> None:
        """ctrl+q asks like `q` when a run is live; nothing is left to a crash record."""
        self.action_quit_run()

    def action_quit_run(self) -> None:
        console_quit.quit_run(self)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        typing = typing_into(self.focused)
        if action == "inbox":  # not on the inbox itself: `i` there would say nothing new
            home = self.shared.fleet_home or self.db_path is not None
            return home and not typing and not self.inbox_shown()
        if action in ("run_stop", "run_kill", "run_pause", "typed_stop", "typed_kill"):
            run = self.shown_run()
            return run is not None and run.running and typing == action.startswith("typed")
        if action == "quit_run":
            return not typing
        if action == "typed_quit":
            return typing
        return True

    def action_run_stop(self) -> None:
        from loopdeck.tui.question_dialog import QuestionDialog

        if isinstance(self.screen, QuestionDialog) and self.screen.answers_stop:
            self.screen.answer_stop()  # the guard's or a budget's question: `s` is its answer
        elif run := self.shown_run():
            run.action_stop()

    def action_typed_stop(self) -> None:
        self.action_run_stop()

    def action_typed_kill(self) -> None:
        self.action_run_kill()

    def action_typed_quit(self) -> None:
        self.action_quit_run()

    def action_run_kill(self) -> None:
        from loopdeck.tui.dialogs import ConfirmKillDialog

        if (run := self.shown_run()) and not isinstance(self.screen, ConfirmKillDialog):
            run.action_kill()

    def action_run_pause(self) -> None:
        if run := self.shown_run():
            run.action_pause()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The run's own commands first; Textual's screenshot, theme picker and quit are not
        an operator's (quitting a run is `q`, which asks)."""
        run = self.shown_run()
        if run is not None and run.running:
            yield SystemCommand(
                "run: stop after current tools", "end with cancelled", run.action_stop
            )
            yield SystemCommand(
                "run: kill now", "cancel the in-flight call, end with killed", run.action_kill
            )
            yield SystemCommand(
                "run: pause / resume", "hold before the next model call", run.action_pause
            )
            yield SystemCommand(
                "run: message the agent", "heard before the model's next turn", run.action_message
            )
        if run is not None and run.link.pending():
            yield SystemCommand(
                "approvals: open pending", "decide the waiting writes", run.action_approvals
            )
        if run is not None and run.check_action("outcome", ()):
            yield SystemCommand(
                "outcome: say whether a write took effect",
                "a write whose outcome is unknown: applied or not",
                run.action_outcome,
            )
        if run is not None and run.check_action("revoke", ()):
            yield SystemCommand(
                "grants: revoke one", "later calls it covered are asked again", run.action_revoke
            )
        if run is not None:
            yield SystemCommand(
                "run: transcript", "everything the run said and did", run.action_transcript
            )
            yield SystemCommand(
                "run: quit",
                "leave the run (a live run is killed, asked first)",
                run.action_quit_run,
            )
        for name in sorted(self.available_themes):
            if name.startswith("loopdeck-"):
                yield SystemCommand(
                    f"theme: {name}",
                    "switch the console's theme",
                    partial(self.use_theme, name),
                )
        yield SystemCommand(
            "keys", "every key of this screen and the console's, in words", self.show_keys
        )

    def use_theme(self, name: str) -> None:
        """The palette's `theme: NAME`."""
        self.theme = name

    def show_keys(self) -> None:
        """The palette's `keys`: the console's own keys screen, for the screen it was on."""
        from loopdeck.tui.keys_screen import KeysScreen

        if not isinstance(self.screen, KeysScreen):
            self.push_screen(KeysScreen(self.screen))
