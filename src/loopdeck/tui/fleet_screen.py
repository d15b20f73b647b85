"""The console's home: every run in the store, live, with the ones that need you on top.

What it asks of the console is a message (`console_messages`: open the run chosen, start a
new one); what it shares with the run screens (the runs looked at, what waits in each run) is
the console's `SharedState`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static
from textual.worker import Worker

from loopdeck.core.text import plural, visible
from loopdeck.core.timeouts import bounded
from loopdeck.operator.fleet import Fleet, FleetRow, waiting_text
from loopdeck.operator.fleet_alerts import Alerts
from loopdeck.operator.fleet_order import SORTS, Listed, Order, Sort
from loopdeck.operator.records import shown_location
from loopdeck.tui.alert_toasts import AlertToasts
from loopdeck.tui.console_messages import NewRunAsked, RunChosen
from loopdeck.tui.failures import worker_failed
from loopdeck.tui.fleet_table import FleetTable
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.shared_state import SharedState
from loopdeck.tui.shown import markup
from loopdeck.tui.shown_input import ShownInput
from loopdeck.tui.timers import every, unless_gone

if TYPE_CHECKING:
    from loopdeck.operator.records import Location


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

    def __init__(
        self,
        db_path: Location | None,
        now: Callable[[], datetime],
        shared: SharedState,
        *,
        bell: bool = True,
    ) -> None:
        """`shared` is the console's (`ConsoleState.shared`); `bell`: each alert rings the
        terminal's bell too (`--no-bell` turns it off)."""
        super().__init__()
        self.db_path = db_path
        self.now = now
        self.shared = shared
        self.bell = bell
        self.fleet = Fleet()
        self.alerts = Alerts()
        self.alert_toasts = AlertToasts()
        self.filter_text = ""
        self.sort: Sort = "needs you"
        self._stop_following = asyncio.Event()
        self._store_closed = asyncio.Event()
        self._store_closed.set()  # none open until `follow` runs: a quit before waits for none
        self._header_said: tuple[str, str, str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield ShownInput(placeholder="filter runs: any column shown (id, state, stop, env…)",
                    id="fleet-filter")  # fmt: skip
        yield FleetTable(id="fleet-table", classes="panel", seen_runs=self.shared.seen_runs)
        yield KeysBar()

    def on_mount(self) -> None:
        # Quitting as the screen is pushed: the app can remove its widgets before this runs;
        # a screen torn down so starts nothing (`unless_gone`).
        unless_gone(self, self._mounted)

    def _mounted(self) -> None:
        self.query_one("#fleet-filter").display = False
        table = self.query_one(FleetTable)
        table.border_title = "Runs"
        every(self, 1.0, self._each_second)
        table.focus()
        self.render_fleet()
        self.follow()

    @work(group="fleet", exclusive=True, exit_on_error=False, description="follow the store")
    async def follow(self) -> None:
        self._store_closed.clear()
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
        self.check_alerts()

    def check_alerts(self) -> None:
        """The alerts the fleet calls for now: toasts, one a kind of alert however many runs
        (`AlertToasts`), and the terminal bell unless `--no-bell`."""
        waiting = self.fleet.waiting_by_run  # their receipts may near their expiry
        only = self.fleet.take_touched().union(waiting)
        alerts = self.alerts.check(self.fleet, self.now(), only)
        looked_at = self.shared.looked_at()  # its waits are on screen: no toast for them
        self.alert_toasts.show(self, alerts, looked_at)
        self.alert_toasts.settle(self, self.fleet.rows, looked_at)
        if alerts and self.bell:
            self.app.bell()

    def _each_second(self) -> None:
        self.render_fleet()
        self.check_alerts()  # receipts close to expiry are noticed without a store change

    def _shown(self, now: datetime) -> Order[FleetRow] | Listed[FleetRow]:
        """The rows in the chosen order, those the filter keeps: it matches any column as
        shown (the state, the stop, the runner, the age…). Unfiltered, the fleet's own order
        as it keeps it (what a refresh costs is the runs that changed); filtered, every run
        is looked at (each one's text kept until its look changes)."""
        rows = self.fleet.ordered(self.sort)
        needle = self.filter_text.strip().lower()
        if not needle:
            return rows
        table, shown_as = self.query_one(FleetTable), visible(needle)
        shown = []
        for row in rows:
            said = table.said(row, now)
            if needle in said or shown_as in said:
                shown.append(row)
        return Listed(shown)

    def render_fleet(self) -> None:
        now = self.now()
        self.query_one(FleetTable).show(self._shown(now), now)
        waiting, questions = self.fleet.waiting, self.fleet.questions
        # Read by every run's header ("+N in other runs").
        by_run = self.fleet.waiting_by_run
        if by_run != self.shared.waiting_by_run:
            self.shared.waiting_by_run = by_run
        said_waiting = waiting_text(waiting - questions, questions)
        badge = f"  [b reverse $warning] ⚠ {said_waiting} waiting · i [/]" if waiting else ""
        shown = " · filter “$filter”" if self.filter_text else ""
        if not self.fleet.rows:  # a new store: where to start
            shown += " · [b $accent]n[/] starts a run"
        header = (
            f"[b]loopdeck[/] · fleet · {plural(len(self.fleet.rows), 'run')}{shown}{badge}"
            f"{' · [b $error]$outage[/]' if self.fleet.outage.since else ''}"
            f"{_workers(self.fleet.workers_said)} · [dim]$store[/]"
        )
        said = (header, self.filter_text, self.fleet.outage.text)
        if said != self._header_said:  # an update is a layout of the whole screen
            self._header_said = said
            self.query_one("#fleet-header", Static).update(
                markup(header, filter=said[1], outage=said[2], store=shown_location(self.db_path))
            )

    def selected_run(self) -> str | None:
        return self.query_one(FleetTable).cursor_run

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
        self.shared.seen_runs.add(run_id)
        self.post_message(RunChosen(run_id, self.fleet.rows[run_id].live))
        self.render_fleet()

    def action_new_run(self) -> None:
        self.post_message(NewRunAsked())

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


def _workers(said: str) -> str:
    """The store's workers in the header: none running is a warning (no run placed moves)."""
    if not said:
        return ""
    return f" · [b $warning]{said}[/]" if said.startswith("no ") else f" · {said}"
