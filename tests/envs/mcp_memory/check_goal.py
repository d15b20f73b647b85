"""The goal of `mcp_memory`: the graph in the working copy's memory.jsonl has an entity
`release` observed 'v1.2 shipped'."""

import json
import pathlib
import sys

path = pathlib.Path("memory.jsonl")
lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
items = [json.loads(line) for line in lines if line.strip()]
met = any(
    item.get("type") == "entity"
    and item.get("name") == "release"
    and "v1.2 shipped" in item.get("observations", [])
    for item in items
)
if not met:
    print("no entity `release` observed 'v1.2 shipped' in memory.jsonl")
sys.exit(0 if met else 1)
