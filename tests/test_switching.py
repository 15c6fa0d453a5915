"""The command line a model switch runs the daemon again with (``server/switching.py``)."""

from __future__ import annotations

from codespec.server.switching import (
    LISTENING_FDS,
    model_flags,
    parse_fds,
    restart_argv,
    running_name,
)


def test_the_model_flags_are_replaced_and_the_sockets_named():
    argv = ["serve", "--socket", "/s", "--pair", "tiny", "--model=old", "--draft-model", "d"]
    argv += ["--http", "8012", LISTENING_FDS, "3,4", "--no-status"]
    again = restart_argv(argv, ["--model", "ollama:x:7b"], (5, 6))
    assert again == [
        "serve", "--socket", "/s", "--http", "8012", "--no-status",
        "--model", "ollama:x:7b", LISTENING_FDS, "5,6",
    ]  # fmt: skip
    assert parse_fds("5,6") == (5, 6)
    assert running_name(again) == "ollama:x:7b" and running_name(["serve"]) is None
    assert running_name(["serve", "--model=/m.gguf"]) == "/m.gguf"


def test_the_embedded_pair_is_named_by_its_manifest_path():
    """(its bare name would defer to ``[model]`` in the settings file)"""
    flags = model_flags({"name": "qwen2.5-coder-1.5b", "store": "embedded"})
    assert flags[0] == "--pair" and flags[1].endswith(".toml")
    assert model_flags({"name": "lmstudio:a/b.gguf", "store": "lmstudio"}) == [
        "--model",
        "lmstudio:a/b.gguf",
    ]
