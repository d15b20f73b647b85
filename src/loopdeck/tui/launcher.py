"""The launcher: the sample envs and their scripts; Enter starts one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from loopdeck.llm.loader import litellm_module
from loopdeck.operator.launch import list_envs
from loopdeck.store import queries
from loopdeck.store.database import Store
from loopdeck.store.queries import local_time


class LauncherScreen(Screen[tuple[str, str]]):
    """Sample envs to start, and the store's runs to attach to (live) or replay (finished).

    Dismisses with (env path, script), ("attach", run id) or ("replay", run id).
    """

    BINDINGS = [
        Binding("q", "app.quit", "Quit", id="launcher.quit"),
        Binding("escape", "back", "Back", id="launcher.back"),
    ]

    def __init__(self, db_path: Path | None = None, *, runs: bool = True) -> None:
        super().__init__()
        self.db_path = db_path
        self.show_runs = runs  # from the fleet, the runs are already listed there

    def compose(self) -> ComposeResult:
        yield Static(
            "[b]loopdeck[/] — choose an env and a script, then press [b]enter[/]. "
            "The offline scripted model plays it; writes wait for your approval.",
            id="launcher-intro",
        )
        options: list[Option] = []
        for env in list_envs():
            if env.get("error"):
                options.append(
                    Option(
                        f"[b $error]{escape(env['env'])}[/]  {escape(env['error'])}", disabled=True
                    )
                )
                continue
            for script, description in env["scripts"].items():
                name, about = escape(env["env"]), escape(description)
                label = f"[b]{name}[/] · {escape(script):<16} [dim]{about}[/]"
                options.append(Option(label, id=f"{env['path']}\n{script}"))
        yield OptionList(*options, id="launcher-list")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._load_model_library()
        if self.db_path is not None and self.show_runs:
            self._load_runs()

    @work(thread=True, group="litellm", exit_on_error=False, description="import LiteLLM")
    def _load_model_library(self) -> None:
        """While the operator chooses, so a run starts without waiting for the import."""
        litellm_module()

    @work(group="launcher", exclusive=True, exit_on_error=False, description="list stored runs")
    async def _load_runs(self) -> list[dict[str, Any]]:
        store = await Store.open(self.db_path)
        try:
            return await queries.list_runs(store)
        finally:
            await store.close()

    @on(Worker.StateChanged)
    def _runs_loaded(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "launcher":
            return
        if event.state is WorkerState.ERROR:
            self.notify(str(event.worker.error), title="store", severity="error", timeout=15)
            return
        if event.state is not WorkerState.SUCCESS or not event.worker.result:
            return
        options = self.query_one(OptionList)
        options.add_option(Option(f"[b]runs in {escape(str(self.db_path))}[/]", disabled=True))
        for run in reversed(event.worker.result[-200:]):
            live = run["state"] not in ("complete", "stopped")
            verb = "attach" if live else "replay"
            outcome = run["state"] if live else run["stop_reason"]
            label = (
                f"{verb:<6} [b]{run['run_id']}[/] · {escape(str(run['env']))}/"
                f"{escape(str(run['script']))} · {outcome} · {local_time(run['started_at'])}"
            )
            options.add_option(Option(label, id=f"{verb}\n{run['run_id']}"))

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.dismiss(None)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            path, script = event.option.id.split("\n", 1)
            self.dismiss((path, script))
