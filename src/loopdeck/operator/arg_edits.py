"""An operator's edit of a write's arguments, checked where it is typed: the console's edit
box (live, the message under the box) and `loopdeck approve --args`. The check is the tool's
argument schema, carried by the request (`ApprovalRequested.args_schema`), so an attached
console and the CLI check alike without the env's code; the runner checks once more with the
tool's own model (a refused edit is asked again, never run).

A call that cannot carry an edit out (`ApprovalRequest.not_editable`: the agent runs its own
input) is never approved with one: the edit becomes what happens instead (`told_instead_of`),
a rejection whose reason tells the agent to run that input, as the runtime records it."""

from __future__ import annotations

import json
from typing import Any

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.write_approvals import told_instead

EDIT_CAP = 1_000_000  # characters of an edit read at all: past this it is refused by name


def check_edit(text: str, schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The edited arguments, or None and what is wrong with them, in one line."""
    if len(text) > EDIT_CAP:
        return None, f"the arguments are {len(text):,} characters; at most {EDIT_CAP:,}"
    try:
        args = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    except RecursionError:
        return None, "not JSON this console can read: nested too deeply"
    if not isinstance(args, dict):
        return None, f"the arguments must be a JSON object, not {type(args).__name__}"
    if schema and (problem := _schema_problem(args, schema)):
        return None, problem
    return args, ""


def _schema_problem(args: dict[str, Any], schema: dict[str, Any]) -> str:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        validator = Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    except SchemaError:  # a schema this cannot use: the runner's check is the one left
        return ""
    except RecursionError:
        return "nested too deeply to check"
    if not errors:
        return ""
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path) or "arguments"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.message}{more}"


def told_instead_of(
    call_id: str, args: dict[str, Any], not_editable: str, by: str
) -> ApprovalDecision:
    """The rejection an edit of a call that cannot carry one out is made as: its reason tells
    the agent to run `args` instead (`not_editable`: why the edit cannot be applied)."""
    edit = ApprovalDecision(call_id=call_id, approved=True, by=by, args=args)
    return told_instead(edit, not_editable)
