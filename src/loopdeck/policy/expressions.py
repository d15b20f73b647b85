"""A rule's `when`: a CEL expression (Google's Common Expression Language), read and evaluated
by `cel-python`, its maintained engine; never a language of loopdeck's own.

A condition is read once, when its policy loads: a syntax error, a name that is none of
the attributes (`call`, `state`, `run`, `rule`, `time`), of CEL's type names (`string`,
`int`…: `type(call.args.path) == string`) or of a macro's own variable inside its macro, a
constant pattern that is no regular expression (`matches("calc(")`), a function CEL here
does not have (`lowerAscii`), or a condition that reads nothing and is no bool (`"1"`),
refuses the policy naming the rule. It holds only when it evaluates to `true`; an evaluation
that fails (a missing argument, a type mismatch), runs past `MOST_STEPS` (nested macros over
a long list) or gives something else is `ConditionFailed`, with CEL's words.

A condition evaluated as its run recorded it (a rebuild from the run's log) is not bound by
`MOST_STEPS` (a run recorded before the bound evaluated it whole), unless its run's record
says it failed past the bound (`bounded`): the rebuild evaluates it as the run did.

A condition a run recorded (`as_recorded`) is read as the load it was recorded under read it:
parsed, the checks added since made but not refusing it: what they refuse is kept (`refused`).
Such a condition is evaluated as the run evaluated it only while its run is rebuilt from its
log (`holds(…, as_recorded=True)`: the rebuilt run decides as the run did). Everywhere else
(a run going live, a fork past its fork point, a queued run) it is not evaluated: it fails
at every ask, closed. "It can only fail" is not so: CEL's `||` and `&&` absorb an error
(`nosuch == 1 || call.tool == "x"` holds), and an allow that held would let a call through.

Patterns are RE2's (as CEL's are), compiled once each, quietly: RE2 says nothing on stderr
of a pattern it refuses; the condition's words do.
"""

from __future__ import annotations

import functools
import sys
from datetime import datetime
from typing import Any

import celpy
import re2  # type: ignore[import-untyped]  # CEL's patterns: RE2 (cel-python's own)
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator, base_functions
from lark import Token, Tree

ROOTS = frozenset({"call", "state", "run", "rule", "time"})
# CEL's type names, as cel-python evaluates them (`type(x) == string`).
TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "uint", "string", "list", "map",
                        "null_type", "type", "timestamp", "duration"})  # fmt: skip
# Macros whose first argument names a variable of their own (`list.exists(x, x > 1)`).
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# What a condition may call: CEL's functions as cel-python has them, and its macros.
FUNCTIONS = frozenset(
    {name for name in base_functions if name.isidentifier() and name[0] != "_"}
    | MACROS
    | {"has", "dyn"}
)
# How many nodes one evaluation may visit: a condition is a hundred, a macro over a call's
# list of a thousand items some 20,000. Nested macros (or a huge list an agent sends) go
# past it and fail, closed, rather than hold the run's loop (~6 µs a node) on one ask.
MOST_STEPS = 50_000
PAST_STEPS = "not evaluated past"  # the words of a condition that failed past the bound
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


class NotABool(ConditionFailed):
    """A condition that gave something else than true or false: the rule's own fault,
    whatever the call (`policy test` fails a test that shows it)."""


@functools.cache
def _environment() -> celpy.Environment:
    """CEL's parser, built once, when a first policy is read. Building it raises the
    interpreter's recursion limit for the whole process (to 2500, for deeply nested CEL):
    it is put back, as how deep anything else in the process may go (a hostile JSON reply
    parsed before it is refused) is not the policy's to change. A condition nested too deep
    for it is refused when read, naming why."""
    limit = sys.getrecursionlimit()
    try:
        return celpy.Environment(runner_class=_BoundedRunner)
    finally:
        sys.setrecursionlimit(limit)


class Condition:
    def __init__(self, text: str, *, as_recorded: bool = False) -> None:
        self.text = text
        try:
            tree = _environment().compile(text)
        except CELParseError as exc:
            cedar = " (a condition is CEL: Cedar's permit/forbid is not read)" * _cedar(text)
            raise ExpressionError(f"not a CEL expression: {_parse_words(exc)}{cedar}") from None
        self.refused: str | None = None  # what today's checks refuse of a recorded one
        if not as_recorded:
            self._checked(tree)
            return
        try:
            self._checked(tree)
        except ExpressionError as exc:
            self.refused = str(exc)
            self._program = _program(tree)

    def _checked(self, tree: Tree[Token]) -> None:
        deep = _depth(tree)
        if deep > MOST_NESTED:
            raise ExpressionError(
                f"nested too deep to be evaluated (its parse tree is {deep} deep, at most"
                f" {MOST_NESTED}): write it flatter"
            )
        names = _root_names(tree)
        _known_functions(tree)
        unknown = sorted(names - ROOTS - TYPE_NAMES)
        if unknown:
            raise ExpressionError(
                f"unknown name {unknown[0]!r}: a condition reads {', '.join(sorted(ROOTS))}"
            )
        _constant_patterns(tree)
        self._program = _program(tree)
        if not names & ROOTS:  # it reads nothing: what it gives, it always gives
            try:
                self.holds({})
            except ConditionFailed as exc:
                raise ExpressionError(f"it reads no attribute and always fails: {exc}") from None

    def holds(
        self, activation: Activation, *, as_recorded: bool = False, bounded: bool = True
    ) -> bool:
        """Whether it holds on these attributes; a condition today's checks refuse is
        evaluated only `as_recorded` (a run rebuilt from its log), else it fails, closed.
        As recorded, it is bound by `MOST_STEPS` only where the run's record was (`bounded`)."""
        if self.refused is not None and not as_recorded:
            said = f"not evaluated: it would be refused if read today ({self.refused})"
            raise ConditionFailed(said)
        steps = _Steps(MOST_STEPS if bounded or not as_recorded else None)
        try:
            value = self._program.evaluate_within(activation, steps)
        except CELEvalError as exc:
            raise ConditionFailed(_first_line(exc)) from None
        except RecursionError:
            raise ConditionFailed("nested too deep to be evaluated here") from None
        except _TooLong:
            raise ConditionFailed(
                f"{PAST_STEPS} {MOST_STEPS:,} steps (nested macros, or a list too long"
                " for them): write it to do less"
            ) from None
        if isinstance(value, CELEvalError):
            raise ConditionFailed(_first_line(value))
        if isinstance(value, Exception):
            raise ConditionFailed(f"fails: {_first_line(value)}")
        if not isinstance(value, celtypes.BoolType):
            raise NotABool(f"gives {type(value).__name__} {value!s:.60}, not a bool")
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


def _cedar(text: str) -> bool:
    return text.lstrip().startswith(("permit", "forbid"))


def _first_line(exc: BaseException) -> str:
    said = str(exc.args[0]) if exc.args else str(exc)
    if said == "return error for overflow" and len(exc.args) == 3 and exc.args[2]:
        # cel-python's words for any ValueError: the cause's say what went wrong
        said = f"{getattr(exc.args[1], '__name__', 'error')}: {exc.args[2][0]}"
    said = said.split(" (in activation")[0].splitlines()[0].strip()
    return said if len(said) <= WORDS_CAP else said[: WORDS_CAP - 1] + "…"


def _root_names(tree: Tree[Token]) -> set[str]:
    """The names an expression reads at its root: a macro's own variable only outside the
    macro that binds it (`[1].exists(x, x > 0) && x.y` reads `x`)."""
    names: set[str] = set()
    stack: list[tuple[Tree[Token] | Token, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, bound = stack.pop()
        if not isinstance(node, Tree):
            continue
        if node.data == "ident":
            if str(node.children[0]) not in bound:
                names.add(str(node.children[0]))
            continue
        variable = _macro_variable(node)
        if variable is None:
            stack.extend((child, bound) for child in node.children)
            continue
        target, _, arguments = node.children[:3]
        assert isinstance(arguments, Tree)
        stack.append((target, bound))
        stack.extend((child, bound | {variable}) for child in arguments.children[1:])
    return names


def _macro_variable(node: Tree[Token]) -> str | None:
    """The variable a macro's call binds (`list.all(x, …)`: `x`), if `node` is one."""
    if node.data != "member_dot_arg" or len(node.children) < 3:
        return None
    if str(node.children[1]) not in MACROS or not isinstance(node.children[2], Tree):
        return None
    arguments = node.children[2].children
    first = arguments[0] if len(arguments) > 1 else None
    if not isinstance(first, Tree):
        return None
    idents = [n for n in first.iter_subtrees() if n.data == "ident"]
    return str(idents[0].children[0]) if len(idents) == 1 else None


_QUIET = re2.Options()
_QUIET.log_errors = False  # RE2's own log line on stderr, at every evaluation: never


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _QUIET)


def _matches(text: Any, pattern: Any) -> Any:
    """CEL's `matches`, as cel-python's (RE2, `search`), each pattern compiled once, quietly."""
    try:
        compiled = _compiled(str(pattern))
    except re2.error as exc:
        return CELEvalError(f"matches: {_pattern_words(pattern, exc)}")
    return celtypes.BoolType(compiled.search(str(text)) is not None)


def _pattern_words(pattern: Any, exc: Exception) -> str:
    said = exc.args[0] if exc.args else exc
    said = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    return f"{str(pattern)!r} is not a regular expression (RE2: {said})"


def _program(tree: Tree[Token]) -> Any:
    return _environment().program(tree, functions={"matches": _matches})


def _known_functions(tree: Tree[Token]) -> None:
    """A function or method no CEL here has (`lowerAscii`, `split`) is refused now: it
    would fail at every ask."""
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg":
            name = str(node.children[1])
        elif node.data == "ident_arg":
            name = str(node.children[0])
        else:
            continue
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {name!r}: a condition calls {', '.join(sorted(FUNCTIONS))}"
            )


class _TooLong(BaseException):
    """An evaluation past `MOST_STEPS`. A BaseException: cel-python turns an Exception
    raised inside a function into a value (or logs it); this one must end the evaluation."""


class _Steps:
    def __init__(self, most: int | None = MOST_STEPS) -> None:
        self.left = most  # None: no bound

    def take(self) -> None:
        if self.left is None:
            return
        self.left -= 1
        if self.left < 0:
            raise _TooLong


class _Bounded(Evaluator):
    """cel-python's interpreter, counting the nodes it visits (a macro's too) against one
    budget per evaluation."""

    def __init__(self, ast: Tree[Token], activation: Any, steps: _Steps) -> None:
        super().__init__(ast, activation)
        self.steps = steps

    def _visit_tree(self, tree: Tree[Token]) -> Any:
        self.steps.take()
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: Tree[Token]) -> Evaluator:
        return _Bounded(ast, self.activation, self.steps)


class _BoundedRunner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return self.evaluate_within(context, _Steps())

    def evaluate_within(self, context: Any, steps: _Steps) -> Any:
        return _Bounded(self.ast, self.new_activation(), steps).evaluate(context)


def _constant_patterns(tree: Tree[Token]) -> None:
    """A `matches` whose pattern reads nothing (a constant) is a regular expression RE2
    compiles, or `ExpressionError` now: it would fail every ask."""
    for node in tree.iter_subtrees():
        arguments: list[Any] = []
        if node.data == "member_dot_arg" and str(node.children[1]) == "matches":
            arguments = list(getattr(node.children[2], "children", []))[:1]
        elif node.data == "ident_arg" and str(node.children[0]) == "matches":
            arguments = list(getattr(node.children[1], "children", []))[1:2]
        for argument in arguments:
            if not isinstance(argument, Tree) or any(
                n.data in ("ident", "ident_arg") for n in argument.iter_subtrees()
            ):
                continue
            try:
                pattern = _program(argument).evaluate({})
            except (CELEvalError, _TooLong):
                continue  # it fails as it is evaluated, saying why
            if isinstance(pattern, str):  # a StringType, or what `+` made of two
                try:
                    _compiled(str(pattern))
                except re2.error as exc:
                    raise ExpressionError(_pattern_words(pattern, exc)) from None
