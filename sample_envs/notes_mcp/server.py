"""notes_mcp's server: a small notes service over MCP (stdio, or `--http PORT`), written with
the official SDK's server side. Its notes live in `notes.json` in its working folder (the
run's working copy), so the goal check reads what the tools wrote.

Tools: `list_notes` and `read_note` (read-only), `write_note` (a write, says so),
`delete_note` (no annotations at all: loopdeck treats it as a write), `job_status` (read-only,
a poller the scenario exempts from the guard). Resource: `notes://all`, every note.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

STORE = Path("notes.json")
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

server = MCPServer("notes", version="1.0")
polls = {"count": 0}


def _notes() -> dict[str, str]:
    return dict(json.loads(STORE.read_text(encoding="utf-8"))) if STORE.exists() else {}


def _save(notes: dict[str, str]) -> None:
    STORE.write_text(json.dumps(notes, indent=1, sort_keys=True), encoding="utf-8")


@server.tool(annotations=READ)
def list_notes() -> list[str]:
    """The keys of every note."""
    return sorted(_notes())


@server.tool(annotations=READ)
def read_note(key: str) -> str:
    """The text of the note `key`."""
    notes = _notes()
    if key not in notes:
        raise ToolError(f"no note named {key!r}")
    return notes[key]


@server.tool(annotations=WRITE)
def write_note(key: str, text: str) -> str:
    """Write the note `key` (replacing it if it is there)."""
    notes = _notes()
    notes[key] = text
    _save(notes)
    return f"wrote {key} ({len(text)} characters)"


@server.tool()
def delete_note(key: str) -> str:
    """Delete the note `key`."""
    notes = _notes()
    if key not in notes:
        raise ToolError(f"no note named {key!r}")
    del notes[key]
    _save(notes)
    return f"deleted {key}"


@server.tool(annotations=READ)
def job_status() -> str:
    """The nightly export job: running, then done after a few polls."""
    polls["count"] += 1
    return "done" if polls["count"] >= 3 else "running"


@server.resource("notes://all", mime_type="application/json")
def all_notes() -> str:
    """Every note, as JSON."""
    return json.dumps(_notes(), sort_keys=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
