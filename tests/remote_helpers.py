"""Remote-engine test helpers: a real llama-cpp-python server, and a loopback HTTP proxy that
forwards to it or injects a fault instead.

One request per connection (the request to the server is rewritten to ``Connection: close``).
``mode`` is read when a connection arrives:

* ``pass``: forward; ``cut``: forward, then hang up after ``cut_after`` bytes of the reply;
  ``trickle``: forward one byte every ``trickle_s``; ``stall_mid``: forward ``cut_after`` bytes,
  then send nothing more;
* ``drop``: close the connection at once; ``stall``: read the request, never answer;
  ``busy``: answer a GET (``/v1/models``: the server is there) but never a completion;
* ``503``, ``429`` (``Retry-After: 1``), ``401`` (its body echoes the request's headers, as a
  careless server might), ``garbage`` (an event stream of non-JSON), ``huge`` (an endless line).

``closed_early`` counts forwarded replies the client hung up on before the server finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import free_port, wait_for_socket, write_tiny_gguf

try:
    import llama_cpp.server  # noqa: F401

    HAVE_SERVER = True
except ImportError:  # scripts/setup.sh installs it; a machine that could not build it
    HAVE_SERVER = False

needs_server = pytest.mark.skipif(
    not HAVE_SERVER, reason="llama-cpp-python[server] is not installed (scripts/setup.sh)"
)


def large_document() -> tuple[str, str]:
    """(prefix, suffix) of a 240-function Python file, the cursor in a loop between them: a
    prompt of thousands of tokens, as a team server gets (``benchmarks/team_server.py`` too)."""
    body = "".join(
        f"def handler_{i}(request, store):\n"
        f'    """Handle request kind {i}."""\n'
        f"    record = store.get(request.key_{i})\n"
        f"    return record.value * {i} if record else None\n\n\n"
        for i in range(120)
    )
    prefix = body + "def total(records):\n    result = 0\n    for record in records:\n        "
    return prefix, "\n    return result\n" + body.replace("handler_", "helper_")


def start_llama_server(model: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server`` on a free loopback port, once it answers."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            "1",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {Path(log.name).read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("llama_cpp.server did not start")


class FaultProxy:
    def __init__(self, upstream_port: int, tls=None) -> None:
        """``tls``: an ``ssl.SSLContext`` to serve HTTPS with (the server behind stays http)."""
        self.upstream_port = upstream_port
        self.tls = tls
        self.mode = "pass"
        self.raw = b""  # the reply in mode "raw"
        self.cut_after = 600
        self.trickle_s = 0.02
        self.connections = 0
        self.closed_early = 0
        self.bodies: list[bytes] = []  # what each request sent (the prompts the server saw)
        self.loop = asyncio.new_event_loop()
        self.port = free_port()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def close(self) -> None:
        async def cancel_connections() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_connections(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(lambda loop, context: None)  # (connections cut at close)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, ssl=self.tls)
        )
        ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        mode = self.mode
        try:
            if mode == "drop":
                return
            head, body = await _read_request(reader)
            self.bodies.append(body)
            if mode == "stall" or (mode == "busy" and not head.startswith(b"GET ")):
                await asyncio.sleep(3600)
            elif mode in ("503", "429", "401"):
                writer.write(_error_reply(mode, head))
                await writer.drain()
            elif mode == "raw":  # whatever the test put in ``raw``, as the whole reply
                writer.write(self.raw)
                await writer.drain()
            elif mode == "garbage":
                writer.write(_stream_head() + b"data: {this is not json\n\n")
                await writer.drain()
                await asyncio.sleep(3600)
            elif mode == "huge":
                writer.write(_stream_head() + b"data: ")
                while True:
                    writer.write(b"x" * 65536)
                    await writer.drain()
            else:
                await self._forward(head, body, reader, writer, mode)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _forward(self, head: bytes, body: bytes, reader, writer, mode: str) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        lines = [
            line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")
        ]
        up_writer.write(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n" + body)
        await up_writer.drain()
        sent = 0
        hung_up = asyncio.ensure_future(reader.read(1))  # b"": the client closed its side
        try:
            while True:
                chunk = await up_reader.read(1 if mode == "trickle" else 4096)
                if not chunk:
                    return
                if hung_up.done():
                    self.closed_early += 1
                    return
                if mode in ("cut", "stall_mid") and sent + len(chunk) > self.cut_after:
                    writer.write(chunk[: self.cut_after - sent])
                    await writer.drain()
                    if mode == "stall_mid":
                        await asyncio.sleep(3600)
                    return
                writer.write(chunk)
                sent += len(chunk)
                await writer.drain()
                if mode == "trickle":
                    await asyncio.sleep(self.trickle_s)
        except ConnectionError:
            self.closed_early += 1
        finally:
            hung_up.cancel()
            up_writer.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = (await reader.readuntil(b"\r\n\r\n"))[:-4]
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def _stream_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def _error_reply(mode: str, head: bytes) -> bytes:
    status = {"503": b"503 Service Unavailable", "429": b"429 Too Many Requests"}.get(
        mode, b"401 Unauthorized"
    )
    auth = [line for line in head.split(b"\r\n") if line.lower().startswith(b"authorization")]
    body = b"busy" if mode != "401" else b"bad credentials in: " + b"".join(auth)
    extra = b"Retry-After: 1\r\n" if mode == "429" else b""
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\n"
        + extra
        + b"content-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


@contextlib.contextmanager
def daemon_on_a_remote_engine(manifest: Path, folder: Path, *extra: str):
    """A real llama-cpp-python server on a tiny GGUF, a fault proxy before it, and a daemon
    (`codespec serve --engine` the proxy, on ``folder/d.sock``) decoding there; yields
    (daemon process, proxy, socket path) and stops all three."""

    server, url = start_llama_server(write_tiny_gguf(folder / "tiny.gguf"))
    proxy = FaultProxy(int(url.rsplit(":", 1)[1]))
    socket_path = folder / "d.sock"
    log = folder / "daemon.log"
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "codespec",
            "serve",
            "--socket",
            str(socket_path),
            "--no-status",
            "--pair",
            str(manifest),
            "--engine",
            proxy.url,
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    daemon.log_path = log
    try:
        wait_for_socket(socket_path)
        yield daemon, proxy, socket_path
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        proxy.close()
        server.terminate()
        server.wait(timeout=30)
