"""The console's home: every run in the store, live, with the ones that need you on top."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.worker import Worker

from loopdeck.core.text import plural, visible
from loopdeck.core.timeouts import bounded
from loopdeck.operator.fleet import SORTS, Alerts, Fleet, FleetRow, Sort
from loopdeck.operator.records import shown_location
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import elapsed_text
from loopdeck.tui.shown import cell, markup, toast
from loopdeck.tui.shown_input import ShownInput

if TYPE_CHECKING:
    from loopdeck.operator.records import Location

# State and stop next to the run id: at 80 columns they are on screen, the others scroll.
COLUMNS = ("", "run", "state", "stop", "env/script", "model", "waiting", "closest budget",
           "last finding", "age", "runner")  # fmt: skip


def _sort_keys() -> list[Binding]:
    """`s`, a binding for each order, one shown at a time (`check_action`): it names the
    order now and goes to the next."""
    order = list(SORTS)
    return [
        Binding("s", f"sort('{order[(i + 1) % len(order)]}')", f"Sort: {SORTS[now]}",
                id=f"fleet.sort.{now.replace(' ', '-')}")
        for i, now in enumerate(order)
    ]  # fmt: skip


class FleetChanged(Message):
    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FleetChanged)


class FleetScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "open", "Open run", id="fleet.open", priority=True),
        Binding("n", "new_run", "New run", id="fleet.new"),
        Binding("i", "app.inbox", "Inbox", id="fleet.inbox"),
        Binding("slash", "filter", "Filter", id="fleet.filter"),
        *_sort_keys(),
    ]

    def __init__(self, db_path: Location | None, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.db_path = db_path
        self.now = now
        self.fleet = Fleet()
        self.alerts = Alerts()
        self.filter_text = ""
        self.sort: Sort = "needs you"
        self._stop_following = asyncio.Event()
        self._store_closed = asyncio.Event()

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield ShownInput(placeholder="filter runs: any column shown (id, state, stop, env…)",
                    id="fleet-filter")  # fmt: skip
        yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True, classes="panel")
        yield KeysBar()

    def on_mount(self) -> None:
        self.query_one("#fleet-filter").display = False
        table = self.query_one("#fleet-table", DataTable)
        table.border_title = "Runs"
        for column in COLUMNS:
            table.add_column(column, key=column or "mark")
        self.set_interval(1.0, self._each_second)
        table.focus()
        self.render_fleet()
        self.follow()

    @work(group="fleet", exclusive=True, exit_on_error=False, description="follow the store")
    async def follow(self) -> None:
        try:
            await self.fleet.follow(
                self.db_path, self._stop_following, lambda: self.post_message(FleetChanged())
            )
        finally:
            self._store_closed.set()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker_failed(self, event, title="fleet")

    async def on_unmount(self) -> None:
        """Leave with the store closed: a query still running when the loop ends would
        answer into a closed loop."""
        self._stop_following.set()
        with contextlib.suppress(TimeoutError):
            await bounded(self._store_closed.wait(), 2.0)

    @on(FleetChanged)
    def _changed(self) -> None:
        self.render_fleet()
        self._alert()

    def _alert(self) -> None:
        """A toast, and the terminal bell unless `--no-bell`."""
        alerts = self.alerts.check(self.fleet, self.now())
        for alert in alerts:
            toast(self, alert.text, title="loopdeck", severity=alert.severity)  # type: ignore[arg-type]
        if alerts and getattr(self.app, "bell_enabled", True):
            self.app.bell()

    def _each_second(self) -> None:
        self.render_fleet()
        self._alert()  # receipts close to expiry are noticed without a store change

    def _mark(self, row: FleetRow) -> Text:
        need = row.needs_operator
        if need == "approval":
            return Text("⚠", style=f"bold {self._var('warning')}")
        if need == "paused":
            return Text("⏸", style=f"bold {self._var('warning')}")
        seen: set[str] = getattr(self.app, "seen_runs", set())
        if not row.live and row.run_id not in seen and row.started_at is not None:
            return Text("●", style=self._var("accent"))  # stopped, not yet looked at
        return Text("")

    def _var(self, name: str) -> str:
        return self.app.theme_variables.get(name, "")

    def _cells(self, row: FleetRow, now: datetime) -> list[object]:
        state = "paused" if row.paused and row.live else row.state
        closest = row.closest
        if closest and row.projected_s is not None and row.live:
            closest += f" · cap in {elapsed_text(row.projected_s)}"
        style = self._var("error") if row.closest_fraction >= 0.8 else ""
        stop_style = self._var("success" if row.stop_reason == "goal_met" else "error")
        return [
            self._mark(row),
            cell(row.run_id),
            cell(state),
            cell(row.stop_reason or "", style=stop_style),
            cell(f"{row.env}/{row.script}"),
            cell(row.model),
            plural(row.pending, "approval") if row.pending else "",
            cell(closest, style=style),
            cell(row.last_finding[:60]),
            elapsed_text(row.age_s(now)),
            cell(row.runner),
        ]

    def _shown(self, now: datetime) -> list[tuple[FleetRow, list[object]]]:
        """The rows in the chosen order with their cells, those the filter keeps: it matches
        any column as shown (the state, the stop, the runner, the age…)."""
        needle = self.filter_text.strip().lower()
        shown = []
        for row in self.fleet.ordered(self.sort):
            cells = self._cells(row, now)
            said = " ".join(c.plain if isinstance(c, Text) else str(c) for c in cells).lower()
            if not needle or needle in said or visible(needle) in said:
                shown.append((row, cells))
        return shown

    def render_fleet(self) -> None:
        table = self.query_one("#fleet-table", DataTable)
        selected = self.selected_run()
        table.clear()
        for row, cells in self._shown(self.now()):
            table.add_row(*cells, key=row.run_id)
        if selected is not None and selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        waiting = self.fleet.waiting
        # Read by every run's header ("+N in other runs").
        by_run = {row.run_id: row.pending for row in self.fleet.rows.values() if row.pending}
        setattr(self.app, "waiting_by_run", by_run)  # noqa: B010
        badge = (
            f"  [b reverse $warning] ⚠ {plural(waiting, 'approval')} waiting · i [/]"
            if waiting
            else ""
        )
        shown = " · filter “$filter”" if self.filter_text else ""
        self.query_one("#fleet-header", Static).update(
            markup(
                f"[b]loopdeck[/] · fleet · {plural(len(self.fleet.rows), 'run')}{shown}{badge}"
                f"{' · [b $error]$outage[/]' if self.fleet.outage.since else ''}"
                " · [dim]$store[/]",
                filter=self.filter_text,
                outage=self.fleet.outage.text,
                store=shown_location(self.db_path),
            )
        )

    def selected_run(self) -> str | None:
        table = self.query_one("#fleet-table", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        typing = isinstance(self.focused, Input)
        if action == "open":
            return True  # enter also leaves the filter's box
        if action == "sort":
            return not typing and parameters[0] == self._next_sort()
        return not typing

    def _next_sort(self) -> Sort:
        order = list(SORTS)
        return order[(order.index(self.sort) + 1) % len(order)]

    def action_sort(self, sort: Sort) -> None:
        self.sort = sort
        self.refresh_bindings()
        self.render_fleet()

    def action_open(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        if self.focused is box:
            box.display = bool(box.value)
            self.query_one("#fleet-table").focus()
            return
        run_id = self.selected_run()
        if run_id is None:
            return
        row = self.fleet.rows[run_id]
        seen: set[str] = getattr(self.app, "seen_runs", set())
        seen.add(run_id)
        opener = getattr(self.app, "open_run", None)
        if opener is not None:
            opener(run_id, row.live)
        self.render_fleet()

    def action_new_run(self) -> None:
        starter = getattr(self.app, "new_run", None)
        if starter is not None:
            starter()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#fleet-filter")
    def _filtered(self, event: Input.Changed) -> None:
        """Applied as it is typed."""
        self.filter_text = event.value
        self.render_fleet()

    def key_escape(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        if box.display:
            box.value = ""
            self.filter_text = ""
            box.display = False
            self.query_one("#fleet-table").focus()
            self.render_fleet()
