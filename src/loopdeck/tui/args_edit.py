"""`e` on a write waiting for approval: its arguments as indented JSON in a box the operator
edits, checked on every change against the tool's argument schema (`check_edit`), what is
wrong (or what changed, field by field) said under the box. Only arguments that pass reach a
decision; the runner checks them once more with the tool's own model.

On a call that cannot carry an edit out (`not_editable`: the agent runs its own input) the
same box is what to tell the agent instead: what it holds is sent as a rejection whose reason
tells the agent to run it (`told`), never as an approval.

The box starts from the proposal's JSON with its controls and bidi characters written as
JSON escapes (`visible_json`: the same value, nothing the terminal would obey). What the
operator types or pastes is theirs, drawn with each such character as one mark."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, TextArea
from textual.widgets.text_area import Edit, EditResult

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.text import visible_in_place, visible_json
from loopdeck.core.write_approvals import arg_changes
from loopdeck.operator.arg_edits import check_edit, told_instead_of
from loopdeck.tui.shown import markup

SAID_CAP = 300  # characters of a problem said under the box (a schema error quotes values)
CHANGES_SHOWN = 3
# A longer line scrolls sideways instead of wrapping: Textual wraps and divides the whole line
# for each row it draws, seconds a key for a pasted megabyte.
WRAP_CAP = 10_000
NO_CHANGE = "[b $success]valid[/] · no change: the call runs as proposed"
NO_CHANGE_TOLD = (
    "[b $warning]no change:[/] type the input the agent should run instead "
    "(to run it as proposed: esc, then a)"
)


class ArgsEditor(TextArea):
    """A `TextArea` that draws each control or bidi character as one mark, never raw, and
    wraps its lines only while none is very long."""

    def __init__(self, text: str, **kwargs: Any) -> None:
        super().__init__(text, soft_wrap=_wraps(text.split("\n")), **kwargs)

    def get_line(self, line_index: int) -> Text:
        line = self.document.get_line(line_index)
        if not line.isprintable():
            line = visible_in_place(line)
        return Text(line, end="", no_wrap=True)

    def edit(self, edit: Edit) -> EditResult:
        if self.soft_wrap and len(edit.text) > WRAP_CAP:  # before it is wrapped once
            self.soft_wrap = False
        result = super().edit(edit)
        self.fit_wrap()
        return result

    def fit_wrap(self) -> None:
        wraps = _wraps(self.document.lines)
        if wraps != self.soft_wrap:
            self.soft_wrap = wraps


def _wraps(lines: list[str]) -> bool:
    return max(map(len, lines), default=0) <= WRAP_CAP


class ArgsEdit(Vertical):
    """The editor and its verdict. `edited`: the arguments as they stand, or None while
    they do not pass. `not_editable`: why the call cannot run an edit; the box then holds
    what to tell the agent to run instead."""

    def __init__(
        self, args: dict[str, Any], schema: dict[str, Any], not_editable: str = "", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.proposed = args
        self.schema = schema
        self.not_editable = not_editable
        self.edited: dict[str, Any] | None = args
        self.editor = ArgsEditor(visible_json(args), id="args-editor")
        self.editor.border_title = (
            "input to tell the agent to run instead (its call is rejected)"
            if not_editable
            else "arguments, as they will run"
        )
        self.verdict = Static(id="args-verdict")

    def compose(self) -> ComposeResult:
        yield self.editor
        yield self.verdict

    def on_mount(self) -> None:
        self.check(self.editor.text)

    def start(self) -> None:
        """Shown with the proposal's arguments again, the cursor in the box."""
        self.editor.load_text(visible_json(self.proposed))
        self.editor.fit_wrap()
        self.editor.focus()

    def approval(self, call_id: str, by: str) -> ApprovalDecision | None:
        """The approval with these arguments (a plain one when they are as proposed); None,
        with the bell, while they do not pass (what is wrong is said under the box)."""
        if self.edited is None:
            self.app.bell()
            return None
        args = None if self.edited == self.proposed else self.edited
        return ApprovalDecision(call_id=call_id, approved=True, by=by, args=args)

    def told(self, call_id: str, by: str) -> ApprovalDecision | None:
        """The rejection that tells the agent to run these arguments instead; None, with the
        bell, while they do not pass or are as proposed (said under the box)."""
        if self.edited is None or self.edited == self.proposed:
            self.app.bell()
            return None
        return told_instead_of(call_id, self.edited, self.not_editable, by)

    @on(TextArea.Changed, "#args-editor")
    def _changed(self, event: TextArea.Changed) -> None:
        event.stop()
        self.check(event.text_area.text)

    def check(self, text: str) -> None:
        args, problem = check_edit(text, self.schema)
        self.edited = args
        if args is None:
            said = problem if len(problem) <= SAID_CAP else problem[: SAID_CAP - 1] + "…"
            self.verdict.update(markup("[b $error]not valid:[/] $problem", problem=said))
            return
        changes = arg_changes(self.proposed, args)
        if not changes:
            self.verdict.update(NO_CHANGE_TOLD if self.not_editable else NO_CHANGE)
            return
        more = len(changes) - CHANGES_SHOWN
        shown = "\n".join(f"  {change}" for change in changes[:CHANGES_SHOWN])
        if more > 0:
            shown += f"\n  … and {more} more"
        said = "the agent is told to run it with" if self.not_editable else "changes"
        self.verdict.update(
            markup("[b $success]valid[/] · $said:\n$changes", said=said, changes=shown)
        )
