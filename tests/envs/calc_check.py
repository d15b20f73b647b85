"""The goal check of the calc env folders (`calc_gemini`, `calc_opencode`, `calc_codex`,
`hostile_calc`), each naming it as `["{python}", "{envdir}/../calc_check.py", NAME...]`: each
function NAME of calc.py (all of `CHECKS` when none is named) gives what it must. Exit 0: met;
exit 1, each stdout line why not. Run in the working copy; nothing written there (no bytecode).
"""

import sys

sys.path.insert(0, ".")
sys.dont_write_bytecode = True  # a __pycache__ would be a change in the working copy

CHECKS = {"add": ((2, 3), 5), "mul": ((4, 3), 12)}  # calc.add adds; calc.mul still multiplies

try:
    import calc
except Exception as exc:  # the file the agent wrote may not even import
    print(f"calc.py does not import: {type(exc).__name__}: {exc}")
    sys.exit(1)
for name in sys.argv[1:] or CHECKS:
    args, expected = CHECKS[name]
    got = getattr(calc, name)(*args)
    if got != expected:
        print(f"calc.{name}{args} is {got!r}, not {expected}")
        sys.exit(1)
