"""Themes from `themes/*.toml`: Textual colors plus the console's own variables."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.theme import Theme

from loopdeck import settings
from loopdeck.bundled import bundled_folder, user_themes_folder

DEFAULT_THEME = "loopdeck-dark"

# The console's own variables; every theme file may set them under [variables].
APP_VARIABLES = {
    "risk-write": "#f97316",
    "risk-read": "#60a5fa",
    "verdict-pass": "#22c55e",
    "verdict-fail": "#ef4444",
    "verdict-stalled": "#f59e0b",
    "state-lit": "#38bdf8",
    "repeat-mark": "#f59e0b",
}

_COLOR_KEYS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)  # fmt: skip


def theme_folders() -> list[Path]:
    """Where themes are read from, in order: the bundled ones, then the user's own
    (`<user config>/loopdeck/themes`); LOOPDECK_THEMES names another folder instead of both."""
    configured = settings.current().themes
    if configured:
        return [configured]
    return [bundled_folder("themes"), user_themes_folder()]


@dataclass
class LoadedThemes:
    themes: list[Theme] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def resolve(self, name: str) -> str | None:
        for theme in self.themes:
            if name in (theme.name, theme.name.removeprefix("loopdeck-")):
                return theme.name
        return None


def load_theme(path: Path) -> Theme:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    name = raw.get("name", f"loopdeck-{path.stem}")
    if "primary" not in raw:
        raise ValueError("missing required color 'primary'")
    unknown = set(raw) - {"name", "dark", "variables", *_COLOR_KEYS}
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(sorted(unknown))}")
    variables = raw.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("[variables] must be a table")
    colors: dict[str, Any] = {key: str(raw[key]) for key in _COLOR_KEYS if key in raw}
    theme = Theme(name=str(name), dark=bool(raw.get("dark", True)), variables=variables, **colors)
    theme.to_color_system()  # fails here, by name, on a color Textual cannot parse
    return theme


def is_theme_path(requested: str) -> bool:
    """`--theme` takes a theme's name or the path of a theme file."""
    return requested.endswith(".toml") or os.sep in requested


def load_themes(folder: Path | None = None) -> LoadedThemes:
    """Every theme file of the theme folders (or of `folder` alone); a later theme of the same
    name replaces an earlier one, so a user's own file wins over the bundled one."""
    loaded = LoadedThemes()
    for path in [
        p for f in ([folder] if folder else theme_folders()) for p in sorted(f.glob("*.toml"))
    ]:
        try:
            theme = load_theme(path)
        except Exception as exc:  # reported by file name; the console goes on without it
            loaded.problems.append(f"theme file {path}: {type(exc).__name__}: {exc}")
            continue
        loaded.themes = [t for t in loaded.themes if t.name != theme.name] + [theme]
    return loaded
