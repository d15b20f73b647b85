"""A run's pending writes and questions, offered to the operator one dialog at a time, and the
decisions taken to the store off the runtime (a lock held elsewhere is waited out there): a
write's, a question's, an unknown outcome's (`resolve`) and a grant's revocation (`revoke`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial

from textual.message import Message
from textual.screen import Screen

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import QuestionAsked
from loopdeck.operator.links import RunLink
from loopdeck.operator.records import NotOffered, RunEnded, StoreError
from loopdeck.operator.runview import RunView
from loopdeck.tui.dialogs import BY, ApprovalDialog
from loopdeck.tui.failures import say
from loopdeck.tui.question_dialog import AnswerText, QuestionDialog
from loopdeck.tui.shown import NOT_TAKEN, toast

STILL_PENDING = "it is still pending: its dialog comes back"


class ApprovalsChanged(Message):
    """The queue of pending approvals changed; many in a row collapse into one."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ApprovalsChanged)


def decided_by(view: RunView, call_id: str) -> str | None:
    """Who decided a write and how, as the run's events have it (once they arrive)."""
    decided = view.decided.get(call_id, "")
    return decided.split("; ")[0] if decided.startswith(("approved", "rejected")) else None


def asking(request: ApprovalRequest) -> tuple[str, datetime]:
    """One asking of a call: a call asked again (its receipt no longer covers it) is new."""
    return request.call_id, request.requested_at


class ApprovalOffers:
    """The dialog of the run's screen: the first write waiting (or, with none, the first
    question) unless the operator put it off (esc: `later`) or decided it here. The decision's
    worker belongs to the screen, whose handler shows a worker's failure."""

    def __init__(
        self,
        screen: Screen[None],
        link: RunLink,
        now: Callable[[], datetime],
        put_off: Callable[[], None],
        asked: Callable[[str], QuestionAsked | None],
    ) -> None:
        self.screen = screen
        # How a question was put (its title, choices, evidence), by id: None until its
        # `QuestionAsked` is folded into the screen's view.
        self.asked = asked
        self.link = link
        self.now = now
        self.put_off = put_off  # called when the operator leaves one for later (the header)
        self.dialog: ApprovalDialog | QuestionDialog | None = None
        self.shut = False  # the screen is leaving: nothing more is offered
        self._later: set[str] = set()
        self._sending: set[str] = set()  # decided here, on their way to the store: not offered
        # Decided here (won, or lost to another decider) but still listed until the runtime
        # takes the decision: never offered again. A request asked again is a new one.
        self._settled: set[tuple[str, datetime]] = set()
        self._settled_questions: set[str] = set()

    def changed(self, view: RunView) -> None:
        """The queue changed: a write's dialog whose request went stays, saying so, until
        the operator leaves it (`drawn`: unless it went with the run); one asked again, or a
        question's, is closed; the next one offered."""
        pending = self.link.pending()
        dialog = self.dialog
        if isinstance(dialog, ApprovalDialog):
            call_id = dialog.request.call_id
            if dialog.request in pending:
                dialog.set_title(len(pending))
            elif any(p.call_id == call_id for p in pending):  # asked again: offered anew
                self.close()
            elif dialog.gone_said is None:
                dialog.gone(f"{call_id} is no longer waiting")
                self.drawn(view)
        elif (
            isinstance(dialog, QuestionDialog)
            and dialog.gone_said is None
            and dialog.question_id not in dict(self.link.questions())
        ):
            acts_at = dialog.asked.acts_at if dialog.asked else None
            if acts_at is not None and acts_at <= self.now():  # nobody answered in time
                went_on = "the guard blocked the call and the run went on"
                if dialog.asked is None or dialog.asked.topic != "loop":
                    went_on = "the run went on alone"
                dialog.gone(f"{dialog.question_id}: no answer in time; {went_on}")
            else:
                dialog.gone(f"{dialog.question_id} was answered elsewhere")
            self.drawn(view)
        self.offer_next()

    def drawn(self, view: RunView) -> None:
        """A frame of the run drawn: a write's dialog that is no longer waiting says who
        decided it once the run's events tell; withdrawn as the run stopped, it is closed."""
        dialog = self.dialog
        if isinstance(dialog, QuestionDialog) and dialog.gone_said is not None:
            if view.finished:  # gone with the run: nothing comes after it
                self.close()
            return
        if not isinstance(dialog, ApprovalDialog) or dialog.gone_said is None:
            return
        call_id = dialog.request.call_id
        if (decided := decided_by(view, call_id)) is not None:
            if dialog.gone_said != (said := f"{call_id} was {decided}"):
                dialog.gone(said)
        elif view.finished:  # withdrawn with the run: nothing comes after it
            self.close()

    def reopen(self) -> None:
        """`w`: what was put off is offered again."""
        self._later.clear()
        self.offer_next()

    def open_write(self, reject: bool) -> None:
        """`a`, `r` in the run screen's narrow layout: what was put off offered again, the
        first write waiting first; for `r`, its reason box open."""
        self.reopen()
        dialog = self.dialog
        if reject and isinstance(dialog, ApprovalDialog):
            dialog.call_after_refresh(dialog.action_reject)

    def shut_down(self) -> None:
        """The screen is leaving (quit, a stop signal): its dialog goes, none comes back."""
        self.shut = True
        self.close()

    def close(self) -> None:
        dialog, self.dialog = self.dialog, None
        if dialog is None:
            return
        app = self.screen.app
        while app.screen is not dialog and dialog in app.screen_stack:
            app.pop_screen()
        if app.screen is dialog:
            app.pop_screen()

    def offer_next(self) -> None:
        if self.dialog is not None or self.screen.app.screen is not self.screen or self.shut:
            return
        pending = self.link.pending()
        questions = self.link.questions()
        self._settled &= {asking(p) for p in pending}
        self._settled_questions &= {q for q, _ in questions}
        held = self._later | self._sending
        waiting = [p for p in pending if p.call_id not in held and asking(p) not in self._settled]
        if not waiting:
            held |= self._settled_questions
            # A question is offered once its asking is heard: the link lists it as the run
            # asks, before its `QuestionAsked` has reached this loop's view, and a dialog made
            # then would put the guard's question as the agent's (no choices; a text box that
            # types `s`). The queue's change that follows the event offers it (`changed`).
            heard = [(q, text) for q, text in questions if self.asked(q) is not None]
            asked = [(q, text) for q, text in heard if q not in held]
            if asked:
                question_id, text = asked[0]
                self.dialog = QuestionDialog(question_id, text, self.asked(question_id), self.now)
                self.screen.app.push_screen(self.dialog, self._answered_question)
            return
        request = waiting[0]
        self.dialog = ApprovalDialog(
            request, len(pending), self.link.risk_of(request.tool), self.now
        )
        self.screen.app.push_screen(self.dialog, self._answered)

    def _answered(self, decision: ApprovalDecision | None) -> None:
        dialog, self.dialog = self.dialog, None
        if decision is None:
            pending = {p.call_id for p in self.link.pending()}
            if isinstance(dialog, ApprovalDialog) and dialog.gone_said is not None:
                self.screen.call_after_refresh(self.offer_next)  # left: the next comes now
            elif isinstance(dialog, ApprovalDialog) and dialog.request.call_id in pending:
                self._later.add(dialog.request.call_id)
                self.put_off()
            return
        assert isinstance(dialog, ApprovalDialog)  # only its dialog decides a write
        self._sending.add(decision.call_id)
        asked = asking(dialog.request)
        self._work(partial(self._decide, decision, asked), "record an approval decision")

    def _answered_question(self, answer: AnswerText | None) -> None:
        dialog, self.dialog = self.dialog, None
        if answer is None:
            if isinstance(dialog, QuestionDialog) and dialog.gone_said is not None:
                self.screen.call_after_refresh(self.offer_next)  # left: the next comes now
            elif isinstance(dialog, QuestionDialog):
                self._later.add(dialog.question_id)
                self.put_off()
            return
        self._sending.add(answer.question_id)
        self._work(partial(self._send_answer, answer), "answer the agent")

    def _work(
        self, decision: Callable[[], Awaitable[None]], description: str, group: str = "decisions"
    ) -> None:
        """The screen's worker: its failure reaches `failures` (the screen's handler)."""
        self.screen.run_worker(decision, group=group, exit_on_error=False, description=description)

    def resolve(self, call_id: str, applied: bool) -> None:
        """The operator's word on a write whose outcome is unknown, taken to the link."""
        self._work(
            partial(self._resolve, call_id, applied), f"record {call_id}'s outcome", "outcomes"
        )

    def revoke(self, grant_id: str) -> None:
        self._work(partial(self._revoke, grant_id), f"revoke {grant_id}", "grants")

    async def _resolve(self, call_id: str, applied: bool) -> None:
        try:
            why = await self.link.resolve(call_id, applied, BY, self._tell)
        except StoreError as exc:
            meaning = "its outcome is still unknown: o asks again"
            say(self.screen, f"{call_id}'s outcome not recorded: {exc}", meaning, title="outcome")
            return
        if why is not None:
            toast(
                self.screen, f"{call_id}: {why}", title="outcome not recorded", severity="warning"
            )
            return
        words = "applied" if applied else "not applied"
        runtime = self.link.runtime
        ended = runtime is not None and runtime.outcome is not None
        heard = "the run has ended" if ended else "the model hears it"
        toast(self.screen, f"{call_id}: {words}, recorded; {heard}", title="outcome")

    async def _revoke(self, grant_id: str) -> None:
        why = await self.link.revoke(grant_id, BY)
        if why is not None:
            toast(self.screen, f"{grant_id}: {why}", title="grant not revoked", severity="warning")
            return
        said = f"{grant_id} revoked: later calls it covered are asked again"
        toast(self.screen, said, title="grant")

    def _tell(self, message: str) -> None:
        """A decision waiting for the store (a lock held elsewhere), and when it lands."""
        toast(self.screen, message, title="store", severity="warning", timeout=10)

    async def _send_answer(self, answer: AnswerText) -> None:
        try:
            won = await self.link.answer(answer.question_id, answer.text, "console", self._tell)
        except RunEnded as exc:  # nothing waits for it any more: no dialog comes back
            self._settled_questions.add(answer.question_id)
            toast(self.screen, str(exc), title="answer not recorded", severity="warning")
        except StoreError as exc:  # still waiting: its dialog comes back
            say(self.screen, f"answer not recorded: {exc}", STILL_PENDING, title="answer")
        except NotOffered as exc:  # nothing was sent: the question is asked again
            say(self.screen, f"answer not taken: {exc}", STILL_PENDING, title="answer")
        else:
            self._settled_questions.add(answer.question_id)
            if not won:
                toast(self.screen, f"{answer.question_id} was already answered", severity="warning")
        finally:
            self._sending.discard(answer.question_id)
        self.offer_next()

    async def _decide(self, decision: ApprovalDecision, asked: tuple[str, datetime]) -> None:
        """The store takes it here, off the runtime: a store error is shown and the request
        stays pending (its dialog comes back), the run goes on waiting."""
        try:
            won = await self.link.decide(decision, self._tell)
        except RunEnded as exc:  # its request went with the run: not offered again
            self._settled.add(asked)
            toast(self.screen, str(exc), title="decision not recorded", severity="warning")
        except StoreError as exc:
            what = "approval" if decision.approved else "rejection"
            say(self.screen, f"{what} not recorded: {exc}", STILL_PENDING, title="decision")
        else:
            self._settled.add(asked)
            if not won:
                said = f"{decision.call_id} not decided here: {NOT_TAKEN}"
                toast(self.screen, said, severity="warning")
        finally:
            self._sending.discard(decision.call_id)
        self.offer_next()
