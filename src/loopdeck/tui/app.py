"""The console application: themes, the launcher, and one RunScreen per run.

This module is light on purpose (Textual, the themes, the preparing screen): `loopdeck run`
paints its first frame before the run's own modules are imported. Those (pydantic models, the
runtime, the store, the screens) are imported where they are first needed, and a run given
as `prepare` is prepared on a thread behind that frame.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from loopdeck.stop_signals import StopSignals
from loopdeck.store.base import Location, shown_location
from loopdeck.tui.preparing import PreparingScreen
from loopdeck.tui.shown import toast
from loopdeck.tui.themes import (
    APP_VARIABLES,
    DEFAULT_THEME,
    is_theme_path,
    load_theme,
    load_themes,
    theme_folders,
)
from loopdeck.tuning import collector, lock_switching, strip_caches, textual_cycles

if TYPE_CHECKING:
    from loopdeck.operator.approval_queue import ApprovalQueue
    from loopdeck.operator.launch import PreparedRun, RunOptions
    from loopdeck.operator.links import RunLink
    from loopdeck.tui.run_screen import RunScreen

# A run prepared behind the first frame: the prepared run and the queue its approvals use.
Preparation = Callable[[], "tuple[PreparedRun, ApprovalQueue]"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LoopdeckApp(App[int]):
    CSS_PATH = "loopdeck.tcss"
    TITLE = "loopdeck"
    # The kill switch lives on the app, with priority, so it works over any dialog.
    BINDINGS = [
        Binding("s", "run_stop", "Stop after tools", priority=True, id="run.stop"),
        Binding("k", "run_kill", "Kill now", priority=True, id="run.kill"),
        Binding("p", "run_pause", "Pause/Resume", priority=True, id="run.pause"),
        # Over any dialog too: quitting is always one key away, and always asked first.
        Binding("q", "quit_run", "Quit", priority=True, id="app.quit_run"),
        Binding("i", "inbox", "Inbox", id="app.inbox"),
    ]

    def __init__(
        self,
        prepared: PreparedRun | None = None,
        queue: ApprovalQueue | None = None,
        *,
        theme_name: str | None = None,
        themes_folder: Path | None = None,
        launch_options: RunOptions | None = None,
        now: Callable[[], datetime] = _utcnow,
        db_path: Location | None = None,
        link: RunLink | None = None,
        prepare: Preparation | None = None,
        preparing: str = "",
    ) -> None:
        super().__init__()
        # The console owns its process: it sets the collector's thresholds whatever they were
        # (small young collections, see `loopdeck.collector`), model calls hold the collector,
        # threads hold the interpreter's lock a little longer (`loopdeck.lock_switching`), and
        # Textual's strips are made lighter for it.
        gc.set_threshold(*collector.CONSOLE_THRESHOLDS)
        collector.hold_during_model_calls()
        lock_switching.for_console()
        textual_cycles.install()
        strip_caches.install()
        self.prepared = prepared
        self._queue = queue
        self.prepare = prepare
        self.preparing = preparing  # what is being prepared, in words, for the first frame
        # Why preparing the run failed (a bad scenario, a locked store): the CLI reports it.
        self.launch_error: BaseException | None = None
        self.requested_theme = theme_name
        self.themes_folder = themes_folder
        self._launch_options = launch_options
        self.now = now
        self.db_path = db_path
        self.link = link
        self.theme_problems: list[str] = []
        # One line for the terminal once the console is gone: the run, how it ended, replay.
        self.farewell = ""
        # The fleet is home when the console was opened on a store rather than on one run.
        self.fleet_home = prepared is None and link is None and prepare is None
        self.waiting_total = 0
        self.bell_enabled = True
        self.local_runs: dict[str, RunScreen] = {}
        self._quitting_all = False
        self._prepared_runs: list[PreparedRun] = []
        # SIGTERM and SIGINT kill this console's live runs, then leave as `q` does.
        self.stop_signals = StopSignals()

    @property
    def queue(self) -> ApprovalQueue:
        if self._queue is None:
            from loopdeck.operator.approval_queue import StoreBackedQueue

            self._queue = StoreBackedQueue()
        return self._queue

    @property
    def launch_options(self) -> RunOptions:
        if self._launch_options is None:
            from loopdeck.operator.launch import RunOptions

            self._launch_options = RunOptions(env="")
        return self._launch_options

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLES)

    def on_mount(self) -> None:
        self.stop_signals.install()
        self.stop_signals.aim(self._stop_by_signal, self._signal_again)
        requested = self.requested_theme
        as_file = Path(requested).expanduser() if requested and is_theme_path(requested) else None
        loaded = load_themes(self.themes_folder)
        for theme in loaded.themes:
            self.register_theme(theme)
        self.theme_problems = list(loaded.problems)
        chosen = DEFAULT_THEME if loaded.resolve(DEFAULT_THEME) else "textual-dark"
        if as_file is not None:
            try:
                from_file = load_theme(as_file)
                self.register_theme(from_file)
                chosen = from_file.name
            except Exception as exc:  # named with its file; the console opens in the default
                self.theme_problems.append(f"theme file {as_file}: {type(exc).__name__}: {exc}")
        elif requested:
            resolved = loaded.resolve(requested)
            if resolved is None:
                known = ", ".join(t.name for t in loaded.themes) or "(none)"
                folders = ", ".join(str(f) for f in theme_folders())
                self.theme_problems.append(
                    f"unknown theme {requested!r}; themes: {known} (read from {folders})"
                )
            else:
                chosen = resolved
        self.theme = chosen
        for problem in self.theme_problems:
            toast(self, problem, title="theme", severity="error", timeout=15)
        if self.prepare is not None:
            self.push_screen(PreparingScreen(self.preparing))
            self._prepare_run()
        else:
            self.push_screen(self._first_screen())

    def _first_screen(self) -> Screen[Any]:
        from loopdeck.operator.links import LocalLink, ReplayLink
        from loopdeck.tui.fleet_screen import FleetScreen
        from loopdeck.tui.replay import ReplayScreen
        from loopdeck.tui.run_screen import RunScreen

        if isinstance(self.link, ReplayLink):
            return ReplayScreen(self.link, self.now)
        if self.link is not None:
            return RunScreen(self.link, self.now)
        if self.prepared is not None:
            return RunScreen(LocalLink(self.prepared, self.queue, self.db_path), self.now)
        return FleetScreen(self.db_path, self.now)

    @work(thread=True, group="prepare", exit_on_error=False, description="preparing the run")
    def _prepare_run(self) -> Screen[Any]:
        """Behind the first frame: the heavy imports, the store's check, the env and model."""
        assert self.prepare is not None
        self.prepared, self._queue = self.prepare()
        return self._first_screen()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "prepare":
            return
        if event.state is WorkerState.SUCCESS:
            self.switch_screen(cast(Screen[Any], event.worker.result))
        elif event.state is WorkerState.ERROR:
            self.launch_error = event.worker.error
            self.exit(return_code=2)  # the CLI names the error once the terminal is back

    def _launch(self, choice: tuple[str, str] | None) -> None:
        if choice is None:
            return
        self._start_local(*choice)

    def _start_local(self, path: str, script: str) -> None:
        """A new run of this console: recorded to the store, listed in the fleet, its screen
        kept while the operator looks elsewhere."""
        from loopdeck.core.scenario import ScenarioError
        from loopdeck.operator.approval_queue import StoreBackedQueue
        from loopdeck.operator.launch import RunOptions, prepare_run
        from loopdeck.operator.links import LocalLink
        from loopdeck.tui.run_screen import RunScreen

        options = RunOptions(
            env=path,
            script=script,
            model=self.launch_options.model,
            api_base=self.launch_options.api_base,
            mode=self.launch_options.mode,
            budget_overrides=dict(self.launch_options.budget_overrides),
        )
        queue = StoreBackedQueue()
        try:
            prepared = prepare_run(options, approver=queue, answerer=queue)
        except ScenarioError as exc:
            toast(self, str(exc), title="cannot start", severity="error", timeout=15)
            return
        screen = RunScreen(LocalLink(prepared, queue, self.db_path), self.now)
        run_id = prepared.runtime.config.run_id
        self.local_runs[run_id] = screen
        self._prepared_runs.append(prepared)
        self.install_screen(screen, name=f"run-{run_id}")
        self.push_screen(f"run-{run_id}")

    def new_run(self) -> None:
        from loopdeck.tui.launcher import LauncherScreen

        self.push_screen(LauncherScreen(), self._launch)

    def open_run(self, run_id: str, live: bool) -> None:
        """From the fleet: a run of this console, another process's live run, or a replay."""
        from loopdeck.operator.links import ReplayLink
        from loopdeck.operator.store_link import StoreLink
        from loopdeck.tui.replay import ReplayScreen
        from loopdeck.tui.run_screen import RunScreen

        if run_id in self.local_runs:
            self.push_screen(f"run-{run_id}")
        elif live:
            self.push_screen(RunScreen(StoreLink(self.db_path, run_id), self.now))
        else:
            self.push_screen(ReplayScreen(ReplayLink(self.db_path, run_id), self.now))

    def back_to_fleet(self) -> None:
        """Escape from a run: the fleet again; nothing stops."""
        if self.fleet_home and len(self.screen_stack) > 2:
            self.pop_screen()

    def action_inbox(self) -> None:
        from loopdeck.tui.inbox import InboxScreen

        if (self.fleet_home or self.db_path) and not isinstance(self.screen, InboxScreen):
            self.push_screen(InboxScreen(self.db_path, self.now))

    def on_unmount(self) -> None:
        self.stop_signals.remove()
        if self.prepared is not None:
            self.prepared.cleanup()
        for prepared in self._prepared_runs:
            prepared.cleanup()

    def leave_run(self, screen: RunScreen) -> None:
        """A run screen is done with: back to the launcher it came from, or out."""
        view = screen.view
        if view.run_id:
            how = view.stop_reason or f"still {view.shown_state} (detached)"
            db = f" --db {shown_location(self.db_path)}" if self.db_path else ""
            self.farewell = f"run {view.run_id} · {how} · replay: loopdeck replay {view.run_id}{db}"
        if self.fleet_home:
            while self.screen is not screen and len(self.screen_stack) > 2:
                self.pop_screen()
            if self.screen is screen:
                self.pop_screen()
            return
        self.exit(0)

    async def action_quit(self) -> None:
        """ctrl+q asks like `q` when a run is live; nothing is left to a crash record."""
        self.action_quit_run()

    def action_quit_run(self) -> None:
        if isinstance(self.screen, PreparingScreen):
            self.exit(0)  # nothing started yet: nothing to stop or record
            return
        from loopdeck.core.text import plural
        from loopdeck.tui.dialogs import ConfirmDialog

        run = self._run_screen()
        if isinstance(self.screen, ConfirmDialog) or self._quitting_all:
            return
        if run is not None:
            run.action_quit_run()
            return
        live = [screen for screen in self.local_runs.values() if screen.running]
        if not live:
            self.exit(0)
            return

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            self._quitting_all = True
            for screen in live:
                screen.link.kill(by="console (quit)")
            self.set_interval(0.05, self._exit_when_stopped)

        self.push_screen(
            ConfirmDialog(
                f"[b $error]Quit and kill {plural(len(live), 'live run')} of this console?[/]\n"
                "Each ends [b]killed[/], recorded as killed by you.\n\n"
                "[b]y[/] kill and quit   [b]n[/] keep them running"
            ),
            confirmed,
        )

    def _stop_by_signal(self, by: str) -> None:
        """A stop signal: this console's live runs are killed, recorded as killed by it, and
        the console leaves once each has recorded its stop, with the farewell line."""
        own = [s for s in self._own_runs() if s.running]
        run = self._run_screen()
        if not own and run is not None and not self.fleet_home:
            run.leave()  # its run had ended: the farewell says how
        elif isinstance(self.screen, PreparingScreen) or not own:
            self.exit(0)
        elif self.fleet_home:
            self._quitting_all = True
            for screen in own:
                screen.link.kill(by=by)
            self.set_interval(0.05, self._exit_when_stopped)
        else:
            own[0].quit_killed(by)

    def _signal_again(self, by: str) -> None:
        toast(self, f"{by}: stopping; each run is recording its stop", severity="warning")

    def _own_runs(self) -> list[RunScreen]:
        """The run screens of this process's own runs (not another process's, attached)."""
        screens: list[RunScreen] = [*self.local_runs.values()]
        screens += [
            cast("RunScreen", s) for s in self.screen_stack if getattr(s, "is_run_screen", False)
        ]
        return [s for s in dict.fromkeys(screens) if s.link.runtime is not None]

    def _exit_when_stopped(self) -> None:
        if not any(screen.running for screen in self.local_runs.values()):
            killed = ", ".join(self.local_runs)
            self.farewell = f"runs killed: {killed} · replay: loopdeck replay RUN_ID"
            self.exit(0)

    def _run_screen(self) -> RunScreen | None:
        # A duck-typed test: asked for every key's bindings, it must not import the run's
        # screen (and all it needs) before the first frame.
        for screen in reversed(self.screen_stack):
            if getattr(screen, "is_run_screen", False):
                return cast("RunScreen", screen)
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        typing = isinstance(self.focused, Input)
        if action == "inbox":
            return (self.fleet_home or self.db_path is not None) and not typing
        if action in ("run_stop", "run_kill", "run_pause"):
            run = self._run_screen()
            return run is not None and run.running and not typing
        if action == "quit_run":
            return not typing
        return True

    def action_run_stop(self) -> None:
        if run := self._run_screen():
            run.action_stop()

    def action_run_kill(self) -> None:
        from loopdeck.tui.dialogs import ConfirmKillDialog

        if (run := self._run_screen()) and not isinstance(self.screen, ConfirmKillDialog):
            run.action_kill()

    def action_run_pause(self) -> None:
        if run := self._run_screen():
            run.action_pause()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The run's own commands first; Textual's screenshot, theme picker and quit are not
        an operator's (quitting a run is `q`, which asks)."""
        run = self._run_screen()
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
        if run is not None and run.link.pending():
            yield SystemCommand(
                "approvals: open pending", "decide the waiting writes", run.action_approvals
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
                    lambda n=name: setattr(self, "theme", n),
                )
        yield SystemCommand("keys", "show every key of this screen", self.action_show_help_panel)
