"""Settings: defaults survive bad values; the schema in lsp/ matches the dataclass."""

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest

from codespec.server import config
from codespec.server.config import ALIASES, Settings, load_file, merge

SCHEMA = json.loads((Path(__file__).parent.parent / "lsp" / "settings.schema.json").read_text())


def camel(name: str) -> str:
    return {v: k for k, v in ALIASES.items()}.get(name, name)


def test_schema_and_dataclass_agree():
    defaults = Settings()
    props = SCHEMA["properties"]
    assert {camel(f.name) for f in fields(Settings)} == set(props)
    for f in fields(Settings):
        default = getattr(defaults, f.name)
        schema_default = props[camel(f.name)]["default"]
        assert (list(default) if isinstance(default, tuple) else default) == schema_default


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
