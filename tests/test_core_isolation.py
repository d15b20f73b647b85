"""What each layer may import, checked in a fresh interpreter."""

import subprocess
import sys


def loaded(imports: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` are in sys.modules after `import <imports>` in a new process."""
    code = f"import sys, {imports}\nprint(','.join(m for m in {watched!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [name for name in proc.stdout.strip().split(",") if name]


def test_core_imports_neither_textual_nor_sqlite_nor_litellm() -> None:
    watched = ("textual", "sqlite3", "aiosqlite", "litellm", "loopdeck.store", "loopdeck.tui")
    assert loaded("loopdeck.core, loopdeck.core.runtime, loopdeck.core.envdir", watched) == []


def test_the_operator_layer_imports_no_textual() -> None:
    imports = (
        "loopdeck.operator.runview, loopdeck.operator.transcript, loopdeck.operator.links,"
        " loopdeck.operator.launch"
    )
    assert loaded(imports, ("textual", "loopdeck.tui")) == []


def test_the_cli_and_the_console_module_import_no_model_no_runtime() -> None:
    """What `loopdeck run`'s first frame waits for: no pydantic, no LiteLLM, no runtime, no
    operator layer, no run screen (they are imported behind that frame)."""
    watched = (
        "pydantic",
        "litellm",
        "loopdeck.core",
        "loopdeck.operator",
        "loopdeck.tui.run_screen",
    )
    assert loaded("loopdeck.cli, loopdeck.tui.app", watched) == []


def test_the_store_interface_imports_no_backend() -> None:
    """`store/base.py` is what both backends import; only `store/opening.py` imports them (a
    backend importing the module that imports it was a circle). The CLI's parser reads the
    store's location rules from it without loading either engine."""
    engines = (
        "sqlite3",
        "aiosqlite",
        "psycopg",
        "loopdeck.store.sqlite",
        "loopdeck.store.postgres",
    )
    assert loaded("loopdeck.store.base, loopdeck.cli.parser", engines) == []
    assert loaded("loopdeck.store.opening", engines) == [
        "sqlite3",
        "aiosqlite",
        "loopdeck.store.sqlite",
    ]
