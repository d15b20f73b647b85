"""What the console opens on, and how it opens: its themes, its first screen, and a run
started from the fleet.

Light on purpose, like `loopdeck.tui.app`: the run's own modules are imported where they are
first needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.screen import Screen

from loopdeck.tui.shown import toast
from loopdeck.tui.themes import DEFAULT_THEME, is_theme_path, load_theme, load_themes, theme_folders

if TYPE_CHECKING:
    from loopdeck.tui.console_state import ConsoleState


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


def first_screen(app: ConsoleState) -> Screen[Any]:
    """The screen the console opens on, once its run (if any) is prepared."""
    from loopdeck.operator.links import ReplayLink
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.replay import ReplayScreen
    from loopdeck.tui.run_screen import RunScreen

    if isinstance(app.link, ReplayLink):
        return ReplayScreen(app.link, app.now)
    if app.link is not None:
        return RunScreen(app.link, app.now)
    if app.session is not None:
        return RunScreen(app.session.link(), app.now)
    return FleetScreen(app.db_path, app.now)


def start_local(app: ConsoleState, path: str, script: str) -> None:
    """A new run of this console: recorded to the store, listed in the fleet, its screen
    kept while the operator looks elsewhere."""
    from loopdeck.core.scenario import ScenarioError
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.session import RunSession
    from loopdeck.tui.run_screen import RunScreen

    options = RunOptions(
        env=path,
        script=script,
        model=app.launch_options.model,
        api_base=app.launch_options.api_base,
        mode=app.launch_options.mode,
        budget_overrides=dict(app.launch_options.budget_overrides),
    )
    session = RunSession(app.db_path, console=True)
    try:
        prepared = session.prepare(options)
    except ScenarioError as exc:
        toast(app, str(exc), title="cannot start", severity="error", timeout=15)
        return
    screen = RunScreen(session.link(), app.now)
    run_id = prepared.runtime.config.run_id
    app.local_runs[run_id] = screen
    app.prepared_runs.append(prepared)
    app.install_screen(screen, name=f"run-{run_id}")
    app.push_screen(f"run-{run_id}")
