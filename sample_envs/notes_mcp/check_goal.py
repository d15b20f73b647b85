"""notes_mcp's goal check, run in the working copy: exit 0 when the release note says the
version shipped and the draft is gone; else exit 1 with one line per unmet reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

store = Path("notes.json")
notes = json.loads(store.read_text(encoding="utf-8")) if store.exists() else {}
unmet = []
if notes.get("release") != "v1.2 shipped":
    unmet.append(f"the release note says {notes.get('release')!r}, not 'v1.2 shipped'")
if "draft" in notes:
    unmet.append("the draft note is still there")
for line in unmet:
    print(line)
sys.exit(1 if unmet else 0)
