"""The run screen's transcript side panel, a live tail: while it follows, a burst taller than
the panel is drawn only from what fills it; scrolled back, every entry it keeps is there."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

import pytest
from console_helpers import wait_until
from textual import events
from textual.app import App, ComposeResult

from loopdeck.core.events import ModelCalled
from loopdeck.operator.transcript import Entry, Transcript
from loopdeck.tui.transcript_view import TranscriptLog

HEIGHT = 10  # the panel's lines, its border taken off


class PanelApp(App[None]):
    CSS = f"TranscriptLog {{ height: {HEIGHT + 2}; border: round white; }}"

    def compose(self) -> ComposeResult:
        yield TranscriptLog(id="transcript-panel", keep=200)


def said(transcript: Transcript, n: int) -> Entry:
    """An entry of three lines: its title, then the model's two lines."""
    event = ModelCalled(
        run_id="run1", role="executor", round=1, model="fake", prompt_tokens=1,
        completion_tokens=1, cost_usd=None, latency_ms=1.0, content=f"said {n}\nand more {n}",
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    entry = transcript.apply(event)
    assert entry is not None
    return entry


def shown(log: TranscriptLog) -> str:
    return "\n".join(line.text.rstrip() for line in log.lines)


@pytest.mark.parametrize("scroll", ["key", "wheel", "scrollbar"])
async def test_a_following_panel_draws_only_the_tail_of_a_burst(scroll: str) -> None:
    transcript = Transcript()
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(TranscriptLog)
        await wait_until(pilot, lambda: log.size.height == HEIGHT)
        log.add([said(transcript, n) for n in range(3)])  # fits: drawn as it comes
        burst = [said(transcript, n) for n in range(3, 40)]  # 111 lines for a panel of 10
        log.add(burst)
        await pilot.pause()
        # Only what shows was measured, wrapped and drawn; the scrollbar as long as with all.
        drawn = [line.text.strip() for line in log.lines if line.text.strip()]
        assert len(drawn) == HEIGHT and drawn[0] == "and more 36"  # of the 4th last, what shows
        assert log.virtual_size.height >= 3 * 40 and log.behind
        assert log.scroll_y == log.max_scroll_y and log.following
        log.add([said(transcript, 40)])  # a short burst after it: added below, still following
        await pilot.pause()
        assert shown(log).endswith("and more 40") and log.scroll_y == log.max_scroll_y
        # Scrolled back, every entry kept is there, from the first; the view starts from the end.
        if scroll == "key":
            log.focus()
            await pilot.press("up")
        elif scroll == "wheel":
            await pilot._post_mouse_events([events.MouseScrollUp], log, offset=(5, 5))
        else:  # its scrollbar's thumb dragged up by two rows
            await drag_scrollbar(pilot, log, rows=-2)
        await pilot.pause()
        assert not log.following and not log.behind
        text = shown(log)
        assert all(f"said {n}\n" in text + "\n" for n in range(41)), text
        assert text.index("said 0") < text.index("said 20") < text.index("said 40")
        # A key or the wheel moves a few lines; a row of the scrollbar, a tenth of them all.
        assert 0 < log.max_scroll_y - log.scroll_y <= (3 if scroll != "scrollbar" else 30)
        # Not following, a burst is added below what the operator reads; the view stays.
        at = log.scroll_y
        log.add([said(transcript, n) for n in range(41, 45)])
        await pilot.pause()
        assert log.scroll_y == at and shown(log).endswith("and more 44")
        await pilot.press("end")
        await pilot.pause()
        assert log.following


async def drag_scrollbar(pilot, log: TranscriptLog, rows: int) -> None:
    """The vertical scrollbar's thumb (at the bottom: the view at the end) taken with the mouse
    and moved `rows` rows, as a person drags it."""
    bar = log.vertical_scrollbar
    x, bottom = bar.region.width - 1, bar.region.height - 1
    await pilot.mouse_down(bar, offset=(x, bottom))
    await pilot.hover(bar, offset=(x, bottom + rows))
    await pilot.mouse_up(bar, offset=(x, bottom + rows))


async def test_scrolled_back_the_view_stays_on_what_it_shows_as_old_lines_go() -> None:
    """Scrolled back in a panel that keeps its last 200 lines, what the operator reads stays in
    view while new entries push the oldest lines out (the view goes up by the lines taken), and
    dragging the scrollbar stops the follow as a key or the wheel does."""
    transcript = Transcript()
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(TranscriptLog)
        await wait_until(pilot, lambda: log.size.height == HEIGHT)
        log.add([said(transcript, n) for n in range(66)])  # 198 lines: nothing trimmed yet
        await pilot.pause()
        await drag_scrollbar(pilot, log, rows=-4)
        await pilot.pause()
        assert not log.following and log.scroll_y < log.max_scroll_y
        top = int(log.scroll_y)
        reading = log.lines[top].text
        for n in range(66, 76):  # 30 lines more: the oldest go, frame after frame
            log.add([said(transcript, n)])
            await pilot.pause()
        assert len(log.lines) == 200 and "said 0" not in shown(log)
        assert not log.following and shown(log).endswith("and more 75")
        assert log.lines[int(log.scroll_y)].text == reading
        assert int(log.scroll_y) == top - (198 + 30 - 200)  # up by the lines taken


async def test_a_panel_made_taller_draws_what_it_shows_now() -> None:
    transcript = Transcript()
    app = PanelApp()
    async with app.run_test(size=(80, 30)) as pilot:
        log = app.query_one(TranscriptLog)
        await wait_until(pilot, lambda: log.size.height == HEIGHT)
        log.add([said(transcript, n) for n in range(40)])
        await pilot.pause()
        assert log.behind
        log.styles.height = HEIGHT + 12
        await wait_until(pilot, lambda: log.size.height == HEIGHT + 10)
        await pilot.pause()
        assert log.following and log.scroll_y == log.max_scroll_y
        on_screen = shown(log).split("\n")[-(HEIGHT + 10) :]
        assert all(on_screen) and "said 34" in "\n".join(on_screen)  # no blank line shown


async def test_a_long_entry_at_the_top_of_the_tail_is_drawn_from_what_shows() -> None:
    """A burst that ends with a long result and two short entries: of the result only the lines
    the panel shows are drawn, and they read as when the whole is drawn."""
    transcript = Transcript()
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(TranscriptLog)
        await wait_until(pilot, lambda: log.size.height == HEIGHT)
        long = "\n".join(f"line {n} of the result" for n in range(100))
        log.add([said(transcript, 0), said(transcript, 1)])
        log.add(
            [
                said(transcript, 2),
                said_long(transcript, long),
                *map(partial(said, transcript), (3, 4)),
            ]
        )
        await pilot.pause()
        drawn = [line.text.rstrip() for line in log.lines if line.text.strip()]
        assert len(drawn) == HEIGHT and drawn[0] == "  line 96 of the result"
        on_screen = shown(log).split("\n")[-HEIGHT:]
        log.caught_up()  # all of it drawn: the same rows at the end
        await pilot.pause()
        assert shown(log).split("\n")[-HEIGHT:] == on_screen
        assert "said 2" in shown(log) and "line 0 of the result" in shown(log)


def said_long(transcript: Transcript, content: str) -> Entry:
    event = ModelCalled(
        run_id="run1", role="executor", round=1, model="fake", prompt_tokens=1,
        completion_tokens=1, cost_usd=None, latency_ms=1.0, content=content,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    entry = transcript.apply(event)
    assert entry is not None
    return entry


async def test_a_burst_of_more_entries_than_lines_kept_makes_only_what_shows() -> None:
    """A runaway's frame of 300 entries for a panel that keeps 200 lines: its scrollbar is as
    long as the lines kept, and only the entries on screen had their words made (an entry
    scrolled out unread costs a reference, not its text)."""
    transcript = Transcript()
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(TranscriptLog)
        await wait_until(pilot, lambda: log.size.height == HEIGHT)
        burst = [said(transcript, n) for n in range(300)]
        log.add(burst)
        await pilot.pause()
        assert log.behind and log.virtual_size.height == 200
        made = [n for n, entry in enumerate(burst) if entry._made is not None]
        assert made == list(range(296, 300)), made  # the four that fill the panel's ten lines
