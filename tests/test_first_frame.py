"""`loopdeck run`'s first frame pays for that frame only (issue 43): the preparing screen is
the console's one screen, its stylesheet is read once that frame is painted (and before any
other screen), and the command line builds and imports the chosen command alone. What the
operator sees is the same: the preparing screen's frame with the stylesheet or without it,
the run's screen styled by it."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import run_screen, wait_until

from loopdeck.core.approvals import AutoApprover
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui import app as app_module
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.console_start import STYLES
from loopdeck.tui.preparing import PreparingScreen

SIZE = (100, 30)


def _styles_read(app: LoopdeckApp) -> bool:
    return app.stylesheet.has_source(str(STYLES), "")


def _preparing(release: threading.Event) -> LoopdeckApp:
    def prepare() -> RunSession:
        assert release.wait(30)
        options = RunOptions(env=str(SAMPLES / "service_outage"), script="solve")
        return RunSession.adopted(prepare_run(options, approver=AutoApprover()), ApprovalQueue())

    return LoopdeckApp(ConsoleStart.for_preparing(prepare, "run service_outage"))


async def _preparing_frame(app: LoopdeckApp, styles_read: bool) -> str:
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PreparingScreen))
        await wait_until(
            pilot, lambda: len(app.workers) > 0
        )  # the preparation: after the first frame
        await pilot.pause()
        assert _styles_read(app) is styles_read
        frame = app.export_screenshot(title="preparing")
        app.exit()
    return frame


async def test_the_preparing_frame_is_the_same_without_the_stylesheet(monkeypatch: Any) -> None:
    """None of the stylesheet's rules styles the preparing screen otherwise than Textual's
    own: a rule that did would show in its first frame only once read."""
    release = threading.Event()
    with_styles = await _preparing_frame(_preparing(release), styles_read=True)
    monkeypatch.setattr(app_module, "read_styles", lambda app: None)
    without = await _preparing_frame(_preparing(release), styles_read=False)
    release.set()
    assert with_styles == without


async def test_the_run_screen_is_styled_and_over_the_preparing_screen() -> None:
    release = threading.Event()
    app = _preparing(release)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PreparingScreen))
        assert len(app.screen_stack) == 1  # no default screen under it: one to compose
        release.set()
        await wait_until(pilot, lambda: run_screen(app) is not None)
        assert _styles_read(app)
        assert [type(s) for s in app.screen_stack] == [PreparingScreen, type(run_screen(app))]
        header = app.screen.query_one("#run-header")
        assert header.styles.height is not None and header.styles.height.value == 1  # the sheet's
        screen = run_screen(app)
        assert screen is not None
        await wait_until(pilot, lambda: screen.view.stop_reason is not None)
        assert screen.view.stop_reason == "goal_met"


def _imported_by_building(argv: list[str]) -> set[str]:
    code = (
        "import sys; from loopdeck.cli.chosen_command import command_word; "
        "from loopdeck.cli.parser import build_parser; "
        f"argv = {argv!r}; build_parser(command_word(argv)).parse_args(argv); "
        "print(' '.join(m for m in sys.modules if m.startswith('loopdeck.cli')))"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(said.stdout.split())


ELSEWHERE = {"loopdeck.cli.policy_commands", "loopdeck.cli.serve", "loopdeck.cli.worker_commands"}


@pytest.mark.parametrize(
    ("argv", "imported"),
    [
        (["run", "order_support"], set()),
        (["envs"], set()),
        (["serve", "--port", "0"], ELSEWHERE),  # built next to its neighbours, as always
        (["policy", "test", "p.toml"], ELSEWHERE),
    ],
)
def test_a_command_imports_the_modules_of_other_commands_only_when_it_is_one(
    argv: list[str], imported: set[str]
) -> None:
    assert _imported_by_building(argv) & ELSEWHERE == imported


def test_a_known_command_lists_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    """Built for `run`, the parser knows `run` alone (no parser made for each other one)."""
    from loopdeck.cli.parser import build_parser

    with pytest.raises(SystemExit):
        build_parser("run").parse_args(["runs"])
    assert "invalid choice: 'runs' (choose from 'run')" in capsys.readouterr().err
