"""What the console opens on, and how it opens: its themes, its stylesheet, its first
screen, and a run started from the fleet.

Light on purpose, like `loopdeck.tui.app`: the run's own modules are imported where they are
first needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.screen import Screen

from loopdeck.tui.shown import toast
from loopdeck.tui.themes import DEFAULT_THEME, is_theme_path, load_theme, load_themes, theme_folders

# The console's stylesheet: its screens' and dialogs' rules (theme variables only).
STYLES = Path(__file__).with_name("loopdeck.tcss")

if TYPE_CHECKING:
    from loopdeck.operator.links import RunLink
    from loopdeck.tui.console_state import ConsoleState
    from loopdeck.tui.run_screen import RunScreen


def apply_themes(app: ConsoleState) -> None:
    """Register the themes and choose the requested one (a name or a file); each problem
    kept (`tell_theme_problems` says it): the console opens in the default theme rather than
    not at all. Called as the app is made, before it runs (`open_in`); again as it composes
    if what it was asked for changed meanwhile (then as any theme change)."""
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
    app.themes_from = (requested, app.themes_folder)
    if app.is_running:
        app.theme = chosen
    else:
        open_in(app, chosen)


def open_in(app: ConsoleState, name: str) -> None:
    """The theme the app opens in, set before it runs without Textual's watcher: the watcher
    parses every rule of the stylesheet again once the app runs (~10 ms of its first frame,
    in a frame that parses them anyway). What the watcher does to the app is done here:
    its classes, its ANSI colours, the stylesheet's variables."""
    app.set_reactive(App.theme, name)
    theme = app.current_theme
    classes = {c: False for c in app.classes if c.startswith("-theme-")}
    classes.update({f"-theme-{theme.name}": True, "-dark-mode": theme.dark})
    classes["-light-mode"] = not theme.dark
    app.update_classes(classes, update=False)
    app._refresh_truecolor_filter(app.ansi_theme)  # Textual's own step of a theme change
    app.stylesheet.set_variables(app.get_css_variables())


def read_styles(app: App[Any]) -> None:
    """The console's stylesheet, read once, as Textual reads an app's CSS_PATH (watched with
    `--dev`), but not before the first frame: `loopdeck run` paints its preparing screen
    first, which none of its rules styles otherwise than Textual's own (its 472 lines parsed:
    15-25 ms on a loaded 2-core machine). Read before any other screen is pushed; nodes
    styled meanwhile are styled again."""
    if app.stylesheet.has_source(str(STYLES), ""):
        return
    if app.css_monitor is not None:
        app.css_monitor.add_paths([STYLES])
    app.stylesheet.read(STYLES)
    app.stylesheet.update(app)


def tell_theme_problems(app: ConsoleState) -> None:
    """Each theme problem said once, as the console is mounted; and what the command had
    to say as it opened the console (a store it made)."""
    for problem in app.theme_problems:
        toast(app, problem, title="theme", severity="error", timeout=15)
    tell_store_made(app, app.said_at_start)


def tell_store_made(app: App[Any], said: tuple[str, ...]) -> None:
    """A store the command made where `--db` pointed (`made_store`), said as news, not
    trouble: as the console opens, or, for `loopdeck run`, once its preparation made it."""
    for words in said:
        toast(app, words, title="store", severity="information", timeout=8)


def first_screen(app: ConsoleState) -> Screen[None]:
    """The screen the console opens on, once its run (if any) is prepared: only that
    screen's modules are imported (a run's console never imports the fleet's)."""
    if app.link is not None:
        return run_screen_for(app, app.link)
    if app.session is not None:
        return run_screen_for(app, app.session.link())
    from loopdeck.tui.fleet_screen import FleetScreen

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


def start_local(app: ConsoleState, path: str, script: str) -> bool:
    """A new run of this console: recorded to the store, listed in the fleet, its screen
    kept while the operator looks elsewhere. False when it cannot start: whatever `loopdeck
    run` refuses with exit 2 (a scenario, a policy file, a model's missing key, the store) is
    said in a toast, the console kept."""
    from loopdeck.core.scenario import ScenarioError
    from loopdeck.llm.client import MissingCredentials
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.records import StoreError
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
    except (ScenarioError, ValueError, StoreError, MissingCredentials) as exc:
        toast(app, str(exc), title="cannot start", severity="error", timeout=15)
        return False
    screen = run_screen_for(app, session.link())
    run_id = prepared.runtime.config.run_id
    app.local_runs[run_id] = screen
    app.prepared_runs.append(prepared)
    app.install_screen(screen, name=f"run-{run_id}")
    app.push_screen(f"run-{run_id}")
    return True
