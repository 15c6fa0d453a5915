"""Where the daemon listens is checked before anything is touched (lsp/PROTOCOL.md,
"Transport"): a runtime folder others can open, a planted lock symlink, a directory or an
over-long path at the socket, a TCP port in use. Each is one line and a non-zero exit, and a
failed start leaves nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def codespec(*args: str, env: dict | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "codespec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def give_away(path: Path) -> None:
    """Make ``path`` another user's (CI runs as root, which may)."""
    try:
        os.chown(path, os.getuid() + 4242, -1, follow_symlinks=False)
    except PermissionError:
        pytest.skip("needs a user who may give a file away (root)")


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize("owner, mode", [("other", 0o777), ("self", 0o777), ("self", 0o755)])
def test_a_runtime_folder_others_can_open_is_refused(tmp_path, tiny_manifest, owner, mode):
    folder = tmp_path / "run"
    folder.mkdir()
    os.chmod(folder, mode)
    if owner == "other":
        give_away(folder)
    env = dict(os.environ, CODESPEC_RUNTIME_DIR=str(folder))
    for command in (["serve", "--pair", str(tiny_manifest), "--no-status"], ["lsp"]):
        result = codespec(*command, env=env)
        assert result.returncode == 2
        assert "refusing the runtime folder" in one_line(result)
    assert list(folder.iterdir()) == []  # nothing made in it


def test_a_planted_lock_symlink_is_not_followed(tmp_path, tiny_manifest):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / "codespec.sock.lock").symlink_to(victim)
    env = dict(os.environ, CODESPEC_RUNTIME_DIR=str(folder))
    result = codespec("serve", "--pair", str(tiny_manifest), "--no-status", env=env)
    assert result.returncode == 2 and "lock file" in one_line(result)
    assert victim.read_text() == "precious"
    assert not (folder / "codespec.sock").exists()


def test_a_directory_at_the_socket_path_is_one_line_for_daemon_and_relay(tmp_path):
    where = tmp_path / "d.sock"
    where.mkdir()
    served = codespec("serve", "--socket", str(where), "--no-status")
    assert served.returncode == 2 and "it is a directory" in one_line(served)
    started = time.monotonic()
    relayed = codespec("lsp", "--socket", str(where))
    assert relayed.returncode == 2 and "it is a directory" in one_line(relayed)
    assert time.monotonic() - started < 30  # not the 60 s wait for a daemon that cannot start


def test_an_overlong_socket_path_is_one_line(tmp_path):
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True, mode=0o700)
    result = codespec("serve", "--socket", str(deep / "codespec.sock"), "--no-status")
    assert result.returncode == 2 and "over the 107" in one_line(result)
    assert list(deep.iterdir()) == []


def test_a_port_in_use_is_one_line_and_leaves_nothing_behind(tmp_path, tiny_manifest):
    config = tmp_path / "config"
    env = dict(os.environ, XDG_CONFIG_HOME=str(config))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "run" / "d.sock"
        path.parent.mkdir(mode=0o700)
        result = codespec(
            "serve",
            "--socket",
            str(path),
            "--tcp",
            str(port),
            "--pair",
            str(tiny_manifest),
            "--no-status",
            "--no-stats",
            env=env,
        )
    assert result.returncode == 2
    line = [x for x in result.stderr.splitlines() if x.startswith("codespec: error")]
    assert line and f"cannot listen on 127.0.0.1:{port}" in line[0], result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in path.parent.iterdir()) == []


def test_the_relay_connects_only_to_this_users_socket(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o700)
    path = folder / "d.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    give_away(path)  # someone else's daemon, listening where ours would
    try:
        result = codespec("lsp", "--socket", str(path))
    finally:
        server.close()
    assert result.returncode == 2 and "belongs to uid" in one_line(result)
