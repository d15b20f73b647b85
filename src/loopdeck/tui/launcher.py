"""The launcher: the sample envs and their scripts, and any env folder named in its path
box; Enter starts one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from loopdeck.llm.loader import litellm_module
from loopdeck.operator.launch import describe_env, list_envs
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup, toast
from loopdeck.tui.shown_input import ShownInput


class EnvFolderRead(Message):
    """The env folder named in the path box, as `describe_env` read it."""

    def __init__(self, env: dict[str, Any]) -> None:
        super().__init__()
        self.env = env


def _options(env: dict[str, Any]) -> list[Option]:
    """One option a script (its id: the env's path and the script), or the env's error."""
    if env.get("error"):
        label = markup("[b $error]$env[/]  $error", env=env["env"], error=env["error"])
        return [Option(label, disabled=True)]
    return [
        Option(
            markup("[b]$env[/] · $script [dim]$about[/]", env=env["env"],
                   script=f"{script:<16}", about=description),
            id=f"{env['path']}\n{script}",
        )
        for script, description in env["scripts"].items()
    ]  # fmt: skip


class LauncherScreen(Screen[tuple[str, str]]):
    """The sample envs and their scripts (`n` on the fleet). Dismisses with (env path, script);
    the store's runs are the fleet's to list."""

    BINDINGS = [
        Binding("q", "app.quit", "Quit", id="launcher.quit"),
        Binding("escape", "back", "Back", id="launcher.back"),
        Binding("slash", "folder", "Env folder…", id="launcher.folder"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(
            "[b]loopdeck[/] — choose an env and a script, then press [b]enter[/]. "
            "The offline scripted model plays it; writes wait for your approval.",
            id="launcher-intro",
        )
        options = [option for env in list_envs() for option in _options(env)]
        yield OptionList(*options, id="launcher-list")
        yield ShownInput(
            placeholder="/ an env folder of your own: its path, then enter lists its scripts",
            id="launcher-path",
        )
        yield KeysBar()

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._load_model_library()

    @work(thread=True, group="litellm", exit_on_error=False, description="import LiteLLM")
    def _load_model_library(self) -> None:
        """While the operator chooses, so a run starts without waiting for the import."""
        litellm_module()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker_failed(self, event, title="launcher")

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
            toast(self, f"{env['path']}: {why}", title="cannot list", severity="error",
                  timeout=15)  # fmt: skip
            return
        listed = self.query_one(OptionList)
        options = _options(env)
        listed.add_options(options)
        listed.highlighted = listed.option_count - len(options)
        listed.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            path, script = event.option.id.split("\n", 1)
            self.dismiss((path, script))
