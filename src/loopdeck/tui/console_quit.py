"""How the console is left: `q` (asked first when a run is live), a stop signal, and the
farewell line the terminal shows once the console is gone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from loopdeck.tui.preparing import PreparingScreen
from loopdeck.tui.shown import toast

if TYPE_CHECKING:
    from loopdeck.operator.runview import RunView
    from loopdeck.tui.console_state import ConsoleState
    from loopdeck.tui.run_screen import RunScreen


def leave_run(app: ConsoleState, screen: Screen[None], view: RunView) -> None:
    """A run screen is done with: back to the fleet it came from, or out, with a farewell
    line from its view."""
    if view.run_id:
        from loopdeck.operator.records import shown_location

        how = view.stop_reason or f"still {view.shown_state} (detached)"
        db = f" --db {shown_location(app.db_path)}" if app.db_path else ""
        app.farewell = f"run {view.run_id} · {how} · replay: loopdeck replay {view.run_id}{db}"
    if app.shared.fleet_home:
        while app.screen is not screen and len(app.screen_stack) > 2:
            app.pop_screen()
        if app.screen is screen:
            app.pop_screen()
        return
    app.exit(0)


def quit_run(app: ConsoleState) -> None:
    """`q`: the run's own quit on a run screen; from the fleet, this console's live runs are
    killed once the operator says yes."""
    if isinstance(app.screen, PreparingScreen):
        app.exit(0)  # nothing started yet: nothing to stop or record
        return
    from loopdeck.core.text import plural
    from loopdeck.tui.dialogs import ConfirmDialog

    run = app.shown_run()
    if isinstance(app.screen, ConfirmDialog) or app.quitting_all:
        return
    if run is not None:
        run.action_quit_run()
        return
    live = [screen for screen in app.local_runs.values() if screen.running]
    if not live:
        app.exit(0)
        return

    def confirmed(yes: bool | None) -> None:
        if yes:
            _kill_all_then_exit(app, live, by="console (quit)")

    app.push_screen(
        ConfirmDialog(
            f"[b $error]Quit and kill {plural(len(live), 'live run')} of this console?[/]\n"
            "Each ends [b]killed[/], recorded as killed by you.\n\n"
            "[b]y[/] kill and quit   [b]n[/] keep them running"
        ),
        confirmed,
    )


def stop_by_signal(app: ConsoleState, by: str) -> None:
    """A stop signal: this console's live runs are killed, recorded as killed by it, and
    the console leaves once each has recorded its stop, with the farewell line."""
    own = [s for s in _own_runs(app) if s.running]
    run = app.shown_run()
    if not own and run is not None and not app.shared.fleet_home:
        run.leave()  # its run had ended: the farewell says how
    elif isinstance(app.screen, PreparingScreen) or not own:
        app.exit(0)
    elif app.shared.fleet_home:
        _kill_all_then_exit(app, own, by=by)
    else:
        own[0].quit_killed(by)


def signal_again(app: ConsoleState, by: str) -> None:
    toast(app, f"{by}: stopping; each run is recording its stop", severity="warning")


def _kill_all_then_exit(app: ConsoleState, screens: list[RunScreen], by: str) -> None:
    """Only these, live when the quit came, are said in the farewell: runs that had ended
    before (goal met, cancelled) were not killed by it."""
    app.quitting_all = True
    for screen in screens:
        screen.link.kill(by=by)
    app.set_interval(0.05, lambda: _exit_when_stopped(app, screens))


def _own_runs(app: ConsoleState) -> list[RunScreen]:
    """The run screens of this process's own runs (not another process's, attached)."""
    screens = [*app.local_runs.values(), *app.shown_runs()]
    return [s for s in dict.fromkeys(screens) if s.link.runtime is not None]


def _exit_when_stopped(app: ConsoleState, screens: list[RunScreen]) -> None:
    if not any(screen.running for screen in app.local_runs.values()):
        # One that reached its own stop as the kill came is not said killed.
        killed = [s.view.run_id for s in screens if s.view.stop_reason in (None, "killed")]
        if killed:
            from loopdeck.core.text import plural
            from loopdeck.operator.records import shown_location

            which = killed[0] if len(killed) == 1 else "ID"
            db = f" --db {shown_location(app.db_path)}" if app.db_path else ""
            app.farewell = (
                f"{plural(len(killed), 'run')} killed: {', '.join(killed)}"
                f" · replay: loopdeck replay {which}{db}"
            )
        app.exit(0)
