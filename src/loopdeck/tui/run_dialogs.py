"""What the run screen's keys open: the approvals waiting (`ApprovalOffers`), the full
transcript, and the questions asked before a kill or a quit."""

from __future__ import annotations

from textual import on

from loopdeck.tui.approval_offers import ApprovalsChanged
from loopdeck.tui.dialogs import ConfirmKillDialog, ConfirmQuitDialog
from loopdeck.tui.run_decisions import RunDecisionsPart
from loopdeck.tui.shown import markup
from loopdeck.tui.transcript_view import TranscriptScreen


class RunDialogsPart(RunDecisionsPart):
    def _queue_changed(self) -> None:
        self.post_message(ApprovalsChanged())

    @on(ApprovalsChanged)
    def _approvals_changed(self) -> None:
        self.flush()
        self._render_header()
        self.refresh_bindings()
        self.offers.changed()

    def action_approvals(self) -> None:
        self.offers.reopen()

    def action_transcript(self) -> None:
        if self._transcript_screen is not None:
            return
        self.flush()
        title = markup(
            "[b]Transcript[/] · run $run · esc returns to the run", run=self.view.run_id or "…"
        )
        self._transcript_screen = TranscriptScreen(self.transcript, title)

        def closed(_: None) -> None:
            self._transcript_screen = None

        self.app.push_screen(self._transcript_screen, closed)

    def action_kill(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self.link.kill(by="console")

        self.app.push_screen(ConfirmKillDialog(), confirmed)

    def action_quit_run(self) -> None:
        """`q`: a live run of this process is killed (asked first, like `k`), then the screen
        is left once the run has recorded its stop. An attached console just detaches."""
        if self.quitting:
            return
        if not (self.running and self.link.runtime is not None):
            self.leave()
            return

        def confirmed(yes: bool | None) -> None:
            if yes and self.running:
                self.quitting = True
                self.offers.shut_down()
                self.link.kill(by="console (quit)")
            elif yes:
                self.leave()

        self.app.push_screen(ConfirmQuitDialog(), confirmed)
