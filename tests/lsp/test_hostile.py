"""The daemon, the relay and the token under hostile input, faults and load: one regression
test per class of failure, over real sockets and real stdio, against real daemons (tiny model).
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lsp_helpers import SOCKET, free_port, start_daemon, wait_for_model, wait_for_socket
from rpc import RawClient, did_open, inline_request, relay_client, unix_client

from codespec.server.tcp_auth import AUTH_MAX_BODY, MAX_UNAUTHENTICATED

LEAKS = ("Traceback", 'File "', "Error:", "/work/", "/tmp/", "/etc/")


def no_leak(reply: dict) -> bool:
    """An error reply names no Python exception class, traceback or file path."""
    text = json.dumps(reply.get("error") or {})
    return not any(leak in text for leak in LEAKS)


def initialized(path=SOCKET, **capabilities) -> RawClient:
    client = unix_client(path)
    client.initialize(**capabilities)
    return client


def request(client: RawClient, msg_id, method: str, params=None, **extra) -> dict:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method, **extra}
    if params is not None:
        message["params"] = params
    client.send(message)
    return client.reply_to(msg_id)


def drain(client: RawClient, seconds: float) -> list[dict]:
    """Every message that arrives within ``seconds``."""
    out, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        client.sock.settimeout(left)
        try:
            message = client.read(timeout=left)
        except (TimeoutError, OSError):
            break
        if message is None:
            break
        out.append(message)
    client.sock.settimeout(30)
    return out


def besides_status(messages: list[dict]) -> list[dict]:
    """``messages`` less the ``codespec/status`` every session hears once it is initialized."""
    return [m for m in messages if m.get("method") != "codespec/status"]


def collect(client: RawClient, ids: list, timeout: float) -> dict:
    """Replies by id, however they are ordered, until every id has one (or the time is up)."""
    got: dict = {}
    deadline = time.monotonic() + timeout
    while not all(i in got for i in ids) and time.monotonic() < deadline:
        message = client.read(timeout=deadline - time.monotonic())
        assert message is not None, "connection closed"
        if "method" not in message and message.get("id") in ids:
            got.setdefault(message["id"], []).append(message)
    return got


def serve(tmp_path: Path, manifest: Path, *extra: str, env: dict | None = None):
    """A private daemon, not waited for; returns (process, socket path)."""
    path = tmp_path / "d.sock"
    return start_daemon(manifest, *extra, socket_path=path, env=env, wait=False), path


def log_of(proc) -> str:
    return proc.log_path.read_text()


# -- who may read what ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["codespec/document", "textDocument/inlineCompletion"])
def test_a_session_reads_only_documents_it_opened(daemon, tmp_path, method):
    private = tmp_path / "secret.py"
    private.write_text("TOKEN = 'never read me'\n")
    private.chmod(0o600)
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)  # opening it for reading would block the daemon's event loop
    client = initialized()
    for n, uri in enumerate(
        [private.as_uri(), fifo.as_uri(), "file:///etc/hostname", "untitled:Untitled-1"]
    ):
        if method == "codespec/document":
            reply = request(client, n, method, {"uri": uri})
        else:
            reply = client.send(inline_request(n, uri, 0, 0)) or client.reply_to(n)
        assert reply["error"]["code"] == -32602 and no_leak(reply), reply
        assert "never read me" not in json.dumps(reply)
    other = initialized()  # another session is served at once: nothing blocked the loop
    assert "served" in request(other, "s", "codespec/stats", {})["result"]["daemon"]


# -- lifecycle and params ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [[1], "x", {"capabilities": [1]}, {"capabilities": {"general": "x"}}, {"processId": "x"}],
)
def test_a_failed_initialize_gets_32602_and_does_not_count(daemon, params):
    client = unix_client(SOCKET)
    reply = request(client, 1, "initialize", params)
    assert reply["error"]["code"] == -32602 and no_leak(reply), reply
    assert "capabilities" in client.initialize(msg_id=2)["result"]  # the retry is served


def test_every_request_gets_exactly_one_correct_reply(daemon):
    client = initialized()
    assert (
        "served" in request(client, 1, "codespec/stats")["result"]["daemon"]
    )  # no params key at all
    assert request(client, 2, "no/such/method")["error"]["code"] == -32601
    reply = request(client, 3, "initialized", {})  # a notification sent with an id
    assert reply["error"]["code"] == -32600
    reply = request(client, 4, "textDocument/didOpen", {"textDocument": {}})
    assert reply["error"]["code"] == -32600
    reply = request(client, 5, "codespec/document", {"nope": 1})
    assert reply["error"]["code"] == -32602 and no_leak(reply)
    reply = request(client, 6, "codespec/document", [1, 2])
    assert reply["error"]["code"] == -32602 and no_leak(reply)
    # and nothing else: no second reply to any of them
    assert besides_status(drain(client, 1.0)) == []


@pytest.mark.parametrize("odd", [[1], {"a": 1}, True, 1.5])
def test_an_id_that_is_not_a_string_or_integer_is_refused_not_echoed(daemon, odd):
    client = initialized()
    client.send({"jsonrpc": "2.0", "id": odd, "method": "codespec/stats", "params": {}})
    reply = client.next_reply()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert request(client, 2, "codespec/stats", {})["result"]  # the session goes on


def test_bad_notifications_are_ignored_quietly(daemon):
    client = unix_client(SOCKET)
    client.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {}})  # too early
    client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})  # too early
    client.initialize()
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": "file:///never/opened.py", "version": 2},
                "contentChanges": [{"text": "x"}],
            },
        }
    )
    client.send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"x": 1}})
    client.send({"jsonrpc": "2.0", "method": "codespec/cursor", "params": [1]})
    for line in (b"1e400", b"-1", b"1.5", b"9" * 400):  # JSON's 1e400 reads as infinity
        body = (
            b'{"jsonrpc": "2.0", "method": "codespec/cursor", "params": {"textDocument": '
            b'{"uri": "file:///never/opened.py"}, "position": {"line": '
            + line
            + b', "character": 0}}}'
        )
        client.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    reply = request(client, 9, "codespec/stats", {})
    assert "served" in reply["result"]["daemon"]
    assert besides_status(drain(client, 1.0)) == []  # no window/showMessage pop-up with Python text


@pytest.mark.parametrize(
    "offered, chosen",
    [(["utf-32"], "utf-16"), (["utf-32", "utf-8"], "utf-8"), ([], "utf-16"), ("x", "utf-16")],
)
def test_position_encoding_follows_the_protocol_document(daemon, offered, chosen):
    reply = unix_client(SOCKET).initialize(general={"positionEncodings": offered})
    assert reply["result"]["capabilities"]["positionEncoding"] == chosen


# -- documents and positions ------------------------------------------------------------------


def change(client, uri, version, start, end, text):
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [
                    {
                        "range": {
                            "start": {"line": start[0], "character": start[1]},
                            "end": {"line": end[0], "character": end[1]},
                        },
                        "text": text,
                    }
                ],
            },
        }
    )


def server_text(client, uri) -> str:
    return request(client, f"doc-{uri}-{time.monotonic()}", "codespec/document", {"uri": uri})[
        "result"
    ]["text"]


def test_positions_past_a_line_end_are_clamped_before_the_line_break(daemon):
    client = initialized()
    uri = "file:///tmp/crlf.py"
    client.send(did_open(uri, "ab\r\ncd\rxy\u2028z\n"))
    change(client, uri, 2, (0, 3), (0, 3), "X")  # past the end of "ab": before the CRLF
    change(client, uri, 3, (1, 99), (1, 99), "Y")  # past the end of "cd": before the lone CR
    change(client, uri, 4, (2, 5), (2, 5), "W")  # U+2028 is no LSP line break: "xy\u2028zW"
    change(client, uri, 5, (9, 0), (9, 0), "E")  # past the last line: the end of the document
    assert server_text(client, uri) == "abX\r\ncdY\rxy\u2028zW\nE"


def test_a_completion_past_the_end_of_a_line_goes_at_its_end(daemon):
    client = initialized()
    uri = "file:///tmp/end.py"
    text = "import os\n\ny = f("
    client.send(did_open(uri, text))
    for msg_id, (line, character) in enumerate([(2, 10000), (7, 3)]):
        client.send(inline_request(msg_id, uri, line, character))
        reply = client.reply_to(msg_id)
        for item in reply["result"]["items"]:
            assert item["range"]["start"] == {"line": 2, "character": 6}, item
            assert item["range"]["start"] == item["range"]["end"]


def test_versions_going_backwards_still_apply_in_arrival_order(daemon):
    client = initialized()
    uri = "file:///tmp/versions.py"
    client.send(did_open(uri, "a\n"))
    change(client, uri, 5, (0, 1), (0, 1), "b")
    change(client, uri, 3, (0, 2), (0, 2), "c")  # lower number: still the newer edit
    reply = request(client, 1, "codespec/document", {"uri": uri})["result"]
    assert reply["text"] == "abc\n" and reply["version"] == 3


def test_did_open_without_a_language_id_takes_the_language_from_the_extension(daemon):
    client = initialized()
    uri = "file:///tmp/nolang.py"
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didOpen",
            "params": {"textDocument": {"uri": uri, "version": 1, "text": "def f(x):\n    \n"}},
        }
    )
    assert server_text(client, uri) == "def f(x):\n    \n"
    client.send(inline_request(1, uri, 1, 4))
    assert "items" in client.reply_to(1)["result"]


def test_random_edits_match_an_independent_utf16_model(daemon):
    """Incremental edits at random positions, past line ends and the last line included, in
    text with CR, LF, CRLF, astral characters and U+2028: the server's text equals a splice
    model that works on UTF-16 code units with the protocol's three line ends."""
    rng = random.Random(11)
    client = initialized()
    uri = "file:///tmp/model.py"
    text = "a𐐀b\r\n漢\rx\u2028y\n\n"
    client.send(did_open(uri, text))

    def lines_utf16(t: str) -> list[tuple[int, int]]:
        """(start, end-before-break) of each line, in UTF-16 units of t."""
        units = t.encode("utf-16-le")
        u = [units[i : i + 2].decode("utf-16-le", "surrogatepass") for i in range(0, len(units), 2)]
        spans, start, i = [], 0, 0
        while i < len(u):
            if u[i] in "\r\n":
                spans.append((start, i))
                i += 2 if u[i] == "\r" and i + 1 < len(u) and u[i + 1] == "\n" else 1
                start = i
            else:
                i += 1
        spans.append((start, len(u)))
        return spans

    def offset(t: str, line: int, character: int) -> int:
        spans = lines_utf16(t)
        if line >= len(spans):
            return len(t.encode("utf-16-le")) // 2
        start, end = spans[line]
        at = min(start + character, end)
        units = t.encode("utf-16-le")
        if at > 0 and 0xDC00 <= int.from_bytes(units[2 * at : 2 * at + 2], "little") <= 0xDFFF:
            at -= 1  # inside a surrogate pair: stay before the character
        return at

    def splice(t: str, a: int, b: int, new: str) -> str:
        units = t.encode("utf-16-le")
        a, b = min(a, b), max(a, b)
        return (units[: 2 * a] + new.encode("utf-16-le") + units[2 * b :]).decode("utf-16-le")

    pieces = ["𐐀", "漢", "\r", "\n", "\r\n", "é", "xy", "", "\u2028"]
    for version in range(2, 302):
        n_lines = len(lines_utf16(text))
        start = (rng.randrange(n_lines + 1), rng.randrange(8))
        end = (start[0] + rng.randrange(2), rng.randrange(8))
        new = rng.choice(pieces)
        change(client, uri, version, start, end, new)
        text = splice(text, offset(text, *start), offset(text, *end), new)
    assert server_text(client, uri) == text


# -- size -------------------------------------------------------------------------------------


def test_a_huge_document_gets_no_completion_and_does_not_stall_others(daemon):
    client = initialized()
    huge = "x = 1\n" * (8_000_000 // 6)
    client.send(did_open("file:///tmp/huge.py", huge))
    t0 = time.monotonic()
    client.send(inline_request(1, "file:///tmp/huge.py", 100, 5))
    assert client.reply_to(1)["result"]["items"] == []
    assert time.monotonic() - t0 < 20
    other = initialized()
    other.send(did_open("file:///tmp/small.py", "def f(x):\n    \n"))
    other.send(inline_request(2, "file:///tmp/small.py", 1, 4))
    assert "items" in other.reply_to(2)["result"]


def test_a_large_document_completes_in_bounded_time(daemon):
    """1 MB of text: the prompt is cut by characters before tokenizing and the syntax rules
    see a window, so this costs about what a small document does."""
    client = initialized()
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30_000))
    assert len(body) > 1_000_000
    client.send(did_open("file:///tmp/large.py", body + "def g(y):\n    \n"))
    line = body.count("\n") + 1
    t0 = time.monotonic()
    client.send(inline_request(1, "file:///tmp/large.py", line, 4))
    assert "items" in client.reply_to(1)["result"]
    assert time.monotonic() - t0 < 60


# -- load -------------------------------------------------------------------------------------


def test_twenty_sessions_and_a_keystroke_storm_each_get_one_reply_in_time(daemon):
    """Every request is answered exactly once within a deadline: what the queue bound or the
    deadline drops is answered with an empty list, newest-wins answers the superseded."""
    replies: dict = {}
    errors: list = []

    def editor(n: int) -> None:
        try:
            client = initialized()
            uri = f"file:///tmp/load{n}.py"
            client.send(did_open(uri, f"def f{n}(x):\n    \n"))
            ids = [f"{n}-{k}" for k in range(5)]
            for k, msg_id in enumerate(ids):  # a storm: five keystrokes 20 ms apart
                change(client, uri, k + 2, (1, 4 + k), (1, 4 + k), "x")
                client.send(inline_request(msg_id, uri, 1, 5 + k))
                time.sleep(0.02)
            got = collect(client, ids, timeout=150)
            got.update({i: got.get(i, []) + [m] for m in drain(client, 0.5) if (i := m.get("id"))})
            for msg_id in ids:
                replies[msg_id] = len(got.get(msg_id, []))
                for reply in got.get(msg_id, []):
                    assert "result" in reply, reply
        except Exception as exc:  # collected: a thread's assertion must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=editor, args=(n,)) for n in range(20)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors[:3]
    assert len(replies) == 100 and set(replies.values()) == {1}
    assert time.monotonic() - t0 < 180


# -- the token and what comes before authentication ------------------------------------------


@pytest.fixture(scope="module")
def config_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("config")
    return home, dict(os.environ, XDG_CONFIG_HOME=str(home))


@pytest.mark.parametrize("content", ["", "short", "x" * 31, "not a token at all!"])
def test_a_malformed_token_file_refuses_tcp(tiny_manifest, tmp_path, config_home, content):
    home, env = config_home
    token = home / "codespec" / "daemon.token"
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text(content)
    proc, _ = serve(tmp_path, tiny_manifest, "--tcp", str(free_port()), env=env)
    assert proc.wait(timeout=60) == 2
    (line,) = log_of(proc).strip().splitlines()
    assert "not serving TCP" in line and "well-formed" in line
    token.unlink()


@pytest.fixture(scope="module")
def tcp_daemon(tiny_manifest, tmp_path_factory, config_home):
    home, env = config_home
    port = free_port()
    proc, path = serve(tmp_path_factory.mktemp("tcp"), tiny_manifest, "--tcp", str(port), env=env)
    wait_for_socket(path)
    wait_for_model(proc)  # the load grows the daemon's memory: not what a test here measures
    token = (home / "codespec" / "daemon.token").read_text().strip()
    yield port, token, proc
    proc.terminate()
    proc.wait(timeout=30)
    log = log_of(proc)
    assert "Traceback" not in log, log[-3000:]


def tcp_client(port: int) -> RawClient:
    return RawClient(socket.create_connection(("127.0.0.1", port), timeout=10))


def test_the_token_file_is_created_private_and_well_formed(tcp_daemon, config_home):
    port, token, _ = tcp_daemon
    path = config_home[0] / "codespec" / "daemon.token"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and len(token) >= 32


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": ""}},
        {"jsonrpc": "2.0", "method": "codespec/auth"},
        {"jsonrpc": "2.0", "method": "codespec/auth", "params": []},
        {"jsonrpc": "2.0", "method": "codespec/auth", "params": ["TOKEN"]},
        {"jsonrpc": "2.0", "method": "codespec/auth", "params": "TOKEN"},
        {"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": 123}},
        b"Content-Length: 200001\r\n\r\n" + b"[" * 100_000 + b"]" * 100_001,
        b"Content-Length: 4\r\n\r\nnull",
    ],
)
def test_bad_authentication_is_refused_cleanly(tcp_daemon, frame):
    port, token, proc = tcp_daemon
    client = tcp_client(port)
    if isinstance(frame, dict):
        frame = json.loads(json.dumps(frame).replace("TOKEN", token))
    try:
        client.send(frame)
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        client.send(initialize)
    except OSError:
        pass  # an oversized frame is refused at its header: the reset can beat our second send
    assert client.closed()  # closed; nothing was dispatched (a reply would fail this)
    good = tcp_client(port)
    good.send({"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": token}})
    assert good.initialize()["result"]
    assert proc.poll() is None


def test_before_authentication_only_a_small_prompt_frame_is_read(tcp_daemon):
    port, token, proc = tcp_daemon
    rss_before = _rss_mb(proc.pid)
    t0 = time.monotonic()
    for _ in range(4):  # four 64 MiB bodies announced: refused at the header
        client = tcp_client(port)
        try:
            client.send(b"Content-Length: %d\r\n\r\n" % (64 << 20) + b"a" * (1 << 20))
        except OSError:
            pass  # closed while we were still sending: as it should be
        assert client.closed()
    oversized = tcp_client(port)
    oversized.send(b"Content-Length: %d\r\n\r\n" % (AUTH_MAX_BODY + 1))
    assert oversized.closed()
    assert time.monotonic() - t0 < 10
    assert _rss_mb(proc.pid) - rss_before < 50


def test_idle_unauthenticated_connections_are_capped_and_timed_out(tcp_daemon):
    port, token, proc = tcp_daemon
    idle = [tcp_client(port) for _ in range(MAX_UNAUTHENTICATED + 30)]
    closed_at_once = 0
    for client in idle:
        client.sock.settimeout(0.5)
        try:
            if client.read(timeout=0.5) is None:
                closed_at_once += 1
        except (TimeoutError, OSError):
            pass
    assert closed_at_once >= 30  # beyond the cap: closed without waiting
    for client in idle:
        client.sock.settimeout(15)
    time.sleep(6)  # past the authentication timeout: the held ones are closed too
    assert all(client.closed() for client in idle)
    good = tcp_client(port)
    good.send({"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": token}})
    assert good.initialize()["result"]


def test_idle_unauthenticated_connections_cannot_lock_a_real_client_out(tcp_daemon):
    """A local user holding as many idle connections as the cap: a real client, which sends its
    token at once, still gets in (the longest-waiting idle one makes room)."""
    port, token, proc = tcp_daemon
    idle = [tcp_client(port) for _ in range(MAX_UNAUTHENTICATED)]
    time.sleep(0.3)  # all of them are waiting to authenticate
    good = tcp_client(port)
    good.send({"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": token}})
    assert good.initialize()["result"]
    for client in idle:
        client.sock.close()


def _reset(client: RawClient) -> None:
    """Close with a reset rather than a FIN: what a killed editor's socket, or one closed with
    bytes unread, sends."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()


def test_a_connection_reset_at_any_point_ends_its_session_quietly(tcp_daemon):
    """A peer that resets its connection before authenticating, between frames, inside a header
    or inside a body has ended its stream: the daemon logs no traceback and serves on."""
    port, token, proc = tcp_daemon
    logged = len(log_of(proc))
    auth = {"jsonrpc": "2.0", "method": "codespec/auth", "params": {"token": token}}
    _reset(tcp_client(port))  # before a word
    for cut in (b"", b"Content-Len", b'Content-Length: 40\r\n\r\n{"jsonrpc"'):
        client = tcp_client(port)
        client.send(auth)
        assert client.initialize()["result"]
        client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        if cut:
            client.sock.sendall(cut)
        time.sleep(0.2)  # the daemon is waiting inside the frame
        _reset(client)
    good = tcp_client(port)
    good.send(auth)
    assert good.initialize()["result"]
    time.sleep(0.3)
    assert "Traceback" not in log_of(proc)[logged:]
    assert proc.poll() is None


def test_a_client_that_never_reads_is_disconnected_not_buffered(daemon):
    """Replies pile up in the daemon for a client that sends and never reads: past a bound it
    is disconnected (one log line) and what it sent is not served. Twenty 10 MB replies asked
    for then grow the daemon no more than two do (the first round sets the high-water mark of
    parsing a 10 MB document: memory freed is not always returned to the system)."""

    def hog(uri: str, replies: int) -> RawClient:
        client = initialized()
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.send(did_open(uri, "x" * 10_000_000))
        try:
            for i in range(replies):
                params = {"uri": uri}
                client.send(
                    {
                        "jsonrpc": "2.0",
                        "id": 100 + i,
                        "method": "codespec/document",
                        "params": params,
                    }
                )
        except OSError:
            pass  # disconnected while we were still sending: as it should be
        time.sleep(3)
        return client

    hog("file:///tmp/big-doc-a.py", 2)
    rss_after_two = _rss_mb(daemon.pid)
    client = hog("file:///tmp/big-doc-b.py", 20)
    assert _rss_mb(daemon.pid) - rss_after_two < 60  # not eighteen more replies of 10 MB
    assert "does not read its replies" in log_of(daemon)
    client.sock.settimeout(5)
    try:
        while client.sock.recv(1 << 20):  # what was sent, then the daemon's hang-up
            pass
        hung_up = True
    except ConnectionResetError:
        hung_up = True
    except TimeoutError:  # still connected, waiting for more
        hung_up = False
    assert hung_up
    assert request(initialized(), 3, "codespec/stats", {})["result"]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- one daemon per socket, and the relay -----------------------------------------------------


def test_two_daemons_started_at_once_leave_exactly_one(tiny_manifest, tmp_path):
    procs = [serve(tmp_path, tiny_manifest)[0] for _ in range(2)]
    path = tmp_path / "d.sock"
    wait_for_socket(path)
    deadline = time.monotonic() + 60
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    losers = [p for p in procs if p.poll() is not None]
    (winner,) = [p for p in procs if p.poll() is None]
    assert len(losers) == 1 and losers[0].returncode == 1
    (line,) = [x for x in log_of(losers[0]).splitlines() if x.startswith("codespec:")]
    assert "another codespec daemon" in line and str(path) in line
    assert initialized(path).sock  # the winner serves the socket
    relay, client = relay_client("--socket", str(path), "--pair", str(tiny_manifest))
    try:
        assert client.initialize()["result"]  # the relay connects to the winner
    finally:
        relay.kill()
        winner.terminate()
        winner.wait(timeout=30)
    assert not path.exists()


def test_a_restart_storm_loads_the_model_stack_once(tiny_manifest, tmp_path):
    """Many editors' relays start a daemon at once (after a crash, or many windows opening):
    the ones that lose the socket's lock leave before importing torch or transformers, in
    well under the time the stack takes to import."""
    winner, _ = serve(tmp_path, tiny_manifest)
    path = tmp_path / "d.sock"
    wait_for_socket(path)
    command = [sys.executable, "-X", "importtime", "-m", "codespec", "serve", "--socket"]
    command += [str(path), "--pair", str(tiny_manifest), "--no-status"]
    try:
        storm = [
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        for proc in storm:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 1, err[-2000:]
            assert "another codespec daemon" in err
            imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines()}
            assert "torch" not in imported and "transformers" not in imported
            assert "codespec.server.endpoint" in imported  # (the control: the list is there)
        assert initialized(path).sock  # the first one still serves
    finally:
        winner.terminate()
        winner.wait(timeout=30)


@pytest.mark.parametrize("header", [b"Content-Length: abc", b"Content-Length: -1", b"Bogus"])
def test_the_relay_exits_on_bad_framing_instead_of_hanging(daemon, header):
    relay, client = relay_client("--socket", str(SOCKET))
    assert client.initialize()["result"]
    relay.stdin.write(header + b"\r\n\r\n{}")
    relay.stdin.flush()
    assert relay.wait(timeout=20) == 1
    err = relay.stderr.read().decode() if relay.stderr else ""
    assert "Traceback" not in err


# -- fuzzing ----------------------------------------------------------------------------------


def test_fuzzed_messages_through_the_relay_never_make_it_deaf(daemon):
    """Random and mutated messages (well framed: a framing violation ends the relay by design)
    written to `codespec lsp`'s stdin: the relay stays up and relays, and a well-formed request
    is answered afterwards."""
    from rpc import relay_client

    rng = random.Random(11)
    junk = [None, True, -1, 2**70, "x", "", [], {}, [[[]]], 1.5e308, "é𐐀", "[" * 50_000]
    relay, client = relay_client("--socket", str(SOCKET))
    assert client.initialize()["result"]
    client.send(did_open("file:///tmp/rf.py", "def f(x):\n    \n"))
    templates = [
        did_open("file:///tmp/rf.py", "x = 1\n"),
        inline_request(5, "file:///tmp/rf.py", 1, 4),
        {"jsonrpc": "2.0", "id": 6, "method": "codespec/stats", "params": {}},
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didChange",
            "params": {
                "textDocument": {"uri": "file:///tmp/rf.py", "version": 3},
                "contentChanges": [{"text": "y = 2\n"}],
            },
        },
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didClose",
            "params": {"textDocument": {"uri": "file:///tmp/nope.py"}},
        },
    ]
    for _ in range(300):
        message = json.loads(json.dumps(rng.choice(templates)))
        target = message.get("params") if isinstance(message.get("params"), dict) else message
        key = rng.choice(list(target) or ["zz"])
        target[key] = rng.choice(junk)
        body = json.dumps(message).encode()
        if rng.random() < 0.1:
            body = body[: rng.randrange(len(body))] or b"{"
        elif rng.random() < 0.05:
            body = b"[" * 100_000 + b"]" * 100_000
        client.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    drained = drain(client, 2.0)
    assert relay.poll() is None  # still up
    assert all(no_leak(m) for m in drained if "error" in m)
    client.send({"jsonrpc": "2.0", "id": "after", "method": "codespec/stats", "params": {}})
    assert "daemon" in client.reply_to("after")["result"]
    relay.kill()


def test_fuzzed_frames_never_take_the_daemon_down(daemon):
    """A few thousand random and mutated frames (framing, JSON, params shapes) over many
    connections: the daemon stays up, never sends a traceback, and afterwards answers a
    well-formed request within a bound."""
    rng = random.Random(7)
    valid = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        did_open("file:///tmp/f.py", "def f(x):\n    \n"),
        inline_request(2, "file:///tmp/f.py", 1, 4),
        {"jsonrpc": "2.0", "id": 3, "method": "codespec/stats", "params": {}},
        {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2}},
        {"jsonrpc": "2.0", "id": 4, "method": "shutdown"},
    ]
    junk = [None, True, -1, 2**70, "x", "", [], {}, [[[]]], {"a": {"b": [1]}}, 1.5e308, "é𐐀"]

    def mutate(message: dict) -> bytes:
        m = json.loads(json.dumps(message))
        for _ in range(rng.randrange(1, 4)):
            target = m  # walk down a random path of nested objects, then break something
            while rng.random() < 0.6:
                nested = [v for v in target.values() if isinstance(v, dict) and v]
                if not nested:
                    break
                target = rng.choice(nested)
            if target:
                key = rng.choice(list(target))
                action = rng.random()
                if action < 0.5:
                    target[key] = rng.choice(junk)
                elif action < 0.7:
                    del target[key]
                else:
                    target[rng.choice(["id", "method", "params", "zz"])] = rng.choice(junk)
        body = json.dumps(m).encode()
        roll = rng.random()
        if roll < 0.1:
            body = body[: rng.randrange(len(body))]  # truncated JSON
        elif roll < 0.15:
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    def bad_framing() -> bytes:
        return rng.choice(
            [
                b"Content-Length: 5\r\nContent-Type: x\r\n\r\nhello",
                b"Content-Length: 10\r\n\r\nshort",
                b"content-length: 2\r\n\r\n{}",
                b"Content-Length: 3\r\nX-Junk:\xff\r\n\r\n{}}",
                b"\r\n\r\n",
                b"Content-Length: 1" + b"0" * 30 + b"\r\n\r\n",
            ]
        )

    received: list[dict] = []
    frames = 0
    for _ in range(100):  # connections
        client = unix_client(SOCKET)
        client.sock.settimeout(5)
        for _ in range(rng.randrange(20, 60)):
            data = bad_framing() if rng.random() < 0.02 else mutate(rng.choice(valid))
            try:
                client.send(data)
            except OSError:
                break  # the daemon closed this connection (bad framing): fine
            frames += 1
        received += drain(client, 0.3)
        client.sock.close()
    assert frames > 2000
    assert all(no_leak(m) for m in received if "error" in m)
    assert not any(m.get("method") == "window/showMessage" for m in received)
    t0 = time.monotonic()
    client = initialized()
    assert "served" in request(client, "after", "codespec/stats", {})["result"]["daemon"]
    assert time.monotonic() - t0 < 10


def test_lone_surrogates_anywhere_a_client_sends_text_get_plain_answers(daemon):
    """Half a surrogate pair (JSON allows it) in a document, an edit, a languageId and a menu
    item's text: every request is answered with a result, never -32603; positions still count
    that half as one UTF-16 unit."""
    client = initialized()
    uri = "file:///tmp/lone.py"
    opened = did_open(uri, "s = '\ud800'\nx = f(")
    opened["params"]["textDocument"]["languageId"] = "py\udc00thon"
    client.send(opened)
    change(client, uri, 2, (1, 6), (1, 6), "a\udfff")
    assert server_text(client, uri) == "s = '\ufffd'\nx = f(a\ufffd"  # (one unit each)
    menu = inline_request("menu", uri, 1, 8)
    menu["params"]["context"]["selectedCompletionInfo"] = {
        "range": {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 8}},
        "text": "a\ud800b",
    }
    client.send(menu)
    reply = client.reply_to("menu")
    assert "result" in reply and no_leak(reply), reply
    client.send(inline_request("plain", uri, 1, 8))  # (the control: a request beside it)
    assert "result" in client.reply_to("plain")
