"""A rule's `when`: a CEL expression (Google's Common Expression Language), read and evaluated
by `cel-python`, its maintained engine; never a language of loopdeck's own.

A condition is read once, when its policy loads: a syntax error, or a name that is none of
the attributes (`call`, `state`, `run`, `rule`, `time`, or a macro's own variable), refuses
the policy naming the rule. It holds only when it evaluates to `true`; an evaluation that
fails (a missing argument, a type mismatch) or gives something else is `ConditionFailed`,
with CEL's words.
"""

from __future__ import annotations

import functools
import sys
from datetime import datetime
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError
from lark import Token, Tree

ROOTS = frozenset({"call", "state", "run", "rule", "time"})
# Macros whose first argument names a variable of their own (`list.exists(x, x > 1)`).
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
WORDS_CAP = 300  # what an error says of itself (CEL's words can name a whole activation)

Activation = dict[str, Any]


# CEL's evaluator recurses a few frames per level of the parse tree (about ten levels per
# pair of parentheses): at the interpreter's usual limit (1000) a tree 250 deep fails. A
# condition is refused when read past this, never when a call is being decided.
MOST_NESTED = 150


class ExpressionError(ValueError):
    """A condition that cannot be read: its words say where."""


class ConditionFailed(Exception):
    """A condition that could not be evaluated on these attributes."""


@functools.cache
def _environment() -> celpy.Environment:
    """CEL's parser, built once, when a first policy is read. Building it raises the
    interpreter's recursion limit for the whole process (to 2500, for deeply nested CEL):
    it is put back, as how deep anything else in the process may go (a hostile JSON reply
    parsed before it is refused) is not the policy's to change. A condition nested too deep
    for it is refused when read, naming why."""
    limit = sys.getrecursionlimit()
    try:
        return celpy.Environment()
    finally:
        sys.setrecursionlimit(limit)


class Condition:
    def __init__(self, text: str) -> None:
        self.text = text
        try:
            tree = _environment().compile(text)
        except CELParseError as exc:
            raise ExpressionError(f"not a CEL expression: {_parse_words(exc)}") from None
        deep = _depth(tree)
        if deep > MOST_NESTED:
            raise ExpressionError(
                f"nested too deep to be evaluated (its parse tree is {deep} deep, at most"
                f" {MOST_NESTED}): write it flatter"
            )
        unknown = sorted(_root_names(tree) - ROOTS)
        if unknown:
            raise ExpressionError(
                f"unknown name {unknown[0]!r}: a condition reads {', '.join(sorted(ROOTS))}"
            )
        self._program = _environment().program(tree)

    def holds(self, activation: Activation) -> bool:
        try:
            value = self._program.evaluate(activation)
        except CELEvalError as exc:
            raise ConditionFailed(_first_line(exc)) from None
        except RecursionError:
            raise ConditionFailed("nested too deep to be evaluated here") from None
        if isinstance(value, CELEvalError):
            raise ConditionFailed(_first_line(value))
        if not isinstance(value, celtypes.BoolType):
            raise ConditionFailed(f"gives {type(value).__name__} {value!s:.60}, not a bool")
        return bool(value)


def _depth(tree: Tree[Token]) -> int:
    """How deep the parse tree goes (walked without recursion)."""
    deepest = 0
    stack: list[tuple[Tree[Token] | Token, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, Tree):
            stack.extend((child, depth + 1) for child in node.children)
    return deepest


def cel_value(value: Any) -> Any:
    """A fact as CEL sees it (maps, lists, strings, numbers, bools)."""
    return json_to_cel(value)


def cel_time(at: datetime) -> Any:
    return celtypes.TimestampType(at)


def _parse_words(exc: CELParseError) -> str:
    """The parser's own words on where it stopped, in one line."""
    column = getattr(exc, "column", None)
    cause = str(exc.__context__ or "").strip().splitlines()
    if not cause or "$END" in cause[0]:
        return f"it ends too soon, at column {column}"
    return cause[0]


def _first_line(exc: BaseException) -> str:
    said = str(exc.args[0]) if exc.args else str(exc)
    said = said.split(" (in activation")[0].splitlines()[0].strip()
    return said if len(said) <= WORDS_CAP else said[: WORDS_CAP - 1] + "…"


def _root_names(tree: Tree[Token]) -> set[str]:
    """The names an expression reads at its root, less the macros' own variables."""
    names: set[str] = set()
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "ident":
            names.add(str(node.children[0]))
        elif node.data == "member_dot_arg" and str(node.children[1]) in MACROS:
            arguments = node.children[2] if len(node.children) > 2 else None
            if isinstance(arguments, Tree) and arguments.children:
                first = arguments.children[0]
                if isinstance(first, Tree):
                    bound |= {str(n.children[0]) for n in first.iter_subtrees()
                              if n.data == "ident"}  # fmt: skip
    return names - bound
