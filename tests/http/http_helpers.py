"""The HTTP tests' daemon: one with the HTTP front on, a tiny model behind it (see
lsp_helpers), and clients for it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))

from lsp_helpers import free_port, start_daemon, wait_for_model  # noqa: E402


class HttpDaemon:
    def __init__(self, proc, port: int, socket_path: Path, stats_db: Path, key: str | None):
        self.proc, self.port, self.socket_path, self.stats_db = proc, port, socket_path, stats_db
        self.url = f"http://127.0.0.1:{port}"
        self.key = key

    def client(
        self, agent: str = "pytest-client", timeout: float = 60.0, with_key: bool = True
    ) -> httpx.Client:
        headers = {"User-Agent": agent}
        if with_key and self.key is not None:
            headers["Authorization"] = f"Bearer {self.key}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


def start_http_daemon(
    manifest: Path, folder: Path, *extra: str, key: str | None = None
) -> HttpDaemon:
    """A daemon answering HTTP on a free loopback port once its model has loaded; each target
    pass slowed by 20 ms, so that a stop is seen to take effect (``key``: the API key its
    ``extra`` arguments give it, which the clients then send)."""
    port = free_port()
    socket_path, stats_db = folder / "d.sock", folder / "stats.sqlite3"
    proc = start_daemon(
        manifest,
        "--http",
        str(port),
        "--test-pass-delay",
        "0.02",
        "--max-tokens",
        "40",
        "--stats-db",
        str(stats_db),
        *extra,
        socket_path=socket_path,
    )
    wait_for_model(proc)
    daemon = HttpDaemon(proc, port, socket_path, stats_db, key)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with daemon.client() as client:
                if client.get("/health").status_code == 200:
                    return daemon
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=30)
    raise TimeoutError(f"the HTTP front did not answer: {proc.log_path.read_text()[-2000:]}")


def daemon_stats(daemon: HttpDaemon) -> dict:
    """`codespec/stats` from the daemon, as a client of its own over its socket."""
    from rpc import unix_client

    client = unix_client(daemon.socket_path)
    client.initialize()
    client.send({"jsonrpc": "2.0", "id": "s", "method": "codespec/stats", "params": {}})
    return client.reply_to("s")["result"]
