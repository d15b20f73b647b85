"""The run's standing grants, a line each: which, what it covers, its uses, its state. Shown
only while the run has any (so a run without grants looks as it always did); `G` revokes. On a
short screen it lists the latest; where it has no room (`grants_room`) the Calls panel's title
counts the active grants instead (`grants_said`), and `G` lists them."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Static

from loopdeck.core.text import plural
from loopdeck.operator.runview import RunView
from loopdeck.tui.panels import paint, title

SHOWN = 4  # grants listed; older ones are counted (`loopdeck grants` lists them all)
STATE_STYLE = {"active": "b $success"}


def grants_room(screen: Screen[Any], view: RunView) -> int:
    """How many grants the panel lists on this screen: none where it has no room (a cramped
    screen, or a short one once the Stopped panel takes its rows), one on a short screen or a
    tall one whose Stopped panel takes up to 12 rows (under 46), else SHOWN. The run screen
    never grows past the terminal (`tests/test_replay_room.py`)."""
    short, cramped = screen.has_class("-short"), screen.has_class("-cramped")
    if cramped or (short and view.finished):
        return 0
    return 1 if short or (view.finished and screen.size.height < 46) else SHOWN


def grants_said(view: RunView, live: bool = True) -> str:
    """The active grants as the Calls title says them where the panel has no room (`G`
    while the run goes on; never in a replay)."""
    active = sum(row.active for row in view.grants.of_run(view.run_id))
    if not active:
        return ""
    return f" · {plural(active, 'grant')}" + (" · G" if live and not view.finished else "")


class GrantsPanel(Static):
    def show(self, view: RunView, live: bool = True) -> None:
        rows = view.grants.of_run(view.run_id)
        room = grants_room(self.screen, view)
        self.display = bool(rows) and room > 0
        if not self.display:
            return
        active = sum(row.active for row in rows)
        revokes = " · G revokes" if live and active and not view.finished else ""
        title(self, f"Grants · {active} active{revokes}")
        lines: list[str] = []
        values: dict[str, str] = {}
        if len(rows) > room > 1:
            lines.append(f"[dim]… {len(rows) - room} earlier (loopdeck grants lists them)[/]")
        for n, row in enumerate(rows[-room:]):
            state = row.state()
            values |= {f"id{n}": row.grant_id, f"tool{n}": row.tool, f"rule{n}": row.rule}
            values |= {f"uses{n}": row.uses_text(), f"state{n}": state, f"by{n}": row.by}
            style = STATE_STYLE.get(state, "dim")
            lines.append(
                f"[b]$id{n}[/] $tool{n} · $rule{n} · $uses{n} · [{style}]$state{n}[/] · by $by{n}"
            )
        paint(self, "\n".join(lines), values)
