"""Settings: defaults, overridden by the TOML file, CLI flags and LSP initializationOptions.

Every layer is checked field by field: a bad value is reported in one line and that field keeps
its previous value, so a typo never takes the daemon down.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import platformdirs

from ..files import MAX_SMALL_FILE_BYTES, FileError, read_text


@dataclass(frozen=True)
class Settings:
    """What a user can configure (see lsp/settings.schema.json)."""

    enabled: bool = True
    disabled_languages: tuple[str, ...] = ()
    max_tokens: int = 64  # multi-line completions
    line_max_tokens: int = 48  # single-line completions
    max_lines: int = 24
    multiline: str = "auto"  # auto | always | never
    debounce_ms: int = 150  # a hint for the editor plugins
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    extra_context_tokens: int = 1024
    stop_rules: bool = True
    speculate: bool = True
    complete_mid_word: bool = False
    prompt_seconds: float = 2.5  # size prompt windows to a cold prefill of this long; 0: off
    warm_ahead: bool = True  # prefill where edits settle / the cursor rests, while idle
    warm_delay_ms: int = 300  # how long they must rest first
    look_ahead_keys: int = 8  # next keystrokes computed ahead while idle (lookahead.py); 0: off


LIMITS = {
    "max_tokens": (1, 1024),
    "line_max_tokens": (1, 512),
    "max_lines": (1, 500),
    "debounce_ms": (0, 5000),
    "prefix_tokens": (16, 32768),
    "suffix_tokens": (0, 32768),
    "extra_context_tokens": (0, 65536),
    "prompt_seconds": (0, 600),
    "warm_delay_ms": (0, 60000),
    "look_ahead_keys": (0, 32),
}
CHOICES = {"multiline": ("auto", "always", "never")}
ALIASES = {
    "maxTokens": "max_tokens",
    "lineMaxTokens": "line_max_tokens",
    "maxLines": "max_lines",
    "debounceMs": "debounce_ms",
    "prefixTokens": "prefix_tokens",
    "suffixTokens": "suffix_tokens",
    "extraContextTokens": "extra_context_tokens",
    "stopRules": "stop_rules",
    "disabledLanguages": "disabled_languages",
    "completeMidWord": "complete_mid_word",
    "promptSeconds": "prompt_seconds",
    "warmAhead": "warm_ahead",
    "warmDelayMs": "warm_delay_ms",
    "lookAheadKeys": "look_ahead_keys",
}


def merge(base: Settings, values: dict[str, Any] | None) -> tuple[Settings, list[str]]:
    """Apply ``values`` (snake_case or camelCase keys) over ``base``.

    Returns the new settings and one message per rejected key or value."""
    if not values:
        return base, []
    if not isinstance(values, dict):
        return base, [f"settings must be an object, got {type(values).__name__}"]
    known = {f.name for f in fields(Settings)}
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for raw_key, value in values.items():
        key = ALIASES.get(raw_key, raw_key)
        if key not in known:
            problems.append(f"unknown setting {raw_key!r} ignored")
            continue
        default = getattr(Settings(), key)
        ok = _valid(key, value, default)
        if ok is None:
            problems.append(
                f"invalid value for {raw_key}: {value!r}; keeping {getattr(base, key)!r}"
            )
        else:
            changes[key] = ok
    return replace(base, **changes), problems


def _valid(key: str, value: Any, default: Any) -> Any | None:
    if isinstance(default, bool):
        return value if isinstance(value, bool) else None
    if isinstance(default, float):
        low, high = LIMITS.get(key, (0, 1 << 30))
        if isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high:
            return float(value)
        return None
    if isinstance(default, int):
        low, high = LIMITS.get(key, (0, 1 << 30))
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        return None
    if isinstance(default, str):
        return value if value in CHOICES.get(key, (value,)) and isinstance(value, str) else None
    if isinstance(default, tuple):
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        return None
    return None


def config_path() -> Path:
    return Path(platformdirs.user_config_dir("codespec")) / "config.toml"


def load_file(path: Path | None = None) -> tuple[Settings, list[str]]:
    """Settings from the TOML file (the default one missing: defaults). Any file that cannot
    be read as TOML (a directory, not UTF-8, too large, bad syntax) gives one warning and the
    defaults, never a crash."""
    explicit = path is not None
    path = path or config_path()
    if not explicit and not path.exists():
        return Settings(), []
    try:
        data = tomllib.loads(read_text(path, MAX_SMALL_FILE_BYTES))
    except FileError as exc:
        return Settings(), [f"{exc}; using defaults"]
    except tomllib.TOMLDecodeError as exc:
        return Settings(), [f"{path}: {exc}; using defaults"]
    if not isinstance(data.get("completion", data), dict):
        return Settings(), [f"{path}: [completion] must be a table; using defaults"]
    settings, problems = merge(Settings(), data.get("completion", data))
    return settings, [f"{path}: {p}" for p in problems]
