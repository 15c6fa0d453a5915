"""Files the daemon and the CLI create are never made through a symlink planted at their name:
the token's and caches' temporary files, the daemon's log (lsp/PROTOCOL.md, "Transport")."""

from __future__ import annotations

import os

import pytest

from codespec.files import create_new, open_log, parse_json, parse_toml, write_private


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / f".token.{os.getpid()}.tmp").symlink_to(victim)
    write_private(tmp_path / "token", "secret")
    assert victim.read_text() == "keep"
    assert (tmp_path / "token").read_text() == "secret"
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / f".token.{os.getpid()}.tmp").exists()


def test_a_new_file_replaces_a_leftover_of_its_own_name(tmp_path):
    leftover = tmp_path / ".cache.123"
    leftover.write_text("from a crashed run")
    os.close(create_new(leftover, 0o644))
    assert leftover.read_text() == ""


def test_a_log_is_not_appended_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "daemon.log").symlink_to(victim)
    with pytest.raises(OSError):
        open_log(tmp_path / "daemon.log")
    assert victim.read_text() == "keep"


def test_input_nested_too_deeply_is_a_value_error():
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_toml("a = " + "[" * 5000 + "]" * 5000)
    assert parse_json('{"a": [1]}') == {"a": [1]} and parse_toml("a = 1") == {"a": 1}
