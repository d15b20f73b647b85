"""CI: the package as a user gets it. Builds the wheel, installs it into a fresh venv, and from
a temporary folder (no checkout in sight) lists the bundled envs, checks one, runs one by name
headless, and opens the console in tmux with the light theme.

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


def sh(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    print("$", " ".join(map(str, argv)), flush=True)
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def screen(session: str, escapes: bool = False) -> str:
    flags = ["-e"] if escapes else []
    return subprocess.run(
        ["tmux", "capture-pane", "-p", *flags, "-t", session],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="loopdeck-package-") as tmp:
        work = Path(tmp)
        sh(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", work / "dist")
        wheel = next((work / "dist").glob("loopdeck-*.whl"))
        sh(sys.executable, "-m", "venv", work / "venv")
        sh(work / "venv/bin/python", "-m", "pip", "install", "-q", wheel)
        elsewhere = work / "elsewhere"
        elsewhere.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPDECK_")}
        env |= {"HOME": str(work / "home"), "LOOPDECK_DB": str(work / "runs.db")}
        loopdeck = work / "venv/bin/loopdeck"

        listed = json.loads(sh(loopdeck, "envs", "--json", cwd=elsewhere, env=env))
        names = {e["env"] for e in listed}
        assert {"order_support", "repo_triage", "service_outage"} <= names, names
        print(sh(loopdeck, "envs", cwd=elsewhere, env=env))
        for name in sorted(names):
            print(sh(loopdeck, "check", name, cwd=elsewhere, env=env))
        out = sh(
            loopdeck, "run", "service_outage", "--script", "solve", "--headless", "--json",
            cwd=elsewhere, env=env,
        )  # fmt: skip
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["stop_reason"] == "goal_met", summary
        print(f"service_outage --script solve: {summary['stop_reason']}")

        session = f"loopdeck-ci-{os.getpid()}"
        command = f"cd {elsewhere} && env -u COLUMNS -u LINES {loopdeck} console --theme light"
        tmux_env = [f"-e{k}={env[k]}" for k in ("HOME", "LOOPDECK_DB")]
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", *tmux_env,
             command],
            check=True,
        )  # fmt: skip
        try:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                text = screen(session)
                if re.search(r"service_outage", text) and "theme" not in text.lower():
                    break
                time.sleep(0.2)
            else:
                sys.exit(f"the console did not show the stored run:\n{screen(session)}")
            colored = screen(session, escapes=True)
            if not mostly_light(colored):
                sys.exit(f"the console is not in the light theme:\n{colored[:2000]}")
            print(screen(session))
            subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        shutil.rmtree(work / "venv", ignore_errors=True)
    print("package check: passed")


if __name__ == "__main__":
    main()
