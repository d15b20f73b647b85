"""A tuning's guard reads a patched function's source as `inspect.getsource` does
(`tuning/guards.source_digest`), without walking every loaded module: the same text, so the
same digest, for each function a tuning replaces and for the shapes a function's source takes."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from textual.cache import LRUCache
from textual.strip import Strip

from loopdeck.tuning import guards, strip_caches, textual_cycles


def _decorated(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any) -> Any:
        return function(*args)

    return wrapper


@_decorated
def _under_a_decorator(x: int) -> int:
    return x + 1


class _Shapes:
    @staticmethod
    def nested(x: int) -> int:
        def inner() -> int:  # a function inside: part of the source
            return x

        return inner()

    async def waited(self) -> None:
        """An async method, its docstring kept."""
        await self.told(
            1,
        )  # the closing line is part of it

    async def told(self, x: int) -> None:
        """A docstring alone: read by `inspect` itself (its code cannot say where it ends)."""

    def one_line(self) -> int: return 1  # fmt: skip


REPLACED = {
    "Strip.__init__": Strip.__init__,
    "Strip.divide": Strip.divide,
    "Strip.crop_extend": Strip.crop_extend,
    "LRUCache.clear": LRUCache.clear,
}
SHAPES = {
    "under a decorator": _under_a_decorator,
    "static, a function inside": _Shapes.nested,
    "async method": _Shapes.waited,
    "docstring alone": _Shapes.told,
    "one line": _Shapes.one_line,
    "lambda": lambda x: x * 2,
}


@pytest.mark.parametrize(
    "function", [*REPLACED.values(), *SHAPES.values()], ids=[*REPLACED, *SHAPES]
)
def test_the_digest_is_that_of_inspects_source(function: Callable[..., Any]) -> None:
    expected = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
    assert guards.source_digest(function) == expected


def test_the_tunings_are_written_against_this_textual() -> None:
    assert strip_caches.refusal() is None
    assert textual_cycles.refusal() is None


def test_a_function_without_python_source_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="not a function written in Python"):
        guards.source_digest(len)
