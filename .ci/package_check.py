"""CI: the package as a user gets it. Builds the wheel once; then on each Python it supports
(3.11, 3.12 and 3.13, from pyenv or PATH) installs it into a fresh venv, lets pip check that
`requires-python` and the dependency pins hold there, and from a temporary folder (no checkout
in sight) lists the bundled envs, checks each, runs one by name headless, says which tunings
the console refuses there (`loopdeck.tuning`), and opens the console in tmux with the light
theme. A Python that is not installed is skipped, said in one line; 3.11 must be there.

    python3 .ci/package_check.py        (from the repository root; stdlib only)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def brightness(code: str) -> int:
    """0-255 for an SGR background: `5;N` (the 256-colour palette tmux maps to) or `2;R;G;B`."""
    parts = [int(p) for p in code.split(";")]
    if parts[0] == 2:
        return sum(parts[1:4]) // 3
    n = parts[1]
    if n >= 232:
        return 8 + 10 * (n - 232)
    if n >= 16:
        n -= 16
        levels = [0, 95, 135, 175, 215, 255]
        return (levels[n // 36] + levels[n // 6 % 6] + levels[n % 6]) // 3
    return 255 if n in (7, 15) else 0


def mostly_light(colored: str) -> bool:
    """The background most cells are painted with is a light one."""
    codes = re.findall(r"48;((?:5;\d+)|(?:2;\d+;\d+;\d+))", colored)
    if not codes:
        return False
    common = max(set(codes), key=codes.count)
    return brightness(common) >= 200


def screen(session: str, escapes: bool = False) -> str:
    flags = ["-e"] if escapes else []
    return subprocess.run(
        ["tmux", "capture-pane", "-p", *flags, "-t", session],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip


# Each supported Python: its pyenv build on these machines, else `pythonX.Y` on PATH.
PYENV = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
PYTHONS = {"3.11": "3.11.7", "3.12": "3.12.1", "3.13": "3.13.0"}
REQUIRED = "3.11"  # what the collector's tuning was measured on: never skipped


class Failed(Exception):
    """A step of one Python's check failed: the others still run."""


def sh(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    print("$", " ".join(map(str, argv)), flush=True)
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        shown = " ".join(Path(a).name if isinstance(a, Path) else a for a in argv[:3])
        said = (done.stderr.strip() or done.stdout.strip() or "(nothing said)").splitlines()
        raise Failed(
            f"{shown} ... failed ({done.returncode}): {said[-1]}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def interpreters() -> list[tuple[str, Path]]:
    found = []
    for minor, version in PYTHONS.items():
        candidates = [PYENV / version / "bin/python3", shutil.which(f"python{minor}")]
        python = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
        if python is not None:
            found.append((minor, python))
        elif minor == REQUIRED:
            sys.exit(f"package check: Python {minor} is required and not installed ({PYENV})")
        else:
            print(f"package check: Python {minor} SKIPPED: not installed ({PYENV / version})")
    return found


def use_the_cli(loopdeck: Path, elsewhere: Path, env: dict[str, str]) -> None:
    listed = json.loads(sh(loopdeck, "envs", "--json", cwd=elsewhere, env=env))
    names = {e["env"] for e in listed}
    if not {"order_support", "repo_triage", "service_outage"} <= names:
        raise Failed(f"the bundled envs are not all listed: {names}")
    print(sh(loopdeck, "envs", cwd=elsewhere, env=env))
    for name in sorted(names):
        print(sh(loopdeck, "check", name, cwd=elsewhere, env=env))
    out = sh(
        loopdeck, "run", "service_outage", "--script", "solve", "--headless", "--json",
        cwd=elsewhere, env=env,
    )  # fmt: skip
    summary = json.loads(out.strip().splitlines()[-1])
    if summary["stop_reason"] != "goal_met":
        raise Failed(f"service_outage --script solve ended {summary}")
    print(f"service_outage --script solve: {summary['stop_reason']}")


def use_the_console(loopdeck: Path, elsewhere: Path, env: dict[str, str], name: str) -> None:
    session = f"loopdeck-ci-{os.getpid()}-{name}"
    command = f"cd {elsewhere} && env -u COLUMNS -u LINES {loopdeck} console --theme light"
    tmux_env = [f"-e{k}={env[k]}" for k in ("HOME", "LOOPDECK_DB")]
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", *tmux_env,
         command],
        check=True,
    )  # fmt: skip
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end:
            text = screen(session)
            if re.search(r"service_outage", text) and "theme" not in text.lower():
                break
            time.sleep(0.2)
        else:
            raise Failed(f"the console did not show the stored run:\n{screen(session)}")
        colored = screen(session, escapes=True)
        if not mostly_light(colored):
            raise Failed(f"the console is not in the light theme:\n{colored[:2000]}")
        print(screen(session))
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def check_on(python: Path, wheel: Path, work: Path) -> str:
    """The wheel installed and used on one Python; what its console's tuning refuses there."""
    venv = work / "venv"
    sh(python, "-m", "venv", venv)
    sh(venv / "bin/python", "-m", "pip", "install", "-q", wheel)
    sh(venv / "bin/python", "-m", "pip", "check")  # every installed pin holds together
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPDECK_")}
    env |= {"HOME": str(work / "home"), "LOOPDECK_DB": str(work / "runs.db")}
    refused = sh(
        venv / "bin/python", "-c",
        "from loopdeck import tuning; print('\\n'.join(tuning.for_console()))",
        cwd=elsewhere, env=env,
    ).strip()  # fmt: skip
    print(f"the console's tuning refuses here: {refused or '(nothing)'}", flush=True)
    use_the_cli(venv / "bin/loopdeck", elsewhere, env)
    # tmux turns a `.` in a session's name into `_`: the name has none
    use_the_console(venv / "bin/loopdeck", elsewhere, env, work.name.replace(".", "-"))
    shutil.rmtree(venv, ignore_errors=True)
    return refused


def main() -> None:
    pythons = interpreters()
    results: list[tuple[str, bool, str]] = []
    with tempfile.TemporaryDirectory(prefix="loopdeck-package-") as tmp:
        dist = Path(tmp) / "dist"
        try:
            sh(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", dist)
        except Failed as exc:
            sys.exit(f"package check: the wheel does not build: {exc}")
        wheel = next(dist.glob("loopdeck-*.whl"))
        for minor, python in pythons:
            print(f"=== Python {minor} ({python})", flush=True)
            work = Path(tmp) / minor
            work.mkdir()
            try:
                refused = check_on(python, wheel, work)
            except Failed as exc:
                print(exc, flush=True)
                results.append((minor, False, str(exc).splitlines()[0]))
                continue
            results.append((minor, True, refused or "(none)"))
    print("package check, summary:")
    for minor, ok, said in results:
        verdict = "passed" if ok else "FAILED"
        shown = said.replace("\n", "\n      ")
        print(f"  Python {minor}: {verdict}; " + (f"tunings refused: {shown}" if ok else said))
    if not all(ok for _, ok, _ in results):
        sys.exit("package check: failed")
    print("package check: passed")


if __name__ == "__main__":
    main()
