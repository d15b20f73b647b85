"""What the console opens on, and how it opens: its themes, its first screen, and a run
started from the fleet.

Light on purpose, like `loopdeck.tui.app`: the run's own modules are imported where they are
first needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual.screen import Screen

from loopdeck.tui.shown import toast
from loopdeck.tui.themes import DEFAULT_THEME, is_theme_path, load_theme, load_themes, theme_folders

if TYPE_CHECKING:
    from loopdeck.operator.links import RunLink
    from loopdeck.tui.console_state import ConsoleState
    from loopdeck.tui.run_screen import RunScreen


def apply_themes(app: ConsoleState) -> None:
    """Register the themes, choose the requested one (a name or a file), and say each
    problem once: the console opens in the default theme rather than not at all."""
    requested = app.requested_theme
    as_file = Path(requested).expanduser() if requested and is_theme_path(requested) else None
    loaded = load_themes(app.themes_folder)
    for theme in loaded.themes:
        app.register_theme(theme)
    app.theme_problems = list(loaded.problems)
    chosen = DEFAULT_THEME if loaded.resolve(DEFAULT_THEME) else "textual-dark"
    if as_file is not None:
        try:
            from_file = load_theme(as_file)
            app.register_theme(from_file)
            chosen = from_file.name
        except Exception as exc:  # named with its file; the console opens in the default
            app.theme_problems.append(f"theme file {as_file}: {type(exc).__name__}: {exc}")
    elif requested:
        resolved = loaded.resolve(requested)
        if resolved is None:
            known = ", ".join(t.name for t in loaded.themes) or "(none)"
            folders = ", ".join(str(f) for f in theme_folders())
            app.theme_problems.append(
                f"unknown theme {requested!r}; themes: {known} (read from {folders})"
            )
        else:
            chosen = resolved
    app.theme = chosen
    for problem in app.theme_problems:
        toast(app, problem, title="theme", severity="error", timeout=15)


def first_screen(app: ConsoleState) -> Screen[None]:
    """The screen the console opens on, once its run (if any) is prepared."""
    from loopdeck.tui.fleet_screen import FleetScreen

    if app.link is not None:
        return run_screen_for(app, app.link)
    if app.session is not None:
        return run_screen_for(app, app.session.link())
    return FleetScreen(app.db_path, app.now, app.shared, bell=app.bell_enabled)


def run_screen_for(app: ConsoleState, link: RunLink) -> RunScreen:
    """A run's screen (a finished run's replay for a `ReplayLink`), sharing the console's
    state; from now on the app knows run screens in its stack."""
    from loopdeck.operator.links import ReplayLink
    from loopdeck.tui.replay import ReplayScreen
    from loopdeck.tui.run_screen import RunScreen

    app.run_screen_type = RunScreen
    if isinstance(link, ReplayLink):
        return ReplayScreen(link, app.now, app.shared)
    return RunScreen(link, app.now, app.shared)


def start_local(app: ConsoleState, path: str, script: str) -> None:
    """A new run of this console: recorded to the store, listed in the fleet, its screen
    kept while the operator looks elsewhere."""
    from loopdeck.core.scenario import ScenarioError
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.session import RunSession

    options = RunOptions(
        env=path,
        script=script,
        model=app.launch_options.model,
        api_base=app.launch_options.api_base,
        mode=app.launch_options.mode,
        budget_overrides=dict(app.launch_options.budget_overrides),
        notify=app.launch_options.notify,
    )
    session = RunSession(app.db_path, console=True)
    try:
        prepared = session.prepare(options)
    except ScenarioError as exc:
        toast(app, str(exc), title="cannot start", severity="error", timeout=15)
        return
    screen = run_screen_for(app, session.link())
    run_id = prepared.runtime.config.run_id
    app.local_runs[run_id] = screen
    app.prepared_runs.append(prepared)
    app.install_screen(screen, name=f"run-{run_id}")
    app.push_screen(f"run-{run_id}")
