"""The kinds of run loopdeck knows: one line each. A kind is a package with a `kind` module
whose `KIND` says its `scenario.toml` table, checks its env folder and opens its runs
(`core/run_kind.py`). Adding a kind is its package and one line here; nothing else branches
on kinds."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from loopdeck.core.run_kind import RunKind
from loopdeck.core.scenario import Scenario, ScenarioError, parse_setting

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


def kind_of(
    scenario: Scenario, where: Path | str = "scenario.toml", settings: Sequence[str] = ()
) -> RunKind:
    """The kind a scenario's table names, else the default; an unknown table is named, on
    the `--set` that made it if one did (`settings`). (A kind's module is light: what it
    runs is imported when it opens a run.)"""
    kinds = [kind_named(name) for name in KINDS]
    for kind in kinds:
        if kind.table is not None and kind.table in scenario.tables:
            return kind
    if scenario.tables:
        known = ", ".join(f"[{kind.table}]" for kind in kinds if kind.table)
        table = sorted(scenario.tables)[0]
        made = [text for text in settings if parse_setting(text)[0][:1] == [table]]
        if made:  # the table came from a `--set` (the file has none of that name)
            where = f"--set {made[-1]} (over {where})"
        raise ScenarioError(
            f"{where}: unknown table [{table}]; the kinds of run loopdeck knows: {known}"
        )
    return kind_named(DEFAULT)
