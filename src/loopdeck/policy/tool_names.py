"""The tools a policy's rules name (`call.tool == "x"`, `!=`, `in [...]`), checked against
the tools of the run it is loaded for: a rule naming a tool the run does not have never
fires as written (a misspelt tool in a deny rule denies nothing). A level of the run's own
(`--policy`, the env folder's) is refused by name, the closest tool suggested; the user's,
shared by every env, is only warned of (it may name another env's tools).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from celpy import celtypes
from lark import Token, Tree

from loopdeck.policy.document import PolicyError
from loopdeck.policy.engine import Policy
from loopdeck.policy.expressions import _environment, _program

SHARED_LEVELS = ("user",)  # a file every env's runs read: warned of, not refused


def unknown_tools(policy: Policy, tools: Collection[str]) -> list[str]:
    """Warnings for the shared levels' rules naming a tool not in `tools`; `PolicyError`
    for the first such rule of another level. Nothing when `tools` is empty (a run whose
    tools are learnt as it goes: a gateway's)."""
    if not tools:
        return []
    warnings = []
    for level in policy.levels:
        for index, rule in enumerate(level.rules, 1):
            for name in tools_named(rule.condition.text):
                if name in tools:
                    continue
                said = f"{level.path}: rule {index} ({rule.id}): {_no_such(name, tools)}"
                if level.name not in SHARED_LEVELS:
                    raise PolicyError(f"{said}; the rule would never fire")
                warnings.append(f"{said}; it never fires in this run (the user's policy)")
    return warnings


def _no_such(name: str, tools: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(tools), n=1)
    said = f"names tool {name!r}, which this run does not have"
    if close:
        return f"{said} (did you mean {close[0]!r}?)"
    return f"{said} (its tools: {', '.join(sorted(tools))})"


def tools_named(condition: str) -> tuple[str, ...]:
    """The tools a condition names by `call.tool` compared with a string (`==`, `!=`) or
    found in a list of them (`in`)."""
    return _tools_named(_environment().compile(condition))


RELATIONS = ("relation_eq", "relation_ne", "relation_in")


def _tools_named(tree: Tree[Token]) -> tuple[str, ...]:
    """The tools a condition names by `call.tool` compared with a string (`==`, `!=`) or
    found in a list of them (`in`)."""
    named: list[str] = []
    for node in tree.iter_subtrees():  # `relation` > (`relation_eq` > left), right
        if node.data != "relation" or len(node.children) != 2:
            continue
        operator, right = node.children
        if not isinstance(operator, Tree) or operator.data not in RELATIONS:
            continue
        left = operator.children[0]
        if not (isinstance(left, Tree) and isinstance(right, Tree)):
            continue
        for tool_side, other in ((left, right), (right, left)):
            if _is_call_tool(tool_side):
                named.extend(_strings(other, listed=operator.data == "relation_in"))
    return tuple(dict.fromkeys(named))


def _unwrapped(node: Tree[Token] | Token) -> Tree[Token] | Token:
    """Past the grammar's one-child levels (`relation`, `addition`, ... down to `member`)."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "literal":
        if node.data in ("ident", "list_lit", "exprlist"):
            break
        node = node.children[0]
    return node


def _is_call_tool(node: Tree[Token]) -> bool:
    dot = _unwrapped(node)
    if not (isinstance(dot, Tree) and dot.data == "member_dot" and len(dot.children) == 2):
        return False
    root = _unwrapped(dot.children[0])
    return (
        str(dot.children[1]) == "tool" and isinstance(root, Tree) and root.data == "ident"
        and str(root.children[0]) == "call"
    )  # fmt: skip


def _strings(node: Tree[Token], *, listed: bool) -> list[str]:
    """The string constants `node` is: one, or (`listed`) each of a list's."""
    found = _unwrapped(node)
    items: list[Tree[Token] | Token] = [found]
    if listed:
        if not (isinstance(found, Tree) and found.data == "list_lit" and found.children):
            return []
        exprlist = found.children[0]
        items = list(exprlist.children) if isinstance(exprlist, Tree) else []
    strings = []
    for item in items:
        literal = _unwrapped(item)
        if isinstance(literal, Tree) and literal.data == "literal":
            value = _program(literal).evaluate({})
            if isinstance(value, celtypes.StringType):
                strings.append(str(value))
    return strings
