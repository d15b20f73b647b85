"""The goal check: calc.add adds and calc.mul still multiplies. Exit 0: met; exit 1, each stdout
line why not. Run in the working copy; nothing written there (no bytecode)."""

import sys

sys.path.insert(0, ".")
sys.dont_write_bytecode = True  # a __pycache__ would be a change in the working copy

try:
    import calc
except Exception as exc:  # the file the agent wrote may not even import
    print(f"calc.py does not import: {type(exc).__name__}: {exc}")
    sys.exit(1)
if calc.add(2, 3) != 5:
    print(f"calc.add(2, 3) is {calc.add(2, 3)!r}, not 5")
    sys.exit(1)
if calc.mul(4, 3) != 12:
    print(f"calc.mul(4, 3) is {calc.mul(4, 3)!r}, not 12")
    sys.exit(1)
