"""The env README.md builds from nothing ("An env of your own from nothing") passes
`loopdeck check` as README.md says it does: its two files are read from README.md itself."""

from __future__ import annotations

import re
from pathlib import Path

from loopdeck.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def _block(text: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no ```{language} block after the example's heading"
    return found[1]


def test_the_readmes_own_env_passes_check(tmp_path, capsys) -> None:
    text = README.read_text(encoding="utf-8")
    example = text[text.index("An env of your own from nothing") :]
    env = tmp_path / "counter"
    env.mkdir()
    (env / "scenario.toml").write_text(_block(example, "toml"), encoding="utf-8")
    (env / "env.py").write_text(_block(example, "python"), encoding="utf-8")
    assert main(["check", str(env)]) == 0
    said = capsys.readouterr().out
    assert "PASS  solve: goal_met (1 tool call) — the goal check passed after bump (c1)" in said
