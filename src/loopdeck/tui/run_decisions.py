"""The run screen's decisions beyond a write's yes and no: `o` says whether a write whose
outcome is unknown took effect (the selected call, else the oldest such), `G` revokes a
standing grant (asked first; a chooser when several are active). Each goes to the run's link
through `ApprovalOffers` (in a worker of the screen): what came of it is said in a toast, a
failure by `failures`.

And `f` forks the run at the selected call (`ForkDialog`, then `operator/fork.py` in a worker
of the screen, on the store the run is recorded in): the fork's id in a toast, or why not.

And `p` pauses or resumes the run through its link, judged as `loopdeck pause/resume` judges
it (`deciding.pause_refusal`: a pause of a run paused or with a pause on its way, a resume of
one not paused, is refused), the refusal said in a toast."""

from __future__ import annotations

import shlex

from textual.screen import Screen

from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.links import LocalLink, RunLink
from loopdeck.operator.records import Location, StoreError, shown_location
from loopdeck.operator.replay_link import ReplayLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.store_link import StoreLink
from loopdeck.tui.approval_offers import ApprovalOffers
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import BY, ConfirmDialog
from loopdeck.tui.failures import FAILED_FOR_S
from loopdeck.tui.fork_dialog import ForkAsked
from loopdeck.tui.shown import markup, toast

NOT_RECORDED = "this run is not recorded in a store: there are no events to fork it from"


def recorded_in(link: RunLink) -> tuple[bool, Location | None]:
    """Whether the run is in a store, and which (None: the default store, as `--db` is)."""
    if isinstance(link, LocalLink):
        location = link.session.location
        return location is not None, location
    if isinstance(link, StoreLink | ReplayLink):
        return True, link.db_path
    return False, None


class RunDecisions:
    """`o` and `G` of a run screen: whether each applies to the view, and what each opens."""

    def __init__(self, screen: Screen[None], link: RunLink, offers: ApprovalOffers) -> None:
        self.screen = screen
        self.link = link
        self.offers = offers
        self._offered: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # what o and G act on

    def can_resolve(self, view: RunView) -> bool:
        """`o`: an outcome is unknown (a replay only reads: `loopdeck resolve` says it)."""
        return bool(view.unknown) and not isinstance(self.link, ReplayLink)

    def can_revoke(self, view: RunView) -> bool:
        """`G`: a grant of the run is active (the screen asks while the run is live)."""
        return bool(self._active_grants(view))

    def _active_grants(self, view: RunView) -> list[str]:
        return [row.grant_id for row in view.grants.of_run(view.run_id) if row.active]

    def drawn(self, view: RunView) -> None:
        """After a frame: `o` and `G` come and go with what they act on."""
        offered = (tuple(view.unknown), tuple(self._active_grants(view)))
        if offered != self._offered:
            self._offered = offered
            self.screen.refresh_bindings()

    # -- o: an unknown outcome -------------------------------------------------------------
    def ask_outcome(self, view: RunView) -> None:
        from loopdeck.tui.decision_dialogs import OutcomeDialog

        selected = self.screen.query_one(CallsTable).cursor_key
        call_id = selected if selected in view.unknown else next(iter(view.unknown), None)
        if call_id is None:
            return
        row = view.calls.get(call_id)

        def said(applied: bool | None) -> None:
            if applied is not None:  # the next write is offered as the run screen resumes
                self.offers.resolve(call_id, applied)

        tool = view.unknown[call_id]
        dialog = OutcomeDialog(
            call_id, tool, row.args if row else None, result=row.result if row else None
        )
        self.screen.app.push_screen(dialog, said)

    # -- G: revoke a grant -----------------------------------------------------------------
    def ask_revoke(self, view: RunView) -> None:
        from loopdeck.tui.decision_dialogs import GrantPicker, grant_line

        rows = [row for row in view.grants.of_run(view.run_id) if row.active]
        if not rows:
            return

        def chosen(grant_id: str | None) -> None:
            if grant_id is not None:  # the next write is offered as the run screen resumes
                self.offers.revoke(grant_id)

        if len(rows) > 1:
            self.screen.app.push_screen(GrantPicker(rows), chosen)
            return
        [row] = rows
        question = markup(
            "[b $warning]Revoke this grant?[/]\n$line\n"
            "Later calls it covered are asked again.\n\n[b]y[/] revoke   [b]n[/] keep it",
            line=grant_line(row),
        )
        self.screen.app.push_screen(
            ConfirmDialog(question), lambda yes: chosen(row.grant_id if yes else None)
        )

    # -- p: pause or resume ----------------------------------------------------------------
    def pause_or_resume(self, view: RunView) -> None:
        verb = "resume" if view.paused else "pause"
        self.screen.run_worker(self._pause_or_resume(verb), group="pause", exit_on_error=False,
                               description=f"{verb} of {view.run_id}")  # fmt: skip

    async def _pause_or_resume(self, verb: str) -> str | None:
        """Sent (None), or why not, said in a toast; a store that cannot take it now is
        waited out by the link (told), past that the worker's error, said by `failures`."""
        why = await self.link.pause_or_resume(verb, BY, self._tell)
        if why is not None:
            toast(self.screen, why, title=f"not {verb}d", severity="warning")
        return why

    def _tell(self, message: str) -> None:
        toast(self.screen, message, title="store")

    # -- f: fork at a call -----------------------------------------------------------------
    def can_fork(self, view: RunView) -> bool:
        """`f`: the run has a call to fork at."""
        return bool(view.calls)

    def ask_fork(self, view: RunView) -> None:
        from loopdeck.tui.fork_dialog import ForkDialog

        call_id = self.screen.query_one(CallsTable).cursor_key
        row = view.calls.get(call_id) if call_id is not None else None
        if row is None:
            return
        recorded, location = recorded_in(self.link)
        if not recorded:
            toast(self.screen, NOT_RECORDED, title="not forked", severity="error",
                  timeout=FAILED_FOR_S)  # fmt: skip
            return
        run_id = view.run_id

        def asked(changes: ForkAsked | None) -> None:
            if changes is not None:
                self.screen.run_worker(self.fork(location, run_id, row.call_id, changes),
                                       group="fork", exit_on_error=False)  # fmt: skip

        dialog = ForkDialog(run_id, row, view.env, view.model, view.script or "")
        self.screen.app.push_screen(dialog, asked)

    async def fork(
        self, location: Location | None, run_id: str, call_id: str, changes: ForkAsked
    ) -> str | None:
        """The fork queued, said in a toast (with what it is decided under that its files would
        not say today, and when no worker will take it up now); its id, or None when the store
        refused it (said why). Anything else raised is the worker's error, said by `failures`."""
        from loopdeck.operator.fork import fork

        told: list[str] = []
        try:
            fork_id = await fork(location, run_id, call_id, model=changes.model,
                                 script=changes.script, message=changes.message,
                                 tell=told.append)  # fmt: skip
        except (ScenarioError, StoreError, ValueError, OSError) as exc:
            toast(self.screen, f"run {run_id} at {call_id}: {exc}", title="not forked",
                  severity="error", timeout=FAILED_FOR_S)  # fmt: skip
            return None
        db = f" --db {shlex.quote(shown_location(location))}" if location is not None else ""
        toast(self.screen, f"forked as {fork_id} at {call_id}: queued for a worker"
              f" (`loopdeck worker{db}` runs it)", title="forked")  # fmt: skip
        for said in told:
            toast(self.screen, said, title="forked", severity="warning")
        return fork_id
