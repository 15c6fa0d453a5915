"""Settings: defaults survive bad values; the schema in lsp/ matches the dataclass."""

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest

from codespec.server import config
from codespec.server.config import Settings, load_file, merge

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "lsp" / "settings.schema.json").read_text())
VSCODE = json.loads((ROOT / "editor-plugins" / "vscode" / "package.json").read_text())
EDITOR_ONLY = {"serverPath", "serverArgs", "trace.server"}  # the extension's own, not the server's


def declared() -> dict[str, dict]:
    """Each setting as the dataclass declares it, written as JSON schema says it."""
    out = {}
    for f in fields(Settings):
        default, limits = f.default, f.metadata
        entry: dict = {"default": list(default) if isinstance(default, tuple) else default}
        if limits["choices"]:
            entry["enum"] = list(limits["choices"])
        elif isinstance(default, bool):
            entry["type"] = "boolean"
        elif isinstance(default, int):
            entry["type"] = "integer"
        elif isinstance(default, float):
            entry["type"] = "number"
        elif isinstance(default, tuple):
            entry |= {"type": "array", "items": {"type": "string"}}
        if limits["low"] is not None:
            entry["minimum"] = limits["low"]
        if limits["high"] is not None:
            entry["maximum"] = limits["high"]
        out[config.camel_case(f.name)] = entry
    return out


def without_prose(entry: dict) -> dict:
    return {
        k: v for k, v in entry.items() if k not in ("description", "markdownDescription", "order")
    }


def test_the_schema_says_what_the_dataclass_declares():
    """Names, types, defaults, minimum and maximum, choices: the same in lsp/ as in code."""
    schema = {name: without_prose(entry) for name, entry in SCHEMA["properties"].items()}
    assert schema == declared()


def test_the_vscode_extension_offers_what_the_dataclass_declares():
    properties = VSCODE["contributes"]["configuration"]["properties"]
    offered = {
        name.removeprefix("codespec."): without_prose(entry)
        for name, entry in properties.items()
        if name.removeprefix("codespec.") not in EDITOR_ONLY
    }
    assert offered == declared()


@pytest.mark.parametrize("name", [n for n, e in declared().items() if "minimum" in e])
def test_every_limit_holds_at_its_edge(name):
    """The minimum and the maximum are taken; one step past either keeps the old value."""
    entry = declared()[name]
    step = 1 if entry["type"] == "integer" else 0.5
    low, high = entry["minimum"], entry["maximum"]
    for value in (low, high):
        merged, problems = merge(Settings(), {name: value})
        assert not problems and getattr(merged, config.ALIASES[name]) == value
    for value in (low - step, high + step):
        merged, problems = merge(Settings(), {name: value})
        assert (
            problems == [f"invalid value for {name}: {value!r}; keeping {entry['default']!r}"]
            and merged == Settings()
        )


def test_bad_values_keep_the_previous_value():
    base = Settings(max_tokens=80)
    merged, problems = merge(
        base,
        {"maxTokens": "lots", "multiline": "never", "x": 1, "lineMaxTokens": 0, "stopRules": "yes"},
    )
    assert merged.max_tokens == 80 and merged.multiline == "never"
    assert merged.line_max_tokens == Settings().line_max_tokens and merged.stop_rules is True
    assert len(problems) == 4
    assert merge(base, ["not", "a", "dict"])[0] == base


def test_config_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[completion]\nmax_tokens = 32\nmultiline = "never"\nbogus = 1\n')
    settings, problems = load_file(path)
    assert settings.max_tokens == 32 and settings.multiline == "never"
    assert len(problems) == 1 and "bogus" in problems[0]
    path.write_text("this is = = not toml")
    settings, problems = load_file(path)
    assert settings == Settings() and "using defaults" in problems[0]


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda p: p.write_bytes(b"[completion]\nmax_tokens = 3\xff\xfe\n"), "not UTF-8"),
        (lambda p: p.mkdir(), "directory"),
        (lambda p: os.mkfifo(p), "not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
        (lambda p: p.write_text("completion = 5\n"), "must be a table"),
        (lambda p: p.write_text("a = " + "[" * 5000 + "]" * 5000), "nested too deeply"),
        (lambda p: p.write_text("a = " + "{b = " * 3000 + "1" + "}" * 3000), "nested too deeply"),
    ],
)
def test_a_config_that_cannot_be_read_gives_one_warning_and_the_defaults(tmp_path, make, why):
    path = tmp_path / "config.toml"
    make(path)
    settings, problems = load_file(path)
    assert settings == Settings()
    assert len(problems) == 1 and why in problems[0] and "using defaults" in problems[0]


def test_a_missing_default_config_is_silent_but_a_missing_named_one_is_not(tmp_path, monkeypatch):
    missing = tmp_path / "nope.toml"
    assert load_file(missing)[1] == [f"no such file: {missing}; using defaults"]
    monkeypatch.setattr(config, "config_path", lambda: missing)
    assert load_file() == (Settings(), [])


def test_unknown_keys_are_one_warning_however_many():
    """20,000 unknown keys are one line naming a few, not 20,000 (the editor shows each)."""
    values = {f"bogus{i}": i for i in range(20_000)} | {"maxTokens": 80}
    merged, problems = merge(Settings(), values)
    assert merged.max_tokens == 80
    (line,) = problems
    assert "20000 unknown settings ignored" in line and "'bogus0'" in line and len(line) < 200


def test_fuzzed_settings_never_raise_and_never_leave_a_limit():
    """Random keys (known, camelCase, unknown) with random values of every JSON type: merge
    always returns settings whose every field is one the declarations allow."""
    import random

    rng = random.Random(3)
    junk = [
        None,
        True,
        False,
        -1,
        0,
        1,
        7,
        2**70,
        -(2**70),
        0.5,
        -0.0,
        float("nan"),
        float("inf"),
        1e308,
        "",
        "auto",
        "never",
        "x" * 1000,
        [],
        ["python"],
        [1],
        {},
        {"a": 1},
        [[["deep"]]],
    ]
    keys = list(config.ALIASES) + list(config.SETTINGS) + ["bogus", "", "__class__"]
    for _ in range(3000):
        values = {rng.choice(keys): rng.choice(junk) for _ in range(rng.randrange(1, 6))}
        merged, problems = merge(Settings(), values)
        assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
        for name in config.SETTINGS:
            value = getattr(merged, name)
            assert config.check(name, list(value) if isinstance(value, tuple) else value) == value
