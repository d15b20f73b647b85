"""The chooser (`n` on the fleet): a short "start here" list first, one sample script a thing
the console does (`launch.TOUR`); the sample envs' other scripts (misbehaviour and checks)
below, under their own heading; an env folder named in the path box on top. Enter starts the
script chosen.

Each option carries what it starts (`ScriptOption.choice`), with no id to collide. The folders
read are kept by path, so a folder read again replaces its own lines; the list is built again
from them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.css.styles import RulesMap
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from loopdeck.llm.loader import litellm_module
from loopdeck.operator.env_listing import (
    CHECKED_AT_START,
    describe_env,
    list_envs,
    refusal_words,
)
from loopdeck.operator.launch import TOUR
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup, toast
from loopdeck.tui.shown_input import ShownInput

Env = dict[str, Any]  # an env folder as `describe_env` reads it
SHOWS_WIDTH = 23  # the tour's first column: what a script shows
SCRIPT_LINE = "[b]$shows[/]$env · [b]$script[/]\n    [dim]$about[/]"
CHECKED_LINE = f"{SCRIPT_LINE}\n    [$warning]$checked[/]"  # never cut, at 80 columns too


@dataclass(frozen=True)
class Choice:
    """What Enter starts: a script of the env folder at `path`."""

    path: str
    script: str


class ScriptOption(Option):
    """A script to start."""

    def __init__(self, prompt: Content, choice: Choice) -> None:
        super().__init__(prompt)
        self.choice = choice


class RefusedOption(Option):
    """A folder or script `loopdeck run` refuses: listed so, with why in one line; enter says
    why in full and starts nothing."""

    def __init__(self, prompt: Content, why: str) -> None:
        super().__init__(OneLine(prompt))
        self.why = why


class OneLine(Visual):
    """Content drawn a line to a line, each cut with "…" where it is wider than the list."""

    def __init__(self, content: Content) -> None:
        self.content = content

    @staticmethod
    def _rules(rules: RulesMap) -> RulesMap:
        return {"text_align": rules.get("text_align", "left"), "line_pad": rules.get("line_pad", 0),
                "text_wrap": "nowrap", "text_overflow": "ellipsis"}  # fmt: skip

    def render_strips(
        self, width: int, height: int | None, style: Style, options: RenderOptions
    ) -> list[Strip]:
        kept = replace(options, rules=self._rules(options.rules))
        return self.content.render_strips(width, height, style, kept)

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return self.content.get_optimal_width(self._rules(rules), container_width)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return self.content.get_height(self._rules(rules), width)

    @property
    def plain(self) -> str:
        return self.content.plain


class SamplesListed(Message):
    """The sample envs, as `list_envs` read them (off the event loop)."""

    def __init__(self, samples: list[Env]) -> None:
        super().__init__()
        self.samples = samples


class EnvFolderRead(Message):
    """The env folder named in the path box, as `describe_env` read it."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env


def _heading(text: str) -> Option:
    return Option(markup("[b $accent]$text[/]", text=text), disabled=True)


def _script(env: Env, script: str, shows: str = "") -> Option:
    """Two lines: what it shows (the tour's), the env and the script; its description. A
    script `loopdeck run` refuses is marked so, with why in one line, and starts nothing; one
    of an env whose scripts are checked only as a run starts (`[mcp]`) says so on a third
    line, as `loopdeck envs` does."""
    shown = f"  {shows:<{SHOWS_WIDTH}}" if shows else "  "
    if (why := env.get("refused", {}).get(script)) is not None:
        said = refusal_words(env, why, script)
        prompt = markup(
            "[b]$shows[/]$env · [b]$script[/]  [b $error]refused[/]\n    [$error]$why[/]",
            shows=shown, env=env["env"], script=script, why=said,
        )  # fmt: skip
        return RefusedOption(prompt, f"{env['env']} · {script}: {said}")
    prompt = markup(
        CHECKED_LINE if env.get("checked_at_start") else SCRIPT_LINE,
        shows=shown,
        env=env["env"],
        script=script,
        about=env["scripts"][script] or "(no description)",
        checked=CHECKED_AT_START,
    )
    return ScriptOption(prompt, Choice(env["path"], script))


def _env_options(env: Env, skip: Iterable[str] = ()) -> list[Option]:
    """Each script of the env (but `skip`), or, marked refused, why the folder cannot run,
    in one line."""
    if env.get("error"):
        said = refusal_words(env, env["error"])
        label = markup(
            "  [b $error]$env[/]  [b $error]refused[/]\n    [$error]$error[/]",
            env=env["env"], error=said,
        )  # fmt: skip
        return [RefusedOption(label, f"{env['env']}: {said}")]
    skipped = set(skip)
    return [_script(env, script) for script in env["scripts"] if script not in skipped]


def _tour(samples: list[Env]) -> tuple[list[Option], dict[str, set[str]]]:
    """The "start here" lines of the stops the sample envs have, and the scripts they use,
    by env path."""
    by_folder = {Path(env["path"]).name: env for env in samples if not env.get("error")}
    lines: list[Option] = []
    used: dict[str, set[str]] = {}
    for stop in TOUR:
        env = by_folder.get(stop.env)
        if env is not None and stop.script in env["scripts"]:
            lines.append(_script(env, stop.script, stop.shows))
            used.setdefault(env["path"], set()).add(stop.script)
    return lines, used


def chooser_options(folders: Iterable[Env], samples: list[Env]) -> list[Option | None]:
    """The chooser's lines: the operator's env folders (newest first), the tour, the rest."""
    options: list[Option | None] = []
    for env in folders:
        options += [_heading(f"Your env folder · {env['path']}"), *_env_options(env), None]
    tour, used = _tour(samples)
    if tour:
        options += [_heading("Start here: one script for each thing the console does"), *tour]
    rest = [line for env in samples for line in _env_options(env, used.get(env["path"], ()))]
    if rest:
        options += [None] if tour else []
        options += [_heading("More scripts: misbehaviour and checks"), *rest]
    return options


def _reading() -> Option:
    return Option(markup("  [dim]$text[/]", text="reading envs…"), disabled=True)


def folder_problem(path: str, why: str) -> str:
    """What keeps an env folder from being listed, the file it names first and short (`~` for
    the home folder, the folder said once): a toast at 80 columns keeps its first lines."""
    home = str(Path.home())
    shown = f"~{path[len(home) :]}" if path.startswith(home + "/") else path
    said = why.replace(path, shown)
    return said if said.startswith(shown) else f"{shown}: {said}"


class LauncherScreen(Screen[tuple[str, str]]):
    """The sample envs and their scripts (`n` on the fleet). Dismisses with (env path, script);
    the store's runs are the fleet's to list."""

    BINDINGS = [
        Binding("q", "app.quit", "Quit", id="launcher.quit"),
        Binding("escape", "back", "Back", id="launcher.back"),
        Binding("slash", "folder", "Env folder…", id="launcher.folder"),
    ]

    def __init__(self, path_typed: str = "", again: Choice | None = None) -> None:
        """`path_typed`: the path box's text when the chooser last closed; `again`: the script
        whose start failed then, offered again (its folder read again: an edit shows)."""
        super().__init__()
        self.samples: list[Env] | None = None  # None until listed, off the loop
        self.folders: dict[str, Env] = {}  # read in the path box, by resolved path, newest first
        self.path_typed = path_typed
        self.again = again

    def compose(self) -> ComposeResult:
        yield Static(
            "[b]loopdeck[/] — choose an env and a script, then [b]enter[/]: the offline"
            " scripted model plays it; writes wait for you.",
            id="launcher-intro",
        )
        yield OptionList(*self._options(), id="launcher-list")
        yield ShownInput(
            self.path_typed,
            placeholder="/ an env folder of your own: its path, then enter lists its scripts",
            id="launcher-path",
        )
        yield KeysBar()

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._list_samples()
        self._load_model_library()

    @property
    def listed(self) -> bool:
        """The sample envs are read and listed."""
        return self.samples is not None

    def _options(self) -> list[Option | None]:
        """The chooser's lines; "reading envs…" below them while the samples are read."""
        options = chooser_options(self.folders.values(), self.samples or [])
        return options if self.samples is not None else [*options, _reading()]

    @work(thread=True, group="env-listing", exit_on_error=False, description="list the envs")
    def _list_samples(self) -> None:
        """Each folder's scenario, env code and scripts are read and checked: off the loop,
        so the keys answer meanwhile."""
        self.post_message(SamplesListed(list_envs()))

    @on(SamplesListed)
    def _samples_listed(self, event: SamplesListed) -> None:
        """Listed under the folders read meanwhile; the line chosen meanwhile kept, else the
        first script; the script whose start failed chosen again (its folder read again when
        it is not a sample's)."""
        listed = self.query_one(OptionList)
        kept = self._chosen_now()
        self.samples = event.samples
        listed.set_options(self._options())
        if kept is not None:
            listed.highlighted = self.index_of(kept.path, kept.script)
        else:
            listed.highlighted = self._first_script()
        again = self.again
        if again is not None and (index := self.index_of(again.path, again.script)) is not None:
            listed.highlighted, self.again = index, None  # a sample's script
        elif again is not None:
            self._read_folder(Path(again.path))

    def _chosen_now(self) -> Choice | None:
        listed = self.query_one(OptionList)
        if listed.highlighted is None:
            return None
        option = listed.get_option_at_index(listed.highlighted)
        return option.choice if isinstance(option, ScriptOption) else None

    def on_input_changed(self, event: Input.Changed) -> None:
        self.path_typed = event.value

    def _first_script(self, path: str | None = None) -> int | None:
        """The index of the first script listed (of the folder at `path`, if given)."""
        listed = self.query_one(OptionList)
        for index in range(listed.option_count):
            option = listed.get_option_at_index(index)
            if isinstance(option, ScriptOption) and path in (None, option.choice.path):
                return index
        return None

    @work(thread=True, group="litellm", exit_on_error=False, description="import LiteLLM")
    def _load_model_library(self) -> None:
        """While the operator chooses, so a run starts without waiting for the import."""
        litellm_module()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        failed = worker_failed(self, event, title="launcher")
        if failed and event.worker.group == "env-listing":  # said: no longer "reading envs…"
            self.samples = []
            self.query_one(OptionList).set_options(self._options())

    def action_back(self) -> None:
        if self.focused is self.query_one("#launcher-path"):
            self.query_one(OptionList).focus()
        elif len(self.app.screen_stack) > 2:
            self.dismiss(None)

    def action_folder(self) -> None:
        self.query_one("#launcher-path").focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "folder":
            return not isinstance(self.focused, Input)
        return True

    @on(Input.Submitted, "#launcher-path")
    def _folder_named(self, event: Input.Submitted) -> None:
        if text := event.value.strip():
            self._read_folder(Path(text).expanduser().absolute())

    @work(thread=True, group="env-folder", exclusive=True, exit_on_error=False,
          description="read an env folder")  # fmt: skip
    def _read_folder(self, path: Path) -> None:
        """Its env code is imported here, off the event loop."""
        self.post_message(EnvFolderRead(describe_env(path)))

    @on(EnvFolderRead)
    def _folder_read(self, event: EnvFolderRead) -> None:
        env = event.env
        if env.get("error") or not env["scripts"]:
            why = env.get("error") or "it has no scripts for the offline model to play"
            toast(self, folder_problem(env["path"], why), title="cannot list", severity="error",
                  timeout=15)  # fmt: skip
            return
        key = str(Path(env["path"]).resolve())
        self.folders.pop(key, None)  # read again: its lines replaced, moved to the top
        self.folders = {key: env, **self.folders}
        listed = self.query_one(OptionList)
        listed.set_options(self._options())
        listed.highlighted = self._first_script(env["path"])
        again, self.again = self.again, None
        if again is not None and again.path == env["path"] and again.script in env["scripts"]:
            listed.highlighted = self.index_of(again.path, again.script)
        listed.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if isinstance(event.option, ScriptOption):
            self.dismiss((event.option.choice.path, event.option.choice.script))
        elif isinstance(event.option, RefusedOption):  # why, in full; nothing starts
            toast(self, event.option.why, title="refused by loopdeck run", severity="error",
                  timeout=15)  # fmt: skip

    def index_of(self, env: str, script: str) -> int | None:
        """The line that starts `script` of the env named `env` (its name or its folder's),
        the first one listed: a test's way to choose."""
        listed = self.query_one(OptionList)
        for index in range(listed.option_count):
            option = listed.get_option_at_index(index)
            if not isinstance(option, ScriptOption) or option.choice.script != script:
                continue
            if env in (Path(option.choice.path).name, option.choice.path):
                return index
        return None
