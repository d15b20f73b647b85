"""The layers, read from the source: every import of every module under src/loopdeck (at the
top, inside functions, under TYPE_CHECKING), checked against what its layer may import.

Read with `ast`, not by importing: an import made only inside a function, or only for the type
checker, is an edge all the same, and nothing has to be installed or reachable to check.
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "loopdeck"
LAYERS = (
    "core", "store", "llm", "operator", "tui", "cli", "tuning", "workdir",
    "python_env", "mcp_env", "acp_env", "gateway", "policy",
)  # fmt: skip
# Each kind of run is a package of its own, registered in `operator/kinds.py` by module path:
# no kind imports another (what two share is in `workdir` or `core`), and nothing but its own
# package imports it (`tests/test_run_kinds.py`).
KINDS = ("python_env", "mcp_env", "acp_env", "gateway")
ABOVE_KINDS = frozenset({"store", "llm", "operator", "tui", "cli", "tuning", "textual"})

# What each layer must not import (a layer or a third-party top-level package).
FORBIDDEN: dict[str, frozenset[str]] = {
    "core": frozenset(
        {"store", "llm", "operator", "tui", "cli", "tuning", "workdir", "policy", *KINDS}
        | {"mcp", "acp"}
    ),
    # Policy as code: decides over core's facts; below the operator's door, beside the kinds.
    "policy": frozenset(
        {"store", "llm", "operator", "tui", "cli", "tuning", "workdir", *KINDS, "mcp", "acp"}
        | {"textual"}
    ),
    # What the kinds that work in a folder share (the guardian, the goal check): below them.
    "workdir": frozenset({*ABOVE_KINDS, *KINDS, "mcp", "acp"}),
    # The kinds of run: below the operator's door, fenced from each other.
    "python_env": frozenset({*ABOVE_KINDS, "mcp_env", "acp_env", "gateway", "mcp", "acp"}),
    "mcp_env": frozenset({*ABOVE_KINDS, "python_env", "acp_env", "gateway", "acp"}),
    "acp_env": frozenset({*ABOVE_KINDS, "python_env", "mcp_env", "gateway", "mcp"}),
    # Its upstream is a model: it reaches `llm` (one of ABOVE_KINDS) only as ONLY_THROUGH says;
    # its server is aiohttp's.
    "gateway": frozenset({*ABOVE_KINDS, "python_env", "mcp_env", "acp_env", "mcp", "acp"}),
    "store": frozenset({"operator", "tui", "cli", "tuning", "workdir", *KINDS, "mcp", "acp"}),
    "llm": frozenset({"store", "operator", "tui", "cli", "workdir", *KINDS, "mcp", "acp"}),
    "operator": frozenset({"tui", "cli", "textual", *KINDS}),
    "tui": frozenset({"store", "cli", "workdir", *KINDS, "mcp", "acp"}),
    # Process tuning is a fence below the layers that apply it.
    "tuning": frozenset({"store", "operator", "tui", "cli"}),
}

# Where a layer may reach into another only through named modules. The CLI reaches the store
# through operator/records.py; it reads only the store's location rules and error types from
# store/base.py, which loads no engine (its parser and `--help` stay light).
ONLY_THROUGH: dict[tuple[str, str], frozenset[str]] = {
    ("cli", "store"): frozenset({"loopdeck.store.base"}),
    # The gateway's upstream: LiteLLM configured before it is imported (`loader.py`: the local
    # price map, never the network's), a provider's failure classified and its credentials
    # checked (`client.py`). Nothing else of `llm`: no profile, no loop of loopdeck's own.
    ("gateway", "llm"): frozenset({"loopdeck.llm.loader", "loopdeck.llm.client"}),
}

# Edges that are still there because their move is another part of the work, as
# (importing module, imported module). Green while they remain; any edge not listed fails.
# Remove a pair once its move lands (the test says so when a listed edge is gone).
STILL_TO_MOVE: frozenset[tuple[str, str]] = frozenset()

# Circles between single modules that are still there, each as its set of modules; any other
# fails. None is left.
KNOWN_MODULE_CIRCLES: frozenset[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    file: Path  # relative to src/
    line: int
    imported: str  # the imported module, dotted ("loopdeck.store.queries", "textual.app")

    def __str__(self) -> str:
        return f"src/{self.file}:{self.line}: {self.module} imports {self.imported}"


def module_name(path: Path, root: Path = SRC) -> str:
    dotted = ".".join(path.relative_to(root).with_suffix("").parts)
    return dotted.removesuffix(".__init__")


def imports_of(path: Path, root: Path = SRC) -> list[Import]:
    """Every import statement in the file, wherever it stands."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            # `from loopdeck.store import queries` imports the module: name it, not the package.
            names = [_submodule(root, base, alias.name) for alias in node.names]
        else:
            continue
        found.extend(Import(module, path.relative_to(root), node.lineno, name) for name in names)
    return list(dict.fromkeys(found))  # `from x import a, b` of one module: said once


def _submodule(root: Path, base: str, name: str) -> str:
    """`base.name` when that is a module or package under root, else `base` (a name in it)."""
    path = root.joinpath(*base.split("."), name)
    return f"{base}.{name}" if path.with_suffix(".py").exists() or path.is_dir() else base


@functools.cache
def every_import() -> list[Import]:
    """Read once for the tests of this module (it is not changed while they run)."""
    return [i for path in sorted(PACKAGE.rglob("*.py")) for i in imports_of(path)]


def room(dotted: str) -> str:
    """The part of the package a module belongs to: a layer ("store"), a module at the
    package's root ("loopdeck.collector"), the package itself ("loopdeck"), or, outside
    loopdeck, the top-level package ("textual")."""
    parts = dotted.split(".")
    if parts[0] != "loopdeck":
        return parts[0]
    if len(parts) == 1:
        return "loopdeck"
    return parts[1] if parts[1] in LAYERS else f"loopdeck.{parts[1]}"


def forbidden(i: Import) -> bool:
    src, dst = room(i.module), room(i.imported)
    if (src, dst) in ONLY_THROUGH:
        return i.imported not in ONLY_THROUGH[src, dst]
    return dst in FORBIDDEN.get(src, ())


def violations(imports: list[Import]) -> list[Import]:
    return [i for i in imports if forbidden(i)]


def cycles(imports: list[Import]) -> list[list[str]]:
    """Circles between the rooms of loopdeck (layers and root modules), each as the rooms
    along it; found by a depth-first search over the room graph."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        src, dst = room(i.module), room(i.imported)
        if i.imported.startswith("loopdeck") and src != dst:
            graph.setdefault(src, set()).add(dst)
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circle = path[path.index(node) :]
            if not any(set(circle) == set(seen) for seen in found):
                found.append([*circle, node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    return found


def test_no_layer_imports_what_it_must_not() -> None:
    imports = every_import()
    bad = [i for i in violations(imports) if (i.module, i.imported) not in STILL_TO_MOVE]
    if bad:
        pytest.fail("imports across a layer boundary:\n" + "\n".join(map(str, bad)))


def test_the_edges_still_to_move_are_still_there() -> None:
    """A pair in STILL_TO_MOVE whose import is gone is taken off the list, so it cannot come
    back unnoticed."""
    present = {(i.module, i.imported) for i in violations(every_import())}
    gone = sorted(STILL_TO_MOVE - present)
    if gone:
        pytest.fail(f"no longer imported, remove from STILL_TO_MOVE: {gone}")


def test_no_circles_between_the_rooms() -> None:
    imports = every_import()
    found = cycles(imports)
    lines = []
    for circle in found:
        lines.append(" -> ".join(circle))
        for a, b in itertools.pairwise(circle):
            lines += [f"    {i}" for i in imports if (room(i.module), room(i.imported)) == (a, b)]
    if found:
        pytest.fail("import circles:\n" + "\n".join(lines))


def module_circles(imports: list[Import]) -> list[frozenset[str]]:
    """Modules of loopdeck that import each other in a loop: the strongly connected
    components of more than one module (Tarjan's algorithm, without recursion)."""
    modules = {i.module for i in imports}
    graph: dict[str, list[str]] = {m: [] for m in sorted(modules)}
    for i in imports:
        if i.imported in modules and i.imported != i.module:
            graph[i.module].append(i.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_no_new_circles_between_modules() -> None:
    imports = every_import()
    found = module_circles(imports)
    new = [circle for circle in found if circle not in KNOWN_MODULE_CIRCLES]
    lines = [
        str(i) for circle in new for i in imports if i.module in circle and i.imported in circle
    ]
    if new:
        pytest.fail("modules that import each other:\n" + "\n".join(lines))
    gone = [sorted(circle) for circle in KNOWN_MODULE_CIRCLES if circle not in found]
    if gone:
        pytest.fail(f"no longer a circle, remove from KNOWN_MODULE_CIRCLES: {gone}")


# The checker itself: each rule catches what it is there for.


def _write(root: Path, files: dict[str, str]) -> list[Import]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [i for path in sorted(root.rglob("*.py")) for i in imports_of(path, root)]


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("from loopdeck.store.base import Store\n", "loopdeck.store.base"),
        ("def f():\n    import loopdeck.store.queries\n", "loopdeck.store.queries"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from loopdeck.store import deciding\n",
            "loopdeck.store.deciding",
        ),
        ("from loopdeck import store\n", "loopdeck.store"),
        ("from ..store import queries\n", "loopdeck.store.queries"),
    ],
    ids=["top", "in-a-function", "type-checking", "from-the-package", "relative"],
)
def test_the_checker_sees_every_kind_of_import(tmp_path: Path, source: str, imported: str) -> None:
    store = {f"loopdeck/store/{name}.py": "" for name in ("__init__", "queries", "deciding")}
    imports = _write(tmp_path, {**store, "loopdeck/tui/screen.py": source})
    [bad] = violations(imports)
    assert bad.imported == imported and bad.module == "loopdeck.tui.screen"
    assert "loopdeck/tui/screen.py:" in str(bad) and f"imports {imported}" in str(bad)


def test_the_cli_reaches_the_store_only_through_its_base(tmp_path: Path) -> None:
    store = {f"loopdeck/store/{name}.py": "" for name in ("__init__", "base", "queries")}
    imports = _write(
        tmp_path,
        {
            **store,
            "loopdeck/cli/ok.py": "from loopdeck.store.base import Location\n",
            "loopdeck/cli/bad.py": "def f():\n    from loopdeck.store import queries\n",
        },
    )
    assert [str(i) for i in violations(imports)] == [
        "src/loopdeck/cli/bad.py:2: loopdeck.cli.bad imports loopdeck.store.queries"
    ]


def test_the_gateway_reaches_llm_only_through_its_loader_and_client(tmp_path: Path) -> None:
    llm = {f"loopdeck/llm/{name}.py": "" for name in ("__init__", "loader", "client", "profile")}
    imports = _write(
        tmp_path,
        {
            **llm,
            "loopdeck/gateway/ok.py": "from loopdeck.llm.loader import litellm_module\n"
            "from loopdeck.llm.client import classify\nfrom aiohttp import web\n",
            "loopdeck/gateway/bad.py": "def f():\n    from loopdeck.llm import profile\n",
            "loopdeck/acp_env/bad.py": "from loopdeck.gateway import ok\n",
            "loopdeck/gateway/worse.py": "import loopdeck.acp_env.bad\nimport mcp\n",
        },
    )
    assert sorted(str(i) for i in violations(imports)) == [
        "src/loopdeck/acp_env/bad.py:1: loopdeck.acp_env.bad imports loopdeck.gateway.ok",
        "src/loopdeck/gateway/bad.py:2: loopdeck.gateway.bad imports loopdeck.llm.profile",
        "src/loopdeck/gateway/worse.py:1: loopdeck.gateway.worse imports loopdeck.acp_env.bad",
        "src/loopdeck/gateway/worse.py:2: loopdeck.gateway.worse imports mcp",
    ]


def test_the_checker_finds_a_circle_through_a_root_module(tmp_path: Path) -> None:
    imports = _write(
        tmp_path,
        {
            "loopdeck/operator/a.py": "from loopdeck import helpers\n",
            "loopdeck/helpers.py": "def f():\n    from loopdeck.operator import a\n",
            "loopdeck/core/b.py": "import json\n",
        },
    )
    assert cycles(imports) == [["loopdeck.helpers", "operator", "loopdeck.helpers"]]
    assert not violations(imports)
    assert module_circles(imports) == [frozenset({"loopdeck.helpers", "loopdeck.operator.a"})]


# Settings: every `LOOPDECK_*` variable is read in `loopdeck/settings.py` and nowhere else.
SETTINGS_MODULE = "loopdeck.settings"


@dataclass(frozen=True)
class EnvironmentRead:
    module: str
    file: Path
    line: int
    variable: str

    def __str__(self) -> str:
        return f"src/{self.file}:{self.line}: {self.module} reads {self.variable}"


def environment_reads(path: Path, root: Path = SRC) -> list[EnvironmentRead]:
    """Each read of a `LOOPDECK_*` variable from an environment mapping (`os.environ[...]`,
    `.get`, `in`, `os.getenv`, any name ending in `environ`), the variable written out or held
    in a module-level name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    named = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }

    def variable(node: ast.expr) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else None
        if isinstance(node, ast.Name):
            value = named.get(node.id)
        return value if isinstance(value, str) and value.startswith("LOOPDECK_") else None

    def is_environ(node: ast.expr) -> bool:
        text = ast.unparse(node)
        return text.endswith("environ") or text == "os.getenv"

    found = []
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if is_environ(func) or (isinstance(func, ast.Attribute) and is_environ(func.value)):
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None and (name := variable(key)) is not None:
            module = module_name(path, root)
            found.append(EnvironmentRead(module, path.relative_to(root), node.lineno, name))
    return found


def every_environment_read(root: Path = SRC) -> list[EnvironmentRead]:
    return [
        r
        for path in sorted((root / "loopdeck").rglob("*.py"))
        for r in environment_reads(path, root)
    ]


def test_settings_are_read_only_in_the_settings_module() -> None:
    bad = [r for r in every_environment_read() if r.module != SETTINGS_MODULE]
    if bad:
        pytest.fail(
            "LOOPDECK_* read outside loopdeck/settings.py (add a field to Settings):\n"
            + "\n".join(map(str, bad))
        )


def test_the_checker_sees_every_kind_of_environment_read(tmp_path: Path) -> None:
    path = tmp_path / "loopdeck" / "tui" / "screen.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "import os\nVAR = 'LOOPDECK_A'\n"
        "a = os.environ.get('LOOPDECK_B')\nb = os.environ[VAR]\nc = os.getenv('LOOPDECK_C')\n"
        "def f(environ):\n    return 'LOOPDECK_D' in environ and environ.get('LOOPDECK_E')\n"
        "d = os.environ.get('HOME')\n"
    )
    assert [(r.line, r.variable) for r in environment_reads(path, tmp_path)] == [
        (3, "LOOPDECK_B"), (4, "LOOPDECK_A"), (5, "LOOPDECK_C"),
        (7, "LOOPDECK_D"), (7, "LOOPDECK_E"),
    ]  # fmt: skip


# The process environment outside `settings.py`: only where it is another program's, each
# module with what it reads or passes. A new one is a setting to add to `Settings`, or a
# reason to add here.
ENVIRONMENT_NOT_OURS: dict[str, str] = {
    "loopdeck.acp_env.agent_process": "an ACP agent's environment: ours with the env's [agent] env",
    "loopdeck.acp_env.terminals": "an agent's terminal command's environment",
    "loopdeck.gateway.agent_process": "a gateway agent's environment, credentials left out",
    "loopdeck.workdir.agent_command": "${VAR} in an agent's command line, as a shell would",
    "loopdeck.llm.loader": "LiteLLM's own variables, set before it is imported",
    "loopdeck.llm.litellm_passes": "LiteLLM's LITELLM_PRINT_STANDARD_LOGGING_PAYLOAD",
    "loopdeck.cli.runs": "Textual's TEXTUAL_DRIVER: is this console served to a browser",
    "loopdeck.cli.spare_console": "the size a served console is drawn at, for Textual",
    "loopdeck.operator.otel_spans": "OpenTelemetry's OTEL_SERVICE_NAME",
    "loopdeck.operator.otel_export": "OpenTelemetry's OTEL_EXPORTER_OTLP_*TIMEOUT",
    "loopdeck.operator.push_words": "every secret's value, never to be said in a push",
    "loopdeck.store.spill": "XDG_RUNTIME_DIR, where a spill may go",
}


def _environment_users(root: Path = SRC) -> set[str]:
    users = set()
    for path in sorted((root / "loopdeck").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            environment = isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
            if environment and isinstance(node.value, ast.Name) and node.value.id == "os":
                users.add(module_name(path, root))
    return users


def test_the_environment_is_read_in_settings_or_where_it_is_another_programs() -> None:
    users = _environment_users() - {SETTINGS_MODULE}
    assert users - set(ENVIRONMENT_NOT_OURS) == set(), "read it through Settings"
    assert set(ENVIRONMENT_NOT_OURS) - users == set(), "no longer reads it: take it off the list"
