"""What the run screen's keys do: stop, pause, message the agent, browse the plan, back to the
fleet, leave.
The kill switch itself (`s`, `k`, `p`, `q`) is bound on the app, over any dialog, and lands
here; what asks first is in `run_dialogs`."""

from __future__ import annotations

from textual.binding import Binding

from loopdeck.tui.dialogs import BY
from loopdeck.tui.panels import PlanPanel
from loopdeck.tui.run_panels import RunPanelsPart
from loopdeck.tui.shown import toast


class RunKeysPart(RunPanelsPart):
    BINDINGS = [
        Binding("w", "approvals", "Approvals", id="run.approvals"),
        Binding("t", "transcript", "Transcript", id="run.transcript"),
        Binding("m", "message", "Message", id="run.message"),
        # `m` on a run that has ended still opens its box (marked so): the letters typed next
        # are typed there, never taken as the run's keys.
        Binding("m", "message_ended", "Message", id="run.message_ended", show=False),
        Binding("escape", "back", "Fleet", id="run.back"),
        Binding("left_square_bracket", "plan(-1)", "Prev plan", id="plan.prev", show=False),
        Binding("right_square_bracket", "plan(1)", "Next plan", id="plan.next", show=False),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "approvals":
            return bool(self.link.pending() or self.link.questions())
        if action == "back":
            return bool(getattr(self.app, "fleet_home", False))
        if action == "message":
            return self.running and not self.quitting
        if action == "message_ended":
            return not (self.running and not self.quitting)
        return True

    def action_back(self) -> None:
        if self.view.finished:  # left after its stop was on screen
            self.mark_seen()
        back = getattr(self.app, "back_to_fleet", None)
        if back is not None:
            back()

    def action_stop(self) -> None:
        self.link.stop(by="console")
        self.notify("stopping after the current tools")

    def action_pause(self) -> None:
        if self.view.paused:
            self.link.resume(by="console")
        else:
            self.link.pause(by="console")

    def action_message(self) -> None:
        """`m`: a box for the operator's words; sent to the run, heard before its next turn."""
        from loopdeck.tui.message_dialog import MessageDialog

        def typed(text: str | None) -> None:
            if text is None:
                return
            if not self.running:
                toast(self, "the run has stopped: nobody is left to hear it", title="not sent")
                return
            self.link.message(text, by=BY)
            self.notify("message sent: the model hears it before its next turn")

        self.app.push_screen(MessageDialog(self.view.run_id), typed)

    def action_message_ended(self) -> None:
        from loopdeck.tui.message_dialog import MessageDialog

        toast(self, "the run has ended: nobody is left to hear a message", title="not sent")
        self.app.push_screen(MessageDialog(self.view.run_id, ended=True))

    def action_plan(self, delta: int) -> None:
        self.query_one(PlanPanel).browse(self.view, delta)

    def quit_killed(self, by: str) -> None:
        """Kill the live run without asking (a stop signal), and leave once it recorded it."""
        if self.quitting or not self.running:
            return
        self.quitting = True
        self.offers.shut_down()
        self.link.kill(by=by)

    def leave(self) -> None:
        self.flush()
        leave = getattr(self.app, "leave_run", None)
        if leave is not None:
            leave(self)
        else:
            self.app.exit(0)
