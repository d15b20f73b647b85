"""Snapshots of the run screen (mid-run, the approval dialog, the final screen at four sizes)
and of the transcript, per theme.

The console's clock is frozen at one instant, and every approval request is issued at that
instant (its receipt's countdown reads the full 5:00, however late the request came on a loaded
machine); durations, times of day and the spinner are masked: they differ per run.
"""

from datetime import UTC, datetime

import pytest
from conftest import SAMPLES
from console_helpers import console_app, finished, wait_until

from loopdeck.core import write_approvals
from loopdeck.operator import decided_words, transcript
from loopdeck.operator.runview import RunView
from loopdeck.tui import calls_table, panels
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.transcript_view import TranscriptScreen

SIZE = (160, 48)
SIZES = [(80, 24), (100, 30), (160, 48), (200, 60)]
THEMES = ["dark", "light"]


@pytest.fixture(autouse=True)
def _masked(monkeypatch):
    monkeypatch.setattr(calls_table, "format_duration", lambda ms: "" if ms is None else "·")
    monkeypatch.setattr(transcript, "ms_text", lambda ms: "· ms")
    monkeypatch.setattr(transcript, "clock_text", lambda at: "hh:mm:ss")
    monkeypatch.setattr(decided_words, "clock_text", lambda at: "hh:mm:ss")
    monkeypatch.setattr(panels, "SPINNER", "*")
    # the agent's and the operator's clocks come from real time (how long a key took to come)
    monkeypatch.setattr(RunView, "times", lambda self, now: (0.0, 0.0))


@pytest.fixture
def frozen_at(monkeypatch) -> datetime:
    """The instant the console's clock stands at, and that every request is issued at."""
    at = datetime.now(UTC)
    issue = write_approvals.request_for

    def issued_at_the_frozen_instant(**fields):
        request = issue(**fields)
        valid = request.expires_at - request.requested_at
        return request.model_copy(update={"requested_at": at, "expires_at": at + valid})

    monkeypatch.setattr(write_approvals, "request_for", issued_at_the_frozen_instant)
    return at


def _app(theme, frozen_at):
    return console_app(SAMPLES / "order_support", "solve", theme=theme, frozen=frozen_at)


@pytest.mark.parametrize("theme", THEMES)
def test_approval_dialog(snap_compare, theme, frozen_at) -> None:
    app = _app(theme, frozen_at)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("theme", THEMES)
def test_main_screen_mid_run_with_a_pending_write(snap_compare, theme, frozen_at) -> None:
    app = _app(theme, frozen_at)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# Every size in the dark theme in `make test`; the light theme's other sizes in `make stress`.
SIZED = [
    pytest.param(
        theme,
        size,
        id=f"{theme}-{size[0]}x{size[1]}",
        marks=[pytest.mark.slow] if theme == "light" and size != SIZE else [],
    )
    for theme in THEMES
    for size in SIZES
]


@pytest.mark.parametrize(("theme", "size"), SIZED)
def test_final_screen_at_every_size(snap_compare, theme, size, frozen_at) -> None:
    """80x24 keeps every panel; 100x30 keeps the state and the badge in the header; large
    sizes give the extra room to the Call panel, Findings and the transcript."""
    app = _app(theme, frozen_at)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("theme", THEMES)
def test_transcript(snap_compare, theme, frozen_at) -> None:
    app = _app(theme, frozen_at)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        await pilot.press("home")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
