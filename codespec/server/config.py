"""Settings: defaults, overridden by the TOML file, CLI flags and LSP initializationOptions.

Every layer is checked field by field: a bad value is reported in one line and that field keeps
its previous value, so a typo never takes the daemon down.
"""

from __future__ import annotations

import reprlib
import tomllib
from dataclasses import Field, dataclass, fields, replace
from pathlib import Path
from typing import Any

import platformdirs

from ..files import MAX_SMALL_FILE_BYTES, FileError, parse_toml, read_text
from ..numbers import finite_number
from ..settings import Settings


def camel_case(name: str) -> str:
    """The name a setting has on the wire and in editors: ``max_tokens`` -> ``maxTokens``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


SETTINGS = {f.name: f for f in fields(Settings)}
SHORT = reprlib.Repr()  # (keyword arguments only from Python 3.12)
SHORT.maxstring = SHORT.maxother = 60
SHORT.maxlist = SHORT.maxdict = 4
SHORT.maxlevel = 2
ALIASES = {camel_case(name): name for name in SETTINGS}  # camelCase -> field name
# What Copilot's language server reads beside its settings, which Copilot-style clients send
# (copilot-lsp's stock configuration, sidekick.nvim): who the client is, and its telemetry
# level. codespec has nothing to set from them (it sends no telemetry; the client's name comes
# from ``clientInfo``): known, so never reported as unknown.
COPILOT_CLIENT_KEYS = frozenset({"editorInfo", "editorPluginInfo", "telemetry"})


def check(name: str, value: Any) -> Any:
    """``value`` for the setting ``name`` (a field name), or ``ValueError`` saying what it may
    be: the command line's flags that set a setting take the setting's limits."""
    checked = _valid(SETTINGS[name], value)
    if checked is None:
        raise ValueError(f"must be {allowed(name)}, not {value!r}")
    return checked


def allowed(name: str) -> str:
    """What the setting ``name`` takes, in words."""
    declared = SETTINGS[name]
    limits, default = declared.metadata, declared.default
    if limits["choices"]:
        return "one of " + ", ".join(limits["choices"])
    if isinstance(default, bool):
        return "true or false"
    kind = "an integer" if isinstance(default, int) else "a number"
    if limits["low"] is not None and limits["high"] is not None:
        return f"{kind} from {limits['low']:g} to {limits['high']:g}"
    return kind


def merge(base: Settings, values: dict[str, Any] | None) -> tuple[Settings, list[str]]:
    """Apply ``values`` (snake_case or camelCase keys) over ``base``.

    Returns the new settings and one message per rejected key or value."""
    if not values:
        return base, []
    if not isinstance(values, dict):
        return base, [f"settings must be an object, got {type(values).__name__}"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    unknown = [
        k for k in values if ALIASES.get(k, k) not in SETTINGS and k not in COPILOT_CLIENT_KEYS
    ]
    if len(unknown) == 1:
        problems.append(f"unknown setting {unknown[0]!r} ignored")
    elif unknown:  # one line however many (an editor shows each problem to the user)
        named = ", ".join(repr(str(k)[:40]) for k in unknown[:3])
        problems.append(f"{len(unknown)} unknown settings ignored ({named}, ...)")
    for raw_key, value in values.items():
        key = ALIASES.get(raw_key, raw_key)
        if key not in SETTINGS:
            continue
        ok = _valid(SETTINGS[key], value)
        if ok is None:
            problems.append(
                f"invalid value for {raw_key}: {_shown(value)}; keeping {getattr(base, key)!r}"
            )
        else:
            changes[key] = ok
    return replace(base, **changes), problems


def _shown(value: Any) -> str:
    """A value as a problem line shows it: cut short (a client may send megabytes)."""
    return SHORT.repr(value)


def _valid(declared: Field, value: Any) -> Any | None:
    """``value`` as the setting ``declared`` holds it, or None when it does not fit. A switch
    (a true-or-false setting) also takes Copilot's shape for one, ``{"enabled": bool}``
    (``nextEditSuggestions: {enabled: true}``, as Copilot's language server reads it)."""
    default, limits = declared.default, declared.metadata
    if isinstance(default, bool):
        if isinstance(value, dict) and value.keys() == {"enabled"}:
            value = value["enabled"]
        return value if isinstance(value, bool) else None
    if isinstance(default, int | float):
        kinds = int if isinstance(default, int) else int | float
        if not isinstance(value, kinds) or finite_number(value) is None:
            return None  # (nan passes every comparison below, inf is no size, and an int
            # past a double's range would not convert: ``numbers.py``)
        if limits["low"] is not None and value < limits["low"]:
            return None
        if limits["high"] is not None and value > limits["high"]:
            return None
        return type(default)(value)
    if isinstance(default, str):
        if not isinstance(value, str) or (limits["choices"] and value not in limits["choices"]):
            return None
        return value
    if isinstance(default, tuple):
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        return None
    return None


def config_path() -> Path:
    return Path(platformdirs.user_config_dir("codespec")) / "config.toml"


def _readable(path: Path) -> dict[str, Any]:
    """The settings file's tables; {} for a file that cannot be read (``load_file`` reports
    that one)."""
    try:
        return parse_toml(read_text(path, MAX_SMALL_FILE_BYTES))
    except (FileError, tomllib.TOMLDecodeError):
        return {}


def engine_table(path: Path | None = None) -> tuple[dict | None, str]:
    """The settings file's ``[engine]`` table (None when it has none) and where it is, for
    ``remote/config.py`` to check."""
    path = path or config_path()
    return _readable(path).get("engine"), f"{path} [engine]"


@dataclass(frozen=True)
class ModelChoice:
    """The settings file's ``[model]`` table: a GGUF of the user's to run instead of the
    embedded pair (``name``: what ``--model`` takes), and folders ``codespec models`` also
    looks in."""

    name: str | None = None
    folders: tuple[str, ...] = ()


def model_table(path: Path | None = None) -> ModelChoice:
    """``[model]`` from the settings file; a value of the wrong kind is a one-line
    ``ValueError``."""
    path = path or config_path()
    table = _readable(path).get("model", {})
    if not isinstance(table, dict) or set(table) - {"name", "folders"}:
        raise ValueError(f"{path}: [model] takes name and folders only")
    name, folders = table.get("name"), table.get("folders", [])
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"{path}: [model] name must be a model name or path")
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise ValueError(f"{path}: [model] folders must be a list of paths")
    return ModelChoice(name.strip() if name else None, tuple(folders))


def next_edit_table(path: Path | None = None) -> str | None:
    """``[next_edit] model`` from the settings file: the model next edits run on (a name or a
    GGUF path), or None; a value of the wrong kind is a one-line ``ValueError``."""
    path = path or config_path()
    table = _readable(path).get("next_edit", {})
    if not isinstance(table, dict) or set(table) - {"model"}:
        raise ValueError(f"{path}: [next_edit] takes model only")
    model = table.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(f"{path}: [next_edit] model must be a model name or path")
    return model.strip() if model else None


def load_file(path: Path | None = None) -> tuple[Settings, list[str]]:
    """Settings from the TOML file (the default one missing: defaults). Any file that cannot
    be read as TOML (a directory, not UTF-8, too large, bad syntax) gives one warning and the
    defaults, never a crash."""
    explicit = path is not None
    path = path or config_path()
    if not explicit and not path.exists():
        return Settings(), []
    try:
        data = parse_toml(read_text(path, MAX_SMALL_FILE_BYTES))
    except FileError as exc:
        return Settings(), [f"{exc}; using defaults"]
    except tomllib.TOMLDecodeError as exc:
        return Settings(), [f"{path}: {exc}; using defaults"]
    if not isinstance(data.get("completion", data), dict):
        return Settings(), [f"{path}: [completion] must be a table; using defaults"]
    others = ("engine", "model", "next_edit")  # (tables of their own, read elsewhere)
    table = data.get("completion", {k: v for k, v in data.items() if k not in others})
    settings, problems = merge(Settings(), table)
    return settings, [f"{path}: {p}" for p in problems]
