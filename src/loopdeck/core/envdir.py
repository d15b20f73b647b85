"""Loading an env folder (`scenario.toml` + `env.py`) and giving each run its own workspace."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from loopdeck.core.env_faults import described
from loopdeck.core.environment import Environment
from loopdeck.core.scenario import Scenario, ScenarioError, Script, invalid, load_scenario
from loopdeck.core.text import capped

M = TypeVar("M", bound=BaseModel)
WORKSPACE_DIR = "workspace"
WORKDIR = "{workdir}"


@dataclass(frozen=True)
class EnvDir:
    path: Path
    scenario: Scenario
    module: ModuleType | None  # None: no `env.py` (a kind's table says it all)
    settings: tuple[str, ...] = ()  # the `--set KEY=VALUE`s over its scenario.toml

    @property
    def name(self) -> str:
        return self.scenario.name

    def script(self, name: str) -> Script:
        try:
            return self.scenario.scripts[name]
        except KeyError:
            known = ", ".join(sorted(self.scenario.scripts)) or "(none)"
            raise ScenarioError(
                f"{self.path / 'scenario.toml'}: no script named {name!r}; scripts: {known}"
            ) from None

    def table(self, name: str, model: type[M]) -> M:
        """A kind's own table (`[agent]`, `[mcp]`) read as its model: a `ScenarioError`
        naming scenario.toml and the field when it does not pass."""
        try:
            return model.model_validate(self.scenario.tables.get(name, {}))
        except ValidationError as exc:
            where = self.path / "scenario.toml"
            said = invalid(where, f"invalid [{name}]", exc, self.settings, name, model)
            raise ScenarioError(said) from exc

    def create(self, workdir: Path) -> Environment:
        """A fresh Environment working on `workdir` (a copy, never the env folder itself)."""
        if self.module is None:
            raise ScenarioError(f"{self.path / 'env.py'}: file not found")
        try:
            env = self.module.make_env(workdir, dict(self.scenario.data))
        except Exception as exc:  # user code: report it against the file that failed
            said = described(exc, self.path.resolve(), "make_env")
            raise ScenarioError(f"{self.path / 'env.py'}: make_env failed: {said}") from exc
        if not isinstance(env, Environment):
            raise ScenarioError(
                f"{self.path / 'env.py'}: make_env() must return an Environment, not"
                f" {type(env).__name__}"
            )
        return env

    def prepare_workdir(self) -> Path:
        # The name is the env's own text: a `/` or a NUL in it is no part of a folder's name.
        safe = re.sub(r"[^\w.-]", "_", self.name)[:40]
        workdir = Path(tempfile.mkdtemp(prefix=f"loopdeck-{safe}-"))
        seed = self.path / WORKSPACE_DIR
        if seed.is_dir():
            try:
                shutil.copytree(seed, workdir, dirs_exist_ok=True)
            except (OSError, shutil.Error) as exc:  # shutil.Error lists every file that failed
                shutil.rmtree(workdir, ignore_errors=True)
                raise ScenarioError(
                    f"{seed}: cannot be copied into the run's workspace: {capped(str(exc), 400)}"
                ) from exc
        return workdir


# Each env.py's module, executed once per process for each text it has (as Python imports a
# module once), by its folder and the sha256 of its text: a worker's hundredth run of an env
# does not compile it and build its classes again (its pydantic argument models: ~4 ms a run);
# an edited env.py is executed afresh for the next run. The oldest of MODULES_KEPT is let go
# (its runs keep their own reference).
_modules: dict[tuple[str, str], ModuleType] = {}
MODULES_KEPT = 64


def _import_env_module(path: Path) -> ModuleType:
    source = path / "env.py"
    try:
        text = source.read_bytes()
    except FileNotFoundError:
        raise ScenarioError(f"{source}: file not found") from None
    except OSError as exc:
        raise ScenarioError(f"{source}: cannot be read: {exc}") from exc
    folder = str(path.resolve())
    key = (folder, hashlib.sha256(text).hexdigest())
    module = _modules.get(key)
    if module is not None:
        sys.modules[module.__name__] = module
        return module
    module_name = f"loopdeck_env_{abs(hash(folder))}"
    spec = importlib.util.spec_from_file_location(module_name, source)
    if spec is None or spec.loader is None:
        raise ScenarioError(f"{source}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:  # the text read above, not the file again: what is cached is what ran
        exec(compile(text, str(source), "exec"), module.__dict__)
    except Exception as exc:
        del sys.modules[module_name]
        said = described(exc, path.resolve(), "import env.py")
        raise ScenarioError(f"{source}: import failed: {said}") from exc
    if not callable(getattr(module, "make_env", None)):
        raise ScenarioError(f"{source}: defines no make_env(workdir, data) function")
    if len(_modules) >= MODULES_KEPT:
        _modules.pop(next(iter(_modules)))
    _modules[key] = module
    return module


def missing_modules(names: list[str]) -> list[str]:
    """The modules of an env's `requires` that this Python cannot import."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a bad name
            found = False
        if not found:
            missing.append(name)
    return missing


def load_env_dir(
    path: Path, known_root: Path | None = None, settings: list[str] | None = None
) -> EnvDir:
    if not path.is_dir():
        hint = ""
        if known_root is not None and known_root.is_dir():
            names = sorted(p.name for p in known_root.iterdir() if (p / "scenario.toml").is_file())
            hint = f"; sample envs in {known_root}: {', '.join(names)}"
        raise ScenarioError(f"{path}: no such env folder{hint}")
    scenario = load_scenario(path / "scenario.toml", settings)
    if missing := missing_modules(scenario.requires):
        raise ScenarioError(
            f"{path / 'scenario.toml'}: the env requires {', '.join(map(repr, missing))}, "
            f"which {sys.executable} cannot import (pip install {' '.join(missing)})"
        )
    # Whether a kind needs `env.py` is its own check (`RunKind.check`): an `[mcp]` or
    # `[agent]` env may say everything in scenario.toml.
    module = _import_env_module(path) if (path / "env.py").is_file() else None
    return EnvDir(path=path, scenario=scenario, module=module, settings=tuple(settings or ()))


def workdir_in(value: Any, workdir: Path, envdir: Path | None = None) -> Any:
    """`value` with `{workdir}` (and `{envdir}`, `{python}`) replaced in every string, at
    any depth."""
    if isinstance(value, str):
        value = value.replace(WORKDIR, str(workdir)).replace("{python}", sys.executable)
        return value if envdir is None else value.replace("{envdir}", str(envdir))
    if isinstance(value, dict):
        return {k: workdir_in(v, workdir, envdir) for k, v in value.items()}
    if isinstance(value, list):
        return [workdir_in(v, workdir, envdir) for v in value]
    return value


def workdir_in_script(script: Script, workdir: Path) -> Script:
    """A script with `{workdir}` put in its calls' string arguments."""
    return Script.model_validate(workdir_in(script.model_dump(), workdir))


def find_env_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "scenario.toml").is_file())
