"""What the working copy's state costs an ACP run's tool call (issue 29): `WorkspaceEnvironment`
hashes the whole tree for every call, stat'ing each file and reading again only those whose
size or mtime moved. For each tree size: the first snapshot (every file read), a warm one
(nothing moved: only the walk and the stats), and one after a single file was written.

The tree is `acp_overhead.py --files=N`'s: a README and a hundred modules a package, plus a
`.git` and a `node_modules` folder of as many files, which the walk must not enter.

    .venv/bin/python bench/acp_workspace_hash.py [N ...]     (default: 1 100 1000 5000)

Each of warm and moved: the least of 20 and their median.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from loopdeck.acp_env.workspace import WorkspaceEnvironment

REPEATS = 20


def tree(root: Path, files: int) -> None:
    (root / "README.md").write_text("The bench agent's working copy.\n")
    for n in range(1, files):  # a source tree: a hundred modules a package
        package = root / f"package{n // 100}"
        package.mkdir(exist_ok=True)
        (package / f"module{n}.py").write_text(f"VALUE = {n}\n" * 20)
    for skipped in (".git/objects", "node_modules/lib"):
        folder = root / skipped
        folder.mkdir(parents=True)
        for n in range(files):
            (folder / f"blob{n}").write_text("not the agent's work\n")


def timed_ms(workspace: WorkspaceEnvironment) -> float:
    started = time.perf_counter()
    workspace.snapshot()
    return (time.perf_counter() - started) * 1000


def measure(files: int) -> str:
    with tempfile.TemporaryDirectory(prefix="loopdeck-acp-hash-") as name:
        root = Path(name)
        tree(root, files)
        workspace = WorkspaceEnvironment(root, {})
        first = timed_ms(workspace)
        assert len(workspace.snapshot()["files"]) == files  # nothing skipped is counted
        warm = [timed_ms(workspace) for _ in range(REPEATS)]
        moved = []
        for n in range(REPEATS):
            (root / "README.md").write_text(f"edit {n}\n")
            moved.append(timed_ms(workspace))
    return (
        f"{files:>6} files: first {first:8.2f} ms · warm {spread(warm)} · one file moved"
        f" {spread(moved)}"
    )


def spread(times: list[float]) -> str:
    """The least (the cost, with the machine's load least in the way) and the median."""
    return f"{min(times):8.3f} ms (median {statistics.median(times):.3f})"


def main(argv: list[str]) -> None:
    module = sys.modules[WorkspaceEnvironment.__module__]
    print(f"WorkspaceEnvironment.snapshot, from {module.__file__}")
    for files in [int(arg) for arg in argv] or [1, 100, 1000, 5000]:
        print(measure(files))


if __name__ == "__main__":
    main(sys.argv[1:])
