"""The launcher: the sample envs and their scripts; Enter starts one."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from loopdeck.llm.loader import litellm_module
from loopdeck.operator.launch import list_envs
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup


class LauncherScreen(Screen[tuple[str, str]]):
    """The sample envs and their scripts (`n` on the fleet). Dismisses with (env path, script);
    the store's runs are the fleet's to list."""

    BINDINGS = [
        Binding("q", "app.quit", "Quit", id="launcher.quit"),
        Binding("escape", "back", "Back", id="launcher.back"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(
            "[b]loopdeck[/] — choose an env and a script, then press [b]enter[/]. "
            "The offline scripted model plays it; writes wait for your approval.",
            id="launcher-intro",
        )
        options: list[Option] = []
        for env in list_envs():
            if env.get("error"):
                label = markup("[b $error]$env[/]  $error", env=env["env"], error=env["error"])
                options.append(Option(label, disabled=True))
                continue
            for script, description in env["scripts"].items():
                label = markup(
                    "[b]$env[/] · $script [dim]$about[/]",
                    env=env["env"],
                    script=f"{script:<16}",
                    about=description,
                )
                options.append(Option(label, id=f"{env['path']}\n{script}"))
        yield OptionList(*options, id="launcher-list")
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
        if len(self.app.screen_stack) > 2:
            self.dismiss(None)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            path, script = event.option.id.split("\n", 1)
            self.dismiss((path, script))
