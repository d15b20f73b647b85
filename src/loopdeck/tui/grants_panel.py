"""The run's standing grants, a line each: which, what it covers, its uses, its state. Shown
only while the run has any (so a run without grants looks as it always did); `G` revokes."""

from __future__ import annotations

from textual.widgets import Static

from loopdeck.operator.runview import RunView
from loopdeck.tui.panels import paint, title

SHOWN = 4  # grants listed; older ones are counted (`loopdeck grants` lists them all)
STATE_STYLE = {"active": "b $success"}


class GrantsPanel(Static):
    def show(self, view: RunView) -> None:
        rows = view.grants.of_run(view.run_id)
        self.display = bool(rows)
        if not rows:
            return
        active = sum(row.active for row in rows)
        revokes = " · G revokes" if active and not view.finished else ""
        title(self, f"Grants · {active} active{revokes}")
        lines: list[str] = []
        values: dict[str, str] = {}
        if len(rows) > SHOWN:
            lines.append(f"[dim]… {len(rows) - SHOWN} earlier (loopdeck grants lists them)[/]")
        for n, row in enumerate(rows[-SHOWN:]):
            state = row.state()
            values |= {f"id{n}": row.grant_id, f"tool{n}": row.tool, f"rule{n}": row.rule}
            values |= {f"uses{n}": row.uses_text(), f"state{n}": state, f"by{n}": row.by}
            style = STATE_STYLE.get(state, "dim")
            lines.append(
                f"[b]$id{n}[/] $tool{n} · $rule{n} · $uses{n} · [{style}]$state{n}[/] · by $by{n}"
            )
        paint(self, "\n".join(lines), values)
