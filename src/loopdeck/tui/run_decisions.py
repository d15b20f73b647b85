"""The run screen's decisions beyond a write's yes and no: `o` says whether a write whose
outcome is unknown took effect (the selected call, else the oldest such), `G` revokes a
standing grant (asked first; a chooser when several are active). Each goes to the run's link
through `ApprovalOffers` (in a worker of the screen): what came of it is said in a toast, a
failure by `failures`."""

from __future__ import annotations

from textual.binding import Binding

from loopdeck.operator.replay_link import ReplayLink
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import ConfirmDialog
from loopdeck.tui.grants_panel import GrantsPanel
from loopdeck.tui.run_keys import RunKeysPart
from loopdeck.tui.shown import markup


class RunDecisionsPart(RunKeysPart):
    BINDINGS = [
        Binding("o", "outcome", "Outcome?", id="run.outcome"),
        Binding("G", "revoke", "Revoke grant", id="run.revoke"),
    ]
    _offered: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # what o and G act on

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "outcome":  # a replay only reads: `loopdeck resolve` says it
            return bool(self.view.unknown) and not isinstance(self.link, ReplayLink)
        if action == "revoke":
            return self.running and not self.quitting and bool(self._active_grants())
        return super().check_action(action, parameters)

    def _active_grants(self) -> list[str]:
        return [row.grant_id for row in self.view.grants.of_run(self.view.run_id) if row.active]

    def render_view(self) -> None:
        super().render_view()
        self.query_one(GrantsPanel).show(self.view)
        offered = (tuple(self.view.unknown), tuple(self._active_grants()))
        if offered != self._offered:  # `o` and `G` come and go with what they act on
            self._offered = offered
            self.refresh_bindings()

    def _tick(self) -> None:
        super()._tick()
        if self.view.grants.rows:  # a grant's time runs out with no event
            self.query_one(GrantsPanel).show(self.view)

    # -- o: an unknown outcome -------------------------------------------------------------
    def action_outcome(self) -> None:
        from loopdeck.tui.decision_dialogs import OutcomeDialog

        selected = self.query_one(CallsTable).cursor_key
        call_id = selected if selected in self.view.unknown else next(iter(self.view.unknown), None)
        if call_id is None:
            return
        row = self.view.calls.get(call_id)

        def said(applied: bool | None) -> None:
            if applied is not None:
                self.offers.resolve(call_id, applied)
            self.call_after_refresh(self.offers.offer_next)

        tool = self.view.unknown[call_id]
        dialog = OutcomeDialog(
            call_id, tool, row.args if row else None, result=row.result if row else None
        )
        self.app.push_screen(dialog, said)

    # -- G: revoke a grant -----------------------------------------------------------------
    def action_revoke(self) -> None:
        from loopdeck.tui.decision_dialogs import GrantPicker, grant_line

        rows = [row for row in self.view.grants.of_run(self.view.run_id) if row.active]
        if not rows:
            return

        def chosen(grant_id: str | None) -> None:
            if grant_id is not None:
                self.offers.revoke(grant_id)
            self.call_after_refresh(self.offers.offer_next)

        if len(rows) > 1:
            self.app.push_screen(GrantPicker(rows), chosen)
            return
        [row] = rows
        question = markup(
            "[b $warning]Revoke this grant?[/]\n$line\n"
            "Later calls it covered are asked again.\n\n[b]y[/] revoke   [b]n[/] keep it",
            line=grant_line(row),
        )
        self.app.push_screen(
            ConfirmDialog(question), lambda yes: chosen(row.grant_id if yes else None)
        )
