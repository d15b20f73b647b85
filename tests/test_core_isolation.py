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
