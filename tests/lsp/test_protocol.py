"""Raw JSON-RPC against the daemon: lifecycle errors, bad bytes, socket mode, TCP auth, relay."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time

import pytest
from lsp_helpers import SOCKET, start_daemon, start_tcp_daemon, wait_for_socket
from rpc import RawClient, did_open, inline_request, relay_client, unix_client

from codespec.server.endpoint import read_or_create_token


def test_socket_file_is_private(daemon):
    assert stat.S_IMODE(os.stat(SOCKET).st_mode) == 0o600


def test_request_before_initialize_then_normal_service(daemon):
    client = unix_client(SOCKET)
    client.send({"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover", "params": {}})
    assert client.reply_to(7)["error"]["code"] == -32002
    reply = client.initialize(msg_id=8)
    assert "inlineCompletionProvider" in reply["result"]["capabilities"]
    assert reply["result"]["capabilities"]["positionEncoding"] == "utf-16"
    client.send({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"capabilities": {}}})
    assert client.reply_to(9)["error"]["code"] == -32600


def test_utf8_is_chosen_when_offered(daemon):
    client = unix_client(SOCKET)
    reply = client.initialize(general={"positionEncodings": ["utf-16", "utf-8"]})
    assert reply["result"]["capabilities"]["positionEncoding"] == "utf-8"


def test_malformed_messages_get_errors_and_the_server_keeps_serving(daemon):
    client = unix_client(SOCKET)
    client.initialize()
    body = b'{"jsonrpc": "2.0", "id": 3, "method": '  # truncated JSON
    client.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    reply = client.next_reply()
    assert reply is not None and reply["error"]["code"] == -32700, reply
    client.send(b"Content-Length: 7\r\n\r\n[1,2,3]")
    reply = client.next_reply()
    assert reply is not None and reply["error"]["code"] == -32600
    client.send({"jsonrpc": "2.0", "id": 4, "method": "no/such/method", "params": {}})
    assert client.reply_to(4)["error"]["code"] == -32601
    client.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "textDocument/inlineCompletion",
            "params": {"textDocument": 12},
        }
    )
    error = client.reply_to(5)["error"]
    assert error["code"] == -32602 and "Traceback" not in str(error) and "/work" not in str(error)
    client.send({"jsonrpc": "2.0", "id": 6, "method": "codespec/stats", "params": {}})
    assert "served" in client.reply_to(6)["result"]["daemon"]


def test_request_after_shutdown_is_refused(daemon):
    client = unix_client(SOCKET)
    client.initialize()
    client.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    assert client.reply_to(2)["result"] is None
    client.send({"jsonrpc": "2.0", "id": 3, "method": "codespec/stats", "params": {}})
    assert client.reply_to(3)["error"]["code"] == -32600
    client.send({"jsonrpc": "2.0", "method": "exit"})
    assert client.next_reply() is None  # the session ended; the daemon did not
    assert unix_client(SOCKET).initialize()["result"]


def test_non_lsp_bytes_close_the_connection(daemon):
    client = unix_client(SOCKET)
    client.send(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}")
    assert client.closed()
    client = unix_client(SOCKET)
    client.send(b"Content-Length: 99999999999\r\n\r\n")
    assert client.closed()
    assert unix_client(SOCKET).initialize()["result"]  # still serving


@pytest.fixture(scope="module")
def tcp_daemon(tiny_manifest, tmp_path_factory):
    proc, port = start_tcp_daemon(tiny_manifest, tmp_path_factory.mktemp("tcp"))
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def tcp_client(port: int) -> RawClient:
    return RawClient(socket.create_connection(("127.0.0.1", port), timeout=10))


def auth(token: str) -> dict:
    return {"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": token}}


def test_tcp_requires_the_token(tcp_daemon):
    token = read_or_create_token()
    token_path = os.path.expanduser("~/.config/codespec/daemon.token")
    if os.path.exists(token_path):
        assert stat.S_IMODE(os.stat(token_path).st_mode) == 0o600
    no_token = tcp_client(tcp_daemon)
    no_token.send(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    )
    assert no_token.closed()  # closed, nothing dispatched
    wrong = tcp_client(tcp_daemon)
    wrong.send(auth(token + "x"))
    wrong.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
    assert wrong.read()["method"] == "codespec/authRefused"  # told why, nothing dispatched
    assert wrong.closed()
    http = tcp_client(tcp_daemon)
    http.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert http.closed()
    good = tcp_client(tcp_daemon)
    good.send(auth(token))
    assert "capabilities" in good.initialize()["result"]


def test_non_loopback_bind_is_refused_without_the_flag():
    result = subprocess.run(
        [sys.executable, "-m", "codespec", "serve", "--tcp", "9", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--allow-remote" in result.stderr


def test_lsp_relay_starts_a_daemon_when_none_runs(tiny_manifest, tmp_path):
    path = tmp_path / "auto.sock"
    relay, client = relay_client("--socket", str(path), "--pair", str(tiny_manifest))
    try:
        assert "capabilities" in client.initialize()["result"]
        wait_for_socket(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        relay.kill()
        stop_daemons(path)


def daemon_pids(path) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-f", f"serve --socket {path}"], capture_output=True, text=True
    )
    return found.stdout.split()


def stop_daemons(path) -> None:
    for pid in daemon_pids(path):
        os.kill(int(pid), 15)


def session(**options) -> RawClient:
    client = unix_client(SOCKET)
    client.send(
        {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {"capabilities": {}, "initializationOptions": options},
        }
    )
    client.reply_to("init")
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return client


def test_two_sessions_one_cancelled_the_other_unaffected(daemon):
    raw = {"stopRules": False, "maxTokens": 30}
    b_text = "def scale(values, k):\n    \n"
    alone = session(**raw)
    alone.send(did_open("file:///tmp/b.py", b_text))
    alone.send(inline_request(1, "file:///tmp/b.py", 1, 4))
    expected = alone.reply_to(1)["result"]["items"][0]["insertText"]

    a, b = session(**raw), session(**raw)
    a.send(did_open("file:///tmp/a.py", "import sys\n\nclass Thing:\n    \n"))
    b.send(did_open("file:///tmp/b.py", b_text))
    a.send(inline_request("a1", "file:///tmp/a.py", 3, 4))
    b.send(inline_request("b1", "file:///tmp/b.py", 1, 4))
    while (m := a.read()) is not None and m.get("method") != "codespec/partialCompletion":
        pass
    a.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "a1"}})
    assert a.reply_to("a1")["error"]["code"] == -32800
    assert b.reply_to("b1")["result"]["items"][0]["insertText"] == expected
    a.sock.close()  # a client dies: the others are still served
    b.send(inline_request("b2", "file:///tmp/b.py", 1, 4))
    assert b.reply_to("b2")["result"]["items"][0]["insertText"] == expected


def test_a_model_failure_is_an_lsp_error_and_the_daemon_goes_on(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text(
        'name = "broken"\n[target]\nsource = "hf-dir"\nlabel = "gone"\n'
        f'path = "{tmp_path / "no-such-model"}"\n'
        '[tokens]\nfim_prefix = "a"\nfim_suffix = "b"\nfim_middle = "c"\n'
    )
    path = tmp_path / "broken.sock"
    proc = start_daemon(broken, socket_path=path)
    try:
        client = unix_client(path)
        client.initialize()
        client.send(did_open("file:///tmp/x.py", "x = 1\n"))
        for msg_id in (1, 2):
            client.send(inline_request(msg_id, "file:///tmp/x.py", 1, 0))
            error = client.reply_to(msg_id)["error"]
            assert error["code"] == -32603 and "failed to load" in error["message"]
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_custom_inline_completion_method_for_older_clients(daemon):
    client = session(stopRules=False, maxTokens=8)
    client.send(did_open("file:///tmp/c.py", "def f(x):\n    \n"))
    request = inline_request(1, "file:///tmp/c.py", 1, 4)
    request["method"] = "codespec/inlineCompletion"
    client.send(request)
    item = client.reply_to(1)["result"]["items"][0]
    assert item["insertText"] and item["range"]["start"] == {"line": 1, "character": 4}


def test_progress_is_reported_while_the_model_loads(tiny_manifest, tmp_path):
    path = tmp_path / "slow.sock"
    proc = start_daemon(tiny_manifest, "--test-load-delay", "2", socket_path=path)
    try:
        client = unix_client(path)
        client.initialize(window={"workDoneProgress": True})
        create = client.read()
        while create is not None and create.get("method") == "codespec/status":
            create = client.read()
        assert create is not None and create["method"] == "window/workDoneProgress/create"
        client.send({"jsonrpc": "2.0", "id": create["id"], "result": None})
        kinds = []
        while len(kinds) < 2:
            message = client.read(timeout=120)  # a busy 2-core machine loads slowly
            if message.get("method") == "$/progress":
                kinds.append(message["params"]["value"]["kind"])
        assert kinds == ["begin", "end"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_relay_restarts_a_dead_daemon_and_keeps_the_session(tiny_manifest, tmp_path):
    """Kill the daemon under a live editor session: the next request starts a new one, which
    gets the session's documents (edited since they were opened) and answers."""
    path = tmp_path / "restart.sock"
    relay, client = relay_client("--socket", str(path), "--pair", str(tiny_manifest))
    try:
        client.initialize(general={"positionEncodings": ["utf-16"]})
        client.send(did_open("file:///tmp/r.py", "héllo = 1\n"))
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {
                    "textDocument": {"uri": "file:///tmp/r.py", "version": 2},
                    "contentChanges": [
                        {
                            "range": {
                                "start": {"line": 0, "character": 5},
                                "end": {"line": 0, "character": 5},
                            },
                            "text": "_𐐀",
                        }
                    ],
                },
            }
        )
        client.send(
            {
                "jsonrpc": "2.0",
                "id": "d1",
                "method": "codespec/document",
                "params": {"uri": "file:///tmp/r.py"},
            }
        )
        assert client.reply_to("d1")["result"]["text"] == "héllo_𐐀 = 1\n"
        pids = daemon_pids(path)
        assert len(pids) == 1
        os.kill(int(pids[0]), 9)
        time.sleep(0.5)
        client.send(
            {
                "jsonrpc": "2.0",
                "id": "d2",
                "method": "codespec/document",
                "params": {"uri": "file:///tmp/r.py"},
            }
        )
        reply = client.reply_to("d2")
        assert reply["result"]["text"] == "héllo_𐐀 = 1\n" and reply["result"]["version"] == 2
        new = daemon_pids(path)
        assert new and new != pids
    finally:
        relay.kill()
        stop_daemons(path)
