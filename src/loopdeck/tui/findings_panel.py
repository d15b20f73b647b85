"""The Findings panel: what the run noticed that its operator must see, as it is found (the
view's `RunFindings`). The changes no approved call explains come first (`⚠`); then, as they
came, each round's review verdict with its reasons and each finding an agent's run made (`⚑`:
a change while a command ran, content no permission showed, an upstream's failure). All of it
outside text, shown as written."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from loopdeck.operator.run_findings import RoundVerdict
from loopdeck.operator.runview import RunView
from loopdeck.tui.panels import paint

VERDICT_VAR = {"pass": "$verdict-pass", "fail": "$verdict-fail", "stalled": "$verdict-stalled"}


class FindingsPanel(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="findings-body")

    def show(self, view: RunView) -> None:
        body = self.query_one("#findings-body", Static)
        findings = view.findings
        if findings.empty:
            paint(body, "[dim]no review yet[/dim]")
            return
        lines: list[str] = []
        said: dict[str, str] = {}

        def slot(text: str) -> str:
            said[f"s{len(said)}"] = text
            return f"$s{len(said) - 1}"

        for change in findings.unrequested:  # what no approval explains comes first
            lines.append(f"[b $error]⚠[/] {slot(change)}")
        for found in findings.found:
            if isinstance(found, RoundVerdict):
                var = VERDICT_VAR.get(found.verdict, "$foreground")
                lines.append(f"round {found.round}  [b {var}]{found.verdict.upper()}[/]")
                lines += [f"  · {slot(reason)}" for reason in found.reasons]
            else:
                lines.append(f"[b $warning]⚑[/] round {found.round}  {slot(found.text)}")
        paint(body, "\n".join(lines), said)
