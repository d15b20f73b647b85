"""A gateway run's environment: the folder the agent works in (`workdir/working_copy.py`: its
state the folder's tree; its goal check `--check`, or `goal_check`, or an `env.py`'s `unmet`).

Its tools are the agent's, known only as its model calls them: each is made a tool spec the
first time a tool use names it, with the input schema the agent declared for it (so an
operator's edit is checked against it) and its risk said by `ToolRisks`. The agent runs its
tools; loopdeck records, keys and decides them, and an edit is carried out by the gateway, which
hands the agent the edited input.
"""

from __future__ import annotations

from typing import Any

from loopdeck.core.schema_args import args_model_for
from loopdeck.core.tools import ToolSpec
from loopdeck.workdir.working_copy import WorkingCopy


def _agents_own(_: Any) -> Any:
    raise RuntimeError("the agent runs its own tools; the gateway decides them")


class GatewayWorkspace(WorkingCopy):
    no_check = "nothing checks this run's goal: no --check, no goal_check"

    def tools(self) -> list[ToolSpec]:
        return []  # the agent's tools are learnt as its model names them (`tool_spec`)


def tool_spec(name: str, schema: Any, risk: str, source: str, not_editable: str = "") -> ToolSpec:
    """An agent's tool as loopdeck's: its declared input schema (a schema that is not valid
    JSON Schema, or none, takes any object), its risk and where that came from;
    `not_editable`: why an edit of its calls cannot be carried out ("": it can)."""
    try:
        model = args_model_for(name, schema if isinstance(schema, dict) else None)
    except ValueError:
        model = args_model_for(name, None)
    return ToolSpec(
        name=name,
        description=f"the agent's {name} tool",
        args_model=model,
        risk="read" if risk == "read" else "write",
        risk_source=source,
        fn=_agents_own,
        not_editable=not_editable,
    )
