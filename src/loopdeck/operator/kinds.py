"""The kinds of run loopdeck knows: one line each. A kind is a package with a `kind` module
whose `KIND` says its `scenario.toml` table, checks its env folder and opens its runs
(`core/run_kind.py`). Adding a kind is its package and one line here; nothing else branches
on kinds."""

from __future__ import annotations

import importlib
from pathlib import Path

from loopdeck.core.run_kind import RunKind
from loopdeck.core.scenario import Scenario, ScenarioError

KINDS: dict[str, str] = {
    "mcp": "loopdeck.mcp_env.kind",
    "acp": "loopdeck.acp_env.kind",
    "gateway": "loopdeck.gateway.kind",
    "python": "loopdeck.python_env.kind",  # the default: no table names another kind
}
DEFAULT = "python"


def kind_named(name: str) -> RunKind:
    kind: RunKind = importlib.import_module(KINDS[name]).KIND
    return kind


def kind_of(scenario: Scenario, where: Path | str = "scenario.toml") -> RunKind:
    """The kind a scenario's table names, else the default. (A kind's module is light: what
    it runs is imported when it opens a run.)"""
    kinds = [kind_named(name) for name in KINDS]
    for kind in kinds:
        if kind.table is not None and kind.table in scenario.tables:
            return kind
    if scenario.tables:
        known = ", ".join(f"[{kind.table}]" for kind in kinds if kind.table)
        raise ScenarioError(
            f"{where}: unknown table [{sorted(scenario.tables)[0]}]; the kinds of run"
            f" loopdeck knows: {known}"
        )
    return kind_named(DEFAULT)
