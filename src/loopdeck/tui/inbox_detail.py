"""The inbox's detail of its selected entry: a write (why, its plan step, its arguments), a
question, or a write whose outcome is unknown; outside text only in markup's slots."""

from __future__ import annotations

from textual.content import Content

from loopdeck.core.text import visible_json
from loopdeck.operator.inbox import InboxEntry, PendingOutcome, PendingQuestion
from loopdeck.tui.shown import markup

UNKNOWN = (
    "[b $warning]outcome unknown:[/] approved, but it timed out, failed midway or was cut "
    "short: did it take effect?"
)


def described(entry: InboxEntry) -> Content:
    ids = {"run": entry.run_id, "env": entry.env, "call": entry.call_id, "pushed": entry.pushed}
    pushed = "\n[i]$pushed[/]" if entry.pushed else ""  # `--notify`: where, till when
    if isinstance(entry, PendingOutcome):
        ended = "" if entry.live else "   [dim]the run has ended[/]"
        return markup(
            f"[b]run[/] $run · $env   [b]call[/] $call   [b]tool[/] $tool{ended}\n{UNKNOWN}\n"
            f"[b]arguments[/]\n$args{pushed}\n\n[b]o[/] say whether it took effect",
            tool=entry.tool,
            args=visible_json(entry.args),
            **ids,
        )
    if isinstance(entry, PendingQuestion):
        return markup(
            "[b]run[/] $run · $env   [b]question[/] $call\n[b]the agent asks you[/]\n"
            f"$question{pushed}\n\n[b]a[/] answer it",
            question=entry.question,
            **ids,
        )
    again = "[b $warning]asked again:[/] $again\n" if entry.asked_again else ""
    why = "$why" if entry.rationale else "[dim]no text[/]"
    return markup(
        "[b]run[/] $run · $env   [b]call[/] $call   [b]tool[/] $tool   "
        "risk [b $risk-write]write[/]\n"
        f"[b]plan step[/] $step\n[b]why[/] {why}\n{again}[b]arguments[/]\n$args{pushed}\n\n"
        "[b]a[/] approve  [b]e[/] edit, then approve  [b]g[/] approve and grant  [b]r[/] reject",
        tool=entry.tool,
        step=entry.plan_step or "—",
        why=entry.rationale,
        again=entry.asked_again,
        args=visible_json(entry.args),
        **ids,
    )
