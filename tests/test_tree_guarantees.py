"""What the working copy's state (`workdir/tree.py`) sees that an agent could otherwise change
unseen (the red team's holes, issue 38): a link to a folder (a package beating calc.py on
import), a file swapped for a link to the same content, mode bits (chmod +x, setuid), empty
folders and FIFOs; and, inside the folders it skips, `.git/config`, `.git/hooks/`,
`.venv/bin/` and `.venv/pyvenv.cfg`. And the goal check, which never imports a bytecode
cache forged in the working copy."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from loopdeck.workdir.goal_check import run_goal_check
from loopdeck.workdir.tree import FileTree

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def files(tree: FileTree) -> dict[str, str]:
    got: dict[str, str] = tree.snapshot()["files"]
    return got


def work(tmp_path: Path) -> tuple[Path, FileTree]:
    root = tmp_path / "work"
    root.mkdir()
    (root / "calc.py").write_text(BROKEN)
    return root, FileTree(root)


def test_a_link_to_a_folder_is_an_entry(tmp_path: Path) -> None:
    root, tree = work(tmp_path)
    before = files(tree)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text(FIXED)
    (root / "calc").symlink_to(elsewhere)
    after = files(tree)
    assert "calc" in after and "calc" not in before
    assert "calc/__init__.py" not in after  # never followed


def test_a_file_swapped_for_a_link_to_the_same_content_changes_the_state(tmp_path: Path) -> None:
    root, tree = work(tmp_path)
    (tmp_path / "copy.py").write_text(BROKEN)
    before = files(tree)
    (root / "calc.py").unlink()
    (root / "calc.py").symlink_to(tmp_path / "copy.py")
    assert files(tree)["calc.py"] != before["calc.py"]


def test_mode_bits_are_in_the_state(tmp_path: Path) -> None:
    root, tree = work(tmp_path)
    plain = files(tree)["calc.py"]
    os.chmod(root / "calc.py", 0o755)
    executable = files(tree)["calc.py"]
    os.chmod(root / "calc.py", 0o4755)
    setuid = files(tree)["calc.py"]
    assert len({plain, executable, setuid}) == 3


def test_empty_folders_and_fifos_are_entries(tmp_path: Path) -> None:
    root, tree = work(tmp_path)
    before = files(tree)
    (root / "empty").mkdir()
    os.mkfifo(root / "pipe")
    after = files(tree)
    assert "empty/" in after and "pipe" in after
    assert set(after) - set(before) == {"empty/", "pipe"}


def test_git_config_hooks_and_the_venvs_bin_are_watched(tmp_path: Path) -> None:
    root, tree = work(tmp_path)
    for folder in (".git/hooks", ".git/objects", ".venv/bin", ".venv/lib", "node_modules/x"):
        (root / folder).mkdir(parents=True)
    (root / ".git/config").write_text("[core]\n")
    (root / ".git/hooks/pre-commit.sample").write_text("#!/bin/sh\n")
    (root / ".venv/bin/python").write_text("#!/bin/sh\n")
    before = files(tree)
    (root / ".git/config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (root / ".git/hooks/pre-commit").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    (root / ".venv/bin/python").write_text("#!/bin/sh\nexit 0\n")
    (root / ".venv/pyvenv.cfg").write_text("home = /evil\n")
    (root / ".git/objects/ab").write_text("blob")  # not watched: large, churning
    (root / "node_modules/x/index.js").write_text("evil()")  # not watched: see README
    after = files(tree)
    changed = {p for p in after.keys() | before.keys() if after.get(p) != before.get(p)}
    assert changed == {
        ".git/config",
        ".git/hooks/pre-commit",
        ".venv/bin/python",
        ".venv/pyvenv.cfg",
    }, changed


def test_the_goal_check_never_imports_a_forged_bytecode_cache(tmp_path: Path) -> None:
    root, _ = work(tmp_path)
    source = root / "calc.py"
    stat = source.stat()
    code = compile(FIXED, str(source), "exec")
    from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore[attr-defined]

    forged = _code_to_timestamp_pyc(code, int(stat.st_mtime), stat.st_size)
    cache = Path(importlib.util.cache_from_source(str(source)))
    cache.parent.mkdir()
    cache.write_bytes(forged)
    check = [sys.executable, "-c", "import sys, calc; sys.exit(0 if calc.add(2, 3) == 5 else 1)"]
    assert run_goal_check(check, root, 30) == ["the goal check says not met"]
    assert cache.read_bytes() == forged  # and it wrote nothing there
