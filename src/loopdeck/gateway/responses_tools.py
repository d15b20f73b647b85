"""The tools a Responses request declares, and those an answer adds: the request's `tools`,
an input's `additional_tools` or client `tool_search_output` (an answer's own, or its server
tool search's), and a namespace's tools among them; which of them the gateway refuses
(`refusal`: the computer tool, a remote MCP server that runs its calls unasked).
"""

from __future__ import annotations

from loopdeck.gateway.answer import Body

TOOLS_IN = ("additional_tools", "tool_search_output")  # items that declare tools


def declared(body: Body) -> list[Body]:
    """Every tool the request declares: its `tools`, those an input item adds, and those of
    a namespace among them."""
    items = body.get("input")
    found = [*tools_of(body)]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") in TOOLS_IN:
            found += tools_of(item)
    return found


def tools_of(holder: Body) -> list[Body]:
    tools = holder.get("tools")
    found = [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []
    return [*found, *(inner for tool in found for inner in tools_of(tool))]


def refusal(tools: list[Body]) -> str | None:
    """Why declaring `tools` is refused (a computer tool, a remote MCP server run unasked)."""
    kinds = [str(t.get("type")) for t in tools]
    if said := sorted({kind for kind in kinds if kind.startswith("computer")}):
        return (f"the computer tool (`{'`, `'.join(said)}`) is refused: a `computer_call` the"
                " gateway takes out could only be answered with a screenshot, which it has"
                " none of")  # fmt: skip
    unasked = sorted({str(t.get("server_label")) for t in tools
                      if t.get("type") == "mcp" and t.get("require_approval") not in
                      (None, "always")})  # fmt: skip
    if unasked:
        return (f"the remote MCP server `{'`, `'.join(unasked)}` is refused: its"
                " `require_approval` is not `always`, so OpenAI's servers would run its"
                " calls with nobody asked; declare it with `require_approval: \"always\"`"
                " (each call then waits for the operator)")  # fmt: skip
    return None
