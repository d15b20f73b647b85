"""`f` on a call of the run screen: fork the run there (`loopdeck fork RUN --at CALL`). The
dialog names the call and the fork point (the model turn that proposed it, asked again) and
takes what the fork changes, each optional: the model, the script (the env's own offered,
where its scenario.toml can be read), a message the agent hears at the fork. Enter forks, esc
cancels; the fork itself is made by the screen (`RunDecisions.fork`), off the UI's path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static
from textual.worker import Worker

from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import short_args, visible
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shown import markup
from loopdeck.tui.shown_input import ShownInput

KEYS = "[b]enter[/] Fork   [b]tab[/] next field   [b]esc[/] Cancel"
POINT = (
    "[b]Fork at $call[/] · $tool($args)\n"
    "fork point: the model turn of round $round that proposed it, asked again with what you "
    "change here. The replies before it are served again (no call, no cost); the fork is "
    "queued for a worker ([b]loopdeck worker[/])."
)


@dataclass(frozen=True)
class ForkAsked:
    """What the fork changes; None keeps the run's."""

    model: str | None = None
    script: str | None = None
    message: str | None = None


def env_scripts(env: str) -> tuple[list[str], str]:
    """The scripts of the run's env (by path, or a sample env's name), or why they cannot be
    read here (an empty list: any name is taken, the fork's worker checks it)."""
    from loopdeck.core.scenario import ScenarioError, load_scenario
    from loopdeck.operator.launch import sample_envs_root

    if not env:
        return [], "the run names no env"
    path = Path(env).expanduser()
    if not path.is_dir():
        path = sample_envs_root() / env
    try:
        scenario = load_scenario(path / "scenario.toml")
    except (ScenarioError, OSError) as exc:
        return [], f"its env's scripts cannot be read here ({exc})"
    return sorted(scenario.scripts), ""


def kept(value: str) -> str:
    """A field's placeholder: what the fork keeps when it is left empty."""
    return visible(f"the run's: {value or 'none'}")


class ForkDialog(ModalScreen[ForkAsked | None]):
    """The call to fork at and the fork's changes; dismissed with them (enter), or None."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="fork.close")]
    AUTO_FOCUS = "#fork-model"

    def __init__(self, run_id: str, call: CallRecord, env: str, model: str, script: str) -> None:
        super().__init__(classes="dialog")
        self.run_id = run_id
        self.call = call
        self.env = env
        self.scripts: list[str] = []
        self._box = Vertical(id="fork-box")
        self._box.border_title = markup("Fork · run $run at $call", run=run_id, call=call.call_id)
        # One line each (`compact`): at 80x24 the fork point, the fields and the keys all show.
        self._model = ShownInput(placeholder=kept(model), id="fork-model", compact=True)
        self._script = ShownInput(placeholder=kept(script), id="fork-script", compact=True)
        self._message = ShownInput(
            placeholder="none: said to the agent at the fork", id="fork-message", compact=True
        )
        reading = markup("[dim]reading $env's scripts…[/]", env=env)
        self._offered = Static(reading, id="fork-scripts")
        self._problem = Static(id="fork-problem")
        self._problem.display = False

    def compose(self) -> ComposeResult:
        point = markup(POINT, call=self.call.call_id, tool=self.call.tool,
                       args=short_args(self.call.args, 40), round=str(self.call.round))  # fmt: skip
        with self._box:
            yield Static(point, id="fork-point")
            for label, field in (("model", self._model), ("script", self._script)):
                with Horizontal(classes="fork-field"):
                    yield Static(label, classes="fork-label")
                    yield field
            yield self._offered
            with Horizontal(classes="fork-field"):
                yield Static("message", classes="fork-label")
                yield self._message
            with Vertical(id="fork-foot", classes="dialog-foot"):  # in view, the box full or not
                yield self._problem
                yield Static(KEYS, id="fork-keys")
        yield KeysBar()

    def on_mount(self) -> None:
        self.read_scripts()

    @work(group="fork-scripts", exit_on_error=False)
    async def read_scripts(self) -> None:
        """The env's scripts, read off the UI's path, offered as the script is typed."""
        scripts, why = await asyncio.to_thread(env_scripts, self.env)
        self.scripts = scripts
        if scripts:
            self._script.suggester = SuggestFromList(scripts, case_sensitive=True)
            said = markup("[dim]scripts: $names[/]", names=", ".join(scripts))
        else:
            said = markup("[dim]$why[/]", why=why)
        self._offered.update(said)

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker_failed(self, event, title="fork")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        script = self._script.value.strip() or None
        if script is not None and self.scripts and script not in self.scripts:
            unknown = "[b $warning]No script $name[/] in $env: type one offered, or none."
            self._problem.update(markup(unknown, name=script, env=self.env))
            self._problem.display = True
            self._script.focus()
            return
        self.dismiss(
            ForkAsked(
                model=self._model.value.strip() or None,
                script=script,
                message=self._message.value.strip() or None,
            )
        )

    def action_close(self) -> None:
        self.dismiss(None)
