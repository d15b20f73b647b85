"""A question to the operator, over the live run: titled by who asks (the agent, the guard,
a budget), with the evidence to decide on, single keys for fixed choices, a text box only
where words are the answer, and a countdown where the run goes on alone.

Keys: the guard's question takes `s` stop (the app's stop key answers it here), `a` allow
once (only when the call can run), `n` nudge (a text box); a budget's takes `c` continue,
`r` raise (a box for the new cap), `s` stop; the agent's question is a text box. While a box
has the focus, letters are typed: `ctrl+s` stops, `ctrl+k` kills and `ctrl+q` quits, and
`esc` leaves the box so the plain keys work again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from loopdeck.core.budget_answer import read_answer
from loopdeck.core.events import QuestionAsked
from loopdeck.tui.keys_bar import KeysBar
from loopdeck.tui.panels import countdown_text
from loopdeck.tui.shown import markup, plain
from loopdeck.tui.shown_input import TYPING_KEYS, ShownInput
from loopdeck.tui.timers import every

CHOICE_KEYS = {
    "stop": "[b]s[/] stop the run",
    "allow": "[b]a[/] allow once",
    "nudge": "[b]n[/] nudge…",
    "continue": "[b]c[/] continue",
    "raise": "[b]r[/] raise the cap…",
}
BOXES = {
    "nudge": "what the model should hear (the call stays blocked); enter sends, esc back",
    "raise": "the new cap for this run; enter raises, esc back",
    "": "your answer, enter sends it to the model",
}
ACTS_ALONE = {
    "loop": "the guard acts alone in $left: it blocks the call and the run goes on",
}


@dataclass(frozen=True)
class AnswerText:
    question_id: str
    text: str


class QuestionDialog(ModalScreen[AnswerText | None]):
    """One question waiting for the operator; esc leaves it for later (the run waits)."""

    BINDINGS = [
        Binding("escape", "close", "Later", id="question.close"),
        Binding("a", "choose('allow')", "Allow once", id="question.allow"),
        Binding("n", "box('nudge')", "Nudge…", id="question.nudge"),
        Binding("c", "choose('continue')", "Continue", id="question.continue"),
        Binding("r", "box('raise')", "Raise…", id="question.raise"),
    ]

    def __init__(
        self,
        question_id: str,
        question: str,
        asked: QuestionAsked | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(classes="dialog")
        self.question_id = question_id
        self.question = question
        self.asked = asked
        self.choices: tuple[str, ...] = tuple(asked.choices) if asked else ()
        self._now = now
        self.box_for = ""  # what the open box answers: "" (free text), "nudge" or "raise"
        self.gone_said: str | None = None  # answered elsewhere or gone with its run: what is said
        title = (asked.title if asked else "") or "The agent asks"
        self._box = Vertical(id="approval-box")
        self._box.border_title = plain(f"Question {question_id}")
        self._title = Static(plain(title), id="answer-title")
        self._countdown = Static(id="answer-countdown")
        self._answer = ShownInput(placeholder=BOXES[""], id="answer-text")
        self._problem = Static(id="answer-problem")
        self._problem.display = False
        self._keys = Static(id="answer-keys")
        if self.choices:
            self._answer.display = False
        # Focused once shown (nothing looked up on mount): the box where words are the
        # answer, else the question, whose keys then work at once.
        self.AUTO_FOCUS = "#answer-body" if self.choices else "#answer-text"  # type: ignore[misc]
        self._tick()
        self._show_keys()

    def compose(self) -> ComposeResult:
        with self._box:
            yield self._title
            # The question and its evidence scroll; the keys below them always show.
            with VerticalScroll(id="answer-body"):
                yield Static(plain(self.question), id="answer-question")
                if self.asked and self.asked.evidence:
                    yield Static(self._evidence(), id="answer-evidence")
            with Vertical(id="answer-foot", classes="dialog-foot"):  # docked: always shown
                yield self._countdown
                yield self._answer
                yield self._problem
                yield self._keys
        yield KeysBar()

    def on_mount(self) -> None:
        if self.asked is not None and self.asked.acts_at is not None:
            every(self, 1.0, self._tick)

    def _evidence(self) -> Content:
        assert self.asked is not None
        values: dict[str, str] = {}
        for i, (label, value) in enumerate(self.asked.evidence):
            values |= {f"l{i}": label, f"v{i}": value}
        lines = [f"[b]$l{i}[/] $v{i}" for i in range(len(self.asked.evidence))]
        return markup("\n".join(lines), **values)

    def gone(self, said: str) -> None:
        """Its question was answered elsewhere (or nobody answered in time) while on screen:
        it stays, saying so, with no key left that answers, whatever box is open (the letters
        typed next never land on the run screen's keys); esc leaves it."""
        self.gone_said = said
        self._title.update(markup("[b $warning]No longer waiting for you[/]"))
        self._box.border_title = plain(f"Question {self.question_id} · no longer waiting")
        self._countdown.display = True
        words = "[b $warning]$said[/]: nothing typed here is sent"
        self._countdown.update(markup(words, said=said))
        self._say_problem("")
        self._keys.update("[b]esc[/] close")
        self.refresh_bindings()

    def _tick(self) -> None:
        if self.gone_said is not None:
            return
        asked = self.asked
        if asked is None or asked.acts_at is None or self._now is None:
            self._countdown.display = False
            return
        left = (asked.acts_at - self._now()).total_seconds()
        words = ACTS_ALONE.get(asked.topic, "the run goes on alone in $left")
        text: str | Content
        if left <= 0:
            text = "[b $warning]No answer in time:[/] the run has gone on alone."
        else:
            text = markup(f"[b $warning]{words}[/]", left=countdown_text(left))
        self._countdown.update(text)

    def _say_problem(self, text: str | Content) -> None:
        self._problem.update(text)
        self._problem.display = bool(text)

    def _show_keys(self) -> None:
        self.set_class(self.typing_box, "-typing")
        if self.typing_box:
            self._keys.update(f"[b]enter[/] send  [b]esc[/] back\n{TYPING_KEYS}")
            return
        if not self.choices:
            later = "[b]enter[/] answer  [b]esc[/] later (the run keeps waiting)"
            self._keys.update(f"{later}\n{TYPING_KEYS}")
            return
        keys = "  ".join(CHOICE_KEYS[c] for c in self.choices if c in CHOICE_KEYS)
        self._keys.update(f"{keys}  [b]esc[/] later\n[b]k[/] kill  [b]p[/] pause  [b]q[/] quit")

    @property
    def typing_box(self) -> bool:
        return bool(self.choices) and self._answer.display

    @property
    def typing(self) -> bool:
        return isinstance(self.focused, Input)

    @property
    def answers_stop(self) -> bool:
        """The app's stop key answers this question (`stop`) instead of stopping the run
        around it: the guard's and a budget's questions offer stop as their answer."""
        return "stop" in self.choices and self.gone_said is None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.gone_said is not None:
            return action == "close"
        if action in ("choose", "box"):
            return parameters[0] in self.choices and not self.typing
        return True

    def action_choose(self, choice: str) -> None:
        self.dismiss(AnswerText(self.question_id, choice))

    def answer_stop(self) -> None:
        self.action_choose("stop")

    def action_box(self, what: str) -> None:
        self.box_for = what
        self._answer.placeholder = BOXES[what]
        self._answer.value = ""
        self._answer.display = True
        self._say_problem("")
        self._show_keys()
        self._answer.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.gone_said is not None:  # kept as typed, sent nowhere
            return
        text = event.value.strip()
        if not text:
            self._say_problem("[b $warning]Nothing typed:[/] type an answer, or esc.")
            return
        answer = f"{self.box_for} {text}" if self.box_for else text
        if self.box_for == "raise" and self.asked is not None:
            said = read_answer(answer, self.asked.cap, self.asked.used)  # as the run reads it
            if isinstance(said, str):
                self._say_problem(markup("[b $error]Not taken:[/] $said", said=said))
                return
        self.dismiss(AnswerText(self.question_id, answer))

    def action_close(self) -> None:
        if self.gone_said is not None:
            self.dismiss(None)
            return
        if self.typing_box:  # the box goes; the keys come back
            self._answer.display = False
            self._say_problem("")
            self.box_for = ""
            self._show_keys()
            self.set_focus(None)
            return
        self.dismiss(None)
