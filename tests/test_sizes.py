"""Every module of the package reads in one sitting, every function on one screen: a module
past MODULE_LINES or a function past FUNCTION_LINES is split by concern, not let grow."""

from __future__ import annotations

import ast
from pathlib import Path

import loopdeck

PACKAGE = Path(loopdeck.__file__).parent
MODULE_LINES = 400
FUNCTION_LINES = 60


def _modules() -> list[Path]:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50, f"found only {len(modules)} modules under {PACKAGE}"
    return modules


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_no_module_is_longer_than_it_can_be_read() -> None:
    lines = {_name(path): len(path.read_text().splitlines()) for path in _modules()}
    too_long = {name: n for name, n in lines.items() if n > MODULE_LINES}
    assert not too_long, f"modules over {MODULE_LINES} lines, split them by concern: {too_long}"


def test_no_function_is_longer_than_a_screen() -> None:
    too_long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long[f"{_name(path)}:{node.lineno} {node.name}"] = length
    assert not too_long, f"functions over {FUNCTION_LINES} lines: {too_long}"
