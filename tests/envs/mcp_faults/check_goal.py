"""The goal: the counter is at least 2."""

import json
import sys
from pathlib import Path

count = json.loads(Path("state.json").read_text())["count"] if Path("state.json").exists() else 0
if count < 2:
    print(f"the counter is {count}, not 2 yet")
    sys.exit(1)
