"""The console's structure, read from the source: screens talk to the app by messages and read
typed state, never by reaching into the app, a screen or a link by name.

- no `getattr`/`setattr`/`hasattr`/`delattr` on the app, a screen or a link anywhere in
  `tui/` (what was read so is a typed attribute now: `SharedState`, `link_facets`);
- outside the console's own modules (`app`, `console_*`), the app is used only through
  Textual's `App`: a screen asks the console by posting a message (`console_messages`);
- the run screen is one class whose concerns are parts it holds, not classes it inherits.

Read with `ast`, as `test_layers.py` reads the imports: a use inside a function counts.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from pathlib import Path

import pytest
from textual.app import App
from textual.screen import Screen

TUI = Path(__file__).resolve().parent.parent / "src" / "loopdeck" / "tui"
BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})
# What a name that ends so holds: the app, a screen, a link (`self.app`, `app`, `self._link`).
CONSOLE_OBJECTS = ("app", "screen", "link")
# The modules that are the console itself: they hold its state and may read it.
CONSOLE_MODULES = frozenset({"app", "console_state", "console_start", "console_quit"})
CONSOLE_MODULES |= {"console_failure"}


def _named(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_console_object(name: str) -> bool:
    return name.lstrip("_").endswith(CONSOLE_OBJECTS)


def _screens_iterated(tree: ast.AST) -> set[str]:
    """Names bound by a loop over a stack of screens (`for s in app.screen_stack`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.comprehension | ast.For):
            continue
        over_screens = any(
            "screen" in _named(n) for n in ast.walk(node.iter) if isinstance(n, ast.expr)
        )
        if over_screens and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def reaches_by_name(source: str, console_classes: frozenset[str]) -> list[tuple[int, str]]:
    """Each `getattr`/`setattr`/... whose object is the app, a screen or a link: a name or an
    attribute ending in one of those, a screen of a stack, or `self` in a class that is an app
    or a screen."""
    tree = ast.parse(source)
    iterated = _screens_iterated(tree)
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_console_class: bool) -> None:
        if isinstance(node, ast.ClassDef):
            in_console_class = node.name in console_classes
        if isinstance(node, ast.Call) and _named(node.func) in BY_NAME and node.args:
            target = node.args[0]
            name = _named(target)
            is_self = isinstance(target, ast.Name) and name == "self" and in_console_class
            if _is_console_object(name) or name in iterated or is_self:
                found.append((node.lineno, f"{_named(node.func)}({ast.unparse(target)}, ...)"))
        for child in ast.iter_child_nodes(node):
            visit(child, in_console_class)

    visit(tree, False)
    return found


def app_attributes_used(source: str) -> list[tuple[int, str]]:
    """Every `<something>.app.NAME` read or called."""
    return [
        (node.lineno, node.attr)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and _named(node.value) == "app"
    ]


@functools.cache
def console_classes() -> frozenset[str]:
    """The classes of `tui/` that are an app or a screen (their `self` is one)."""
    names = set()
    for path in sorted(TUI.glob("*.py")):
        module = importlib.import_module(f"loopdeck.tui.{path.stem}")
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) == module.__name__
            if inspect.isclass(value) and defined_here and issubclass(value, App | Screen):
                names.add(name)
    return frozenset(names)


def test_nothing_in_the_console_reaches_the_app_a_screen_or_a_link_by_name() -> None:
    bad = [
        f"src/loopdeck/tui/{path.name}:{line}: {call}"
        for path in sorted(TUI.glob("*.py"))
        for line, call in reaches_by_name(path.read_text(encoding="utf-8"), console_classes())
    ]
    if bad:
        pytest.fail(
            "the app, a screen or a link reached by name (post a message, read `SharedState` "
            "or a typed attribute):\n" + "\n".join(bad)
        )


def test_screens_and_widgets_use_only_textuals_app() -> None:
    """What a screen asks of the console is a message; it reads `SharedState`. So outside
    the console's own modules, `.app.` is only Textual's `App`."""
    textual_app = set(dir(App[None]()))  # read without calling: a property may raise here
    bad = [
        f"src/loopdeck/tui/{path.name}:{line}: .app.{name}"
        for path in sorted(TUI.glob("*.py"))
        if path.stem not in CONSOLE_MODULES
        for line, name in app_attributes_used(path.read_text(encoding="utf-8"))
        if name not in textual_app
    ]
    if bad:
        pytest.fail("the console's own state read from a screen or a widget:\n" + "\n".join(bad))


def test_the_run_screen_is_one_class_of_parts_not_a_chain_of_mixins() -> None:
    from loopdeck.tui.replay import ReplayScreen
    from loopdeck.tui.run_screen import RunScreen

    ours = [cls for cls in RunScreen.__mro__ if cls.__module__.startswith("loopdeck")]
    assert ours == [RunScreen]
    assert [c for c in ReplayScreen.__mro__ if c.__module__.startswith("loopdeck")] == [
        ReplayScreen,
        RunScreen,
    ]


# The checker itself: each form the console used to reach by name is caught.


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("def f(self):\n    getattr(self.app, 'back_to_fleet', None)\n", "getattr(self.app"),
        ("def f(self, by):\n    setattr(self.app, 'waiting_by_run', by)\n", "setattr(self.app"),
        ("def f(screen):\n    return getattr(screen, 'is_run_screen', False)\n", "getattr(screen"),
        (
            "def f(app):\n    return [s for s in app.screen_stack if getattr(s, 'x', 0)]\n",
            "getattr(s,",
        ),
        ("def f(self):\n    return getattr(self.link, 'phase', '')\n", "getattr(self.link"),
        ("def f(self):\n    return hasattr(self._link, 'close')\n", "hasattr(self._link"),
        (
            "class Console(App):\n    def f(self, n):\n        setattr(self, 'theme', n)\n",
            "setattr(self,",
        ),
    ],
)
def test_the_checker_catches_each_reach_by_name(source: str, caught: str) -> None:
    [(_, call)] = reaches_by_name(source, frozenset({"Console"}))
    assert call.startswith(caught)


def test_the_checker_leaves_a_widgets_own_cache_alone() -> None:
    source = "def paint(widget):\n    return getattr(widget, '_painted', None)\n"
    source += "class Panel(Static):\n    def f(self):\n        return getattr(self, 'x', 0)\n"
    assert reaches_by_name(source, frozenset({"Console"})) == []


def test_the_checker_sees_the_consoles_own_state_read_from_a_screen() -> None:
    used = app_attributes_used("def f(self):\n    self.app.seen_runs.add(1)\n    self.app.bell()\n")
    textual_app = set(dir(App[None]()))
    assert [name for _, name in used if name not in textual_app] == ["seen_runs"]
