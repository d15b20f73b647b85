import subprocess
import sys


def test_core_imports_neither_textual_nor_sqlite_nor_litellm() -> None:
    code = (
        "import sys, loopdeck.core, loopdeck.core.runtime, loopdeck.core.envdir\n"
        "bad = [m for m in ('textual', 'sqlite3', 'aiosqlite', 'litellm', 'loopdeck.store',"
        " 'loopdeck.tui') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_the_operator_layer_imports_no_textual() -> None:
    code = (
        "import sys, loopdeck.operator.runview, loopdeck.operator.transcript,"
        " loopdeck.operator.links, loopdeck.operator.launch\n"
        "print(','.join(m for m in ('textual', 'loopdeck.tui') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
