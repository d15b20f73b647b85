"""`loopdeck runs` reads the runs' rows without the runtime: no pydantic model and no event
class is imported to list them (issue 43: its fixed cost was the events' import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import loopdeck

SAMPLES = Path(__file__).resolve().parents[1] / "sample_envs"

LIST_AND_SAY = """
import contextlib, io, sys
from loopdeck.cli import main
for flags in ([], ["--json"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["runs", "--db", sys.argv[1], *flags])
    assert code == 0 and "{run}" in out.getvalue(), (code, out.getvalue())
print(sorted(m for m in sys.modules if m == "pydantic" or m == "loopdeck.core.events"))
"""


@pytest.mark.slow  # fresh interpreters, seconds: `make stress` runs it (CI too)
def test_listing_runs_imports_no_event_and_no_pydantic(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    ran = loopdeck("run", str(SAMPLES / "order_support"), "--headless", "--approve", "auto", db=db)
    assert ran.returncode == 0, ran.stderr
    run = loopdeck("runs", "--json", db=db).stdout.split('"run_id": "')[1][:12]
    code = LIST_AND_SAY.replace("{run}", run)
    listed = subprocess.run(
        [sys.executable, "-c", code, str(db)], capture_output=True, text=True, check=False
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "[]"
