"""The page a decision link opens: plain HTML, no script, one column that fits a 390 px phone,
every choice a real button (keyboard and touch alike), outside text always escaped (its
controls and bidi characters shown, not obeyed) and wrapped: no word widens the page.

It shows the run (env, state, budgets), the decision's evidence (a write's diff or its
arguments, the rationale, the state it was asked in; a question and what it decides on) and
the choices that decision takes, in a form that carries the server's guard against posts from
another site; or, when the link decides nothing, why.
"""

from __future__ import annotations

import html
import json
from datetime import datetime

from loopdeck.core.text import capped, moment_words, visible, visible_json
from loopdeck.operator.link_evidence import Evidence, LinkPage, RunShown
from loopdeck.operator.push_words import budget_words
from loopdeck.operator.records import CHOICE_WORDS

STYLE = """
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,sans-serif;background:#f6f6f4;color:#1b1b1b;
overflow-wrap:anywhere}
main{max-width:40rem;margin:0 auto;padding:14px}
h1{font-size:1.2rem;margin:.2rem 0 .6rem}
.run,.note{font-size:.9rem;color:#444;margin:.3rem 0}
.why{padding:12px;border-radius:8px;background:#fff3cd;border:1px solid #e0c36a}
.done{padding:12px;border-radius:8px;background:#e5f3e8;border:1px solid #86c394}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #ccc;
border-radius:6px;padding:8px;font-size:.85rem;max-height:60vh;overflow:auto}
.add{color:#0a6b1f}.del{color:#a3121f}
dl{display:grid;grid-template-columns:auto 1fr;gap:2px 10px;font-size:.9rem}
dt{color:#555}dd{margin:0;overflow-wrap:anywhere}
form{margin:.8rem 0}
button{display:block;width:100%;min-height:56px;margin:12px 0;padding:10px;font:600 1.1rem/1.2
system-ui,sans-serif;border-radius:10px;border:2px solid #777;background:#fff;color:#1b1b1b;
touch-action:manipulation}
button.yes{background:#1f6f3a;color:#fff;border-color:#1f6f3a}
button.no{background:#fff;color:#8c1d26;border-color:#8c1d26;border-style:dashed}
button.alt{background:#fff;color:#1f6f3a;border-color:#1f6f3a}
.choice{margin:0;padding:12px 0}
.choice+.choice{margin-top:20px;border-top:1px solid #bbb;padding-top:20px}
textarea,input[type=text]{width:100%;font-size:1rem;padding:8px;border-radius:6px;
border:1px solid #999}
textarea.args{font:.9rem/1.35 ui-monospace,monospace;min-height:10rem}
summary{min-height:44px;padding:10px 0;font-weight:600;cursor:pointer}
label{display:block;margin-top:.6rem;font-size:.9rem}
"""
# Each choice's own box, by the field name it posts: a box another choice posts is refused.
BOXES: dict[str, tuple[str, ...]] = {
    "approve": (), "edit": ("args",), "reject": ("reason",), "answer": ("text", "choice"),
    "applied": (), "not-applied": (),
}  # fmt: skip
BOX_OF = {"args": "the edit's arguments box", "reason": "Reject's reason box", "text": "a box"}
CHOICE_NAMES = {
    "approve": "Approve", "edit": "Approve with these arguments", "reject": "Reject",
    "answer": "an answer", "applied": "It took effect", "not-applied": "It did not",
}  # fmt: skip
EDIT_CAP = 100_000  # characters of arguments the page offers to edit (a phone's textarea)
BOX_LABELS = {  # a choice that takes words: its own box, sent only with its own button
    "nudge": "nudge: what the model should hear (the call stays blocked)",
    "raise": "raise: the new cap for this run",
}
FIELD_CAP = 20000  # characters of one piece of evidence the page shows


def _e(text: object) -> str:
    """Outside text for the page: its controls and bidi characters shown as escapes (as the
    console shows them), never obeyed; then HTML-escaped."""
    return html.escape(visible(str(text)), quote=True)


def _value(text: str) -> str:
    """A value the form posts back as it is (the guard, its address, a choice)."""
    return html.escape(text, quote=True)


def document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="same-origin">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def refused(words: str) -> str:
    return document("loopdeck: link refused", f'<h1>loopdeck</h1><p class="why">{_e(words)}</p>')


def _run(run: RunShown | None) -> str:
    if run is None:
        return ""
    said = f"run {run.run_id} · {run.env} · {run.state}"
    budgets = f'<p class="run">budgets: {_e(budget_words(run.budgets))}</p>' if run.budgets else ""
    return f'<p class="run">{_e(said)}</p>{budgets}'


def _when(moment: datetime | None) -> str:
    return moment_words(moment) if moment else ""


def _diff(diff: str) -> str:
    lines = []
    for line in diff[:FIELD_CAP].splitlines():
        header = line.startswith(("+++", "---"))
        kind = "" if header else "add" if line[:1] == "+" else "del" if line[:1] == "-" else ""
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _evidence(evidence: Evidence) -> str:
    parts = [f"<h1>{_e(evidence.headline)}</h1>"]
    facts = [("question" if evidence.what == "question" else "call", evidence.call_id)]
    if evidence.expires_at:
        facts.append(("valid until", _when(evidence.expires_at)))
    if evidence.state_hash:
        facts.append(("asked in state", evidence.state_hash[:16]))
    if evidence.asked_again:
        facts.append(("asked again", evidence.asked_again))
    facts += list(evidence.evidence)
    parts.append("<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts) + "</dl>")
    if evidence.question:
        parts.append(f"<pre>{_e(capped(evidence.question, FIELD_CAP))}</pre>")
    if evidence.rationale:
        parts.append(f'<p class="note">why: {_e(capped(evidence.rationale, FIELD_CAP))}</p>')
    if evidence.diff:
        parts.append(_diff(evidence.diff))
    elif evidence.args is not None:
        shown = json.dumps(evidence.args, indent=2, ensure_ascii=False, default=str)
        parts.append(f"<pre>{_e(capped(shown, FIELD_CAP))}</pre>")
    return "".join(parts)


def _choices(evidence: Evidence, action: str, guard: str, typed: str | None = None) -> str:
    hidden = f'<input type="hidden" name="csrf" value="{_value(guard)}">'
    form = f'<form method="post" action="{_value(action)}">{hidden}'
    if evidence.what == "approval":
        return _approval(evidence, hidden, action, typed)
    if evidence.what == "outcome":
        return (
            f'{form}<button class="yes" name="action" value="applied">It took effect</button>'
            '<button class="no" name="action" value="not-applied">It did not</button></form>'
        )
    if not evidence.choices:
        return (
            f'{form}<input type="hidden" name="action" value="answer">'
            '<label for="answer">your answer</label>'
            '<textarea id="answer" name="text" rows="3" autofocus></textarea>'
            '<button class="yes">Answer</button></form>'
        )
    answer = f'{form}<input type="hidden" name="action" value="answer">'
    bare = "".join(
        f'<button name="choice" value="{_value(c)}">{_e(c)}</button>'
        for c in evidence.choices
        if c not in CHOICE_WORDS
    )
    forms = [f"{answer}{bare}</form>"] if bare else []
    for c in (c for c in evidence.choices if c in CHOICE_WORDS):  # its box sent with it alone
        box = f"words-{c}"
        forms.append(
            f'{answer}<label for="{box}">{_e(BOX_LABELS.get(c, CHOICE_WORDS[c]))}</label>'
            f'<input type="text" id="{box}" name="text" required>'
            f'<button name="choice" value="{_value(c)}">{_e(c)} (with the {CHOICE_WORDS[c]}'
            " above)</button></form>"
        )
    return "".join(forms)


def _approval(evidence: Evidence, hidden: str, action: str, typed: str | None) -> str:
    """Approve, an edit, Reject: each its own form, sending only its own box; the two one-tap
    decisions kept apart by the others (a slip of the thumb lands on neither)."""
    form = f'<form method="post" action="{_value(action)}"'
    focus = "" if typed is not None else " autofocus"  # a refused edit: its box instead
    approve = (
        f'{form} class="choice">{hidden}<button class="yes" name="action" value="approve"'
        f"{focus}>Approve as proposed</button></form>"
    )
    reject = (
        f'{form} class="choice">{hidden}'
        '<label for="reason">reason for rejecting (the model reads it)</label>'
        '<textarea id="reason" name="reason" rows="2"></textarea>'
        '<button class="no" name="action" value="reject">Reject</button></form>'
    )
    return approve + _edit(evidence, f"{form}>{hidden}", typed) + reject


def _edit(evidence: Evidence, form: str, typed: str | None) -> str:
    """A write whose tool takes arguments: its arguments as JSON, to change and approve."""
    if evidence.not_editable:
        said = (
            f"Not editable: {evidence.not_editable}. To have other input run, reject it and"
            " say in the reason what to run instead."
        )
        return f'<p class="note choice">{_e(said)}</p>'
    if not evidence.editable:
        return ""
    text = typed if typed is not None else visible_json(evidence.args or {})
    if len(text) > EDIT_CAP:
        said = "Its arguments are too long to edit here: `loopdeck approve --args`, or the console."
        return f'<p class="note choice">{_e(said)}</p>'
    opened = " open" if typed is not None else ""
    focus = " autofocus" if typed is not None else ""
    return (
        f'<details class="choice"{opened}><summary>Edit the arguments, then approve</summary>'
        f'{form}<label for="args">arguments, as they will run (JSON)</label>'
        f'<textarea id="args" class="args" name="args" rows="10" spellcheck="false"'
        f' autocapitalize="off" autocomplete="off"{focus}>\n{html.escape(text, quote=False)}'
        "</textarea>"
        '<button class="alt" name="action" value="edit">Approve with these arguments</button>'
        "</form></details>"
    )


def page(shown: LinkPage, action: str, guard: str) -> str:
    """The page for a link: the decision to take, or where it stands."""
    body = []
    if shown.words:
        kind = "done" if shown.done else "why"
        body.append(f'<p class="{kind}">{_e(shown.words)}</p>')
    body.append(_run(shown.run))
    if shown.evidence is not None and shown.standing in ("open", "moved", "expired"):
        body.append(_evidence(shown.evidence))
    if shown.evidence is not None and shown.standing in ("open", "moved"):
        body.append(_choices(shown.evidence, action, guard, shown.typed))
    return document("loopdeck: a decision", "".join(body))
