"""`codespec lsp` never sits there deaf and never loops (lsp/PROTOCOL.md, "Transport"): a
daemon that keeps hanging up, a daemon that refuses the relay's token, a stopped daemon, input
too deep to parse; and it starts without the model's stack."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from lsp_helpers import SOCKET, start_daemon, start_tcp_daemon, wait_for_socket
from rpc import RawClient, _ProcessPipe


def relay(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, RawClient]:
    process = subprocess.Popen(
        [sys.executable, "-m", "codespec", "lsp", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    return process, RawClient(_ProcessPipe(process))


def initialize(msg_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "initialize", "params": {"capabilities": {}}}


def test_a_daemon_that_keeps_hanging_up_ends_the_relay_with_one_line(tmp_path):
    """A socket that accepts and closes at once (a daemon crashing on every connection): the
    relay restarts within its budget, with pauses, then exits 1 with one line on stderr."""
    path = tmp_path / "hangs-up.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    accepted = []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    started = time.monotonic()
    process, client = relay("--socket", str(path))
    try:
        client.send(initialize())
        assert process.wait(timeout=60) == 1
    finally:
        process.kill()
        server.close()
    took = time.monotonic() - started
    err = process.stderr.read().decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "giving up" in lines[0], err
    assert "Traceback" not in err
    assert len(accepted) <= 6 * 21  # bounded: 5 restarts, each retrying a reset at most 20 times
    assert took >= 7  # the pauses between restarts (0.5 + 1 + 2 + 4 s) were kept


@pytest.fixture(scope="module")
def tcp_daemon(tiny_manifest, tmp_path_factory):
    """A TCP daemon whose token is in a config home of its own."""
    home = tmp_path_factory.mktemp("daemon-config")
    env = dict(os.environ, XDG_CONFIG_HOME=str(home))
    proc, port = start_tcp_daemon(tiny_manifest, tmp_path_factory.mktemp("tcp-relay"), env)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def test_a_refused_token_ends_the_relay_at_once(tcp_daemon, tmp_path):
    """The daemon's token changed under the relay (another config home here): the daemon says
    `codespec/authRefused`, and the relay exits 1 saying so, without reconnecting."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "other-config"))
    process, client = relay("--tcp", str(tcp_daemon), env=env)
    try:
        client.send(initialize())
        assert process.wait(timeout=30) == 1
    finally:
        process.kill()
    err = process.stderr.read().decode()
    assert err.strip().splitlines() == ["codespec lsp: the daemon refused this relay's token (TCP)"]


def test_a_wrong_token_is_told_before_the_connection_closes(tcp_daemon):
    client = RawClient(socket.create_connection(("127.0.0.1", tcp_daemon), timeout=10))
    client.send({"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": "x" * 43}})
    assert client.read() == {"jsonrpc": "2.0", "method": "codespec/authRefused", "params": {}}
    assert client.closed()


def test_input_too_deep_to_parse_is_passed_on_and_the_relay_goes_on(daemon):
    process, client = relay("--socket", str(SOCKET))
    try:
        assert client.initialize()["result"]
        deep = b"[" * 100_000 + b"]" * 100_000
        client.send(b"Content-Length: %d\r\n\r\n" % len(deep) + deep)
        reply = client.next_reply()  # (past the session's codespec/status)
        assert reply is not None and reply["error"]["code"] == -32700  # the daemon's, relayed
        client.send({"jsonrpc": "2.0", "id": 7, "method": "codespec/stats", "params": {}})
        assert "daemon" in client.reply_to(7)["result"]
        assert process.poll() is None
    finally:
        process.kill()


def test_a_stopped_daemon_does_not_leave_requests_hanging(tiny_manifest, tmp_path):
    path = tmp_path / "stopped.sock"
    proc = start_daemon(tiny_manifest, socket_path=path)
    wait_for_socket(path)
    process, client = relay("--socket", str(path), "--reply-deadline", "3")
    try:
        assert client.initialize()["result"]
        os.kill(proc.pid, signal.SIGSTOP)
        client.send({"jsonrpc": "2.0", "id": 2, "method": "codespec/stats", "params": {}})
        started = time.monotonic()
        reply = client.reply_to(2)
        assert reply["error"]["code"] == -32603 and "did not answer" in reply["error"]["message"]
        assert 3 <= time.monotonic() - started < 10
        os.kill(proc.pid, signal.SIGCONT)  # its late reply to 2 is dropped, not sent twice
        client.send({"jsonrpc": "2.0", "id": 3, "method": "codespec/stats", "params": {}})
        seen = []
        while not seen or seen[-1].get("id") != 3:
            seen.append(client.read(timeout=30))
        assert [m.get("id") for m in seen if "method" not in m] == [3]
        assert "daemon" in seen[-1]["result"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        process.kill()
        proc.terminate()
        proc.wait(timeout=30)


def test_the_relay_starts_without_the_models_stack():
    """Every editor window runs a relay: it imports neither torch nor transformers, its flags'
    checks (which read the settings' limits) included."""
    code = (
        "import sys, codespec.cli, codespec.server.relay, codespec.server.endpoint;"
        "codespec.cli.build_parser().parse_args(['lsp', '--tcp', '7', '--reply-deadline', '9']);"
        "codespec.cli.build_parser().parse_args(['complete', 'a.py:1:1', '--max-tokens', '9']);"
        "print(sorted(m for m in ('torch', 'transformers', 'tree_sitter') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_a_bad_reply_deadline_is_one_line():
    for value in ("0", "-1", "nan", "inf"):
        out = subprocess.run(
            [sys.executable, "-m", "codespec", "lsp", "--reply-deadline", value],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (value, out.stderr)
        assert "--reply-deadline" in out.stderr
