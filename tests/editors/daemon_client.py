"""The daemon behind a private socket, seen as a client of its own (for the editor tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))


def daemon_stats(socket_path: Path, params: dict | None = None) -> dict:
    """`codespec/stats` from the daemon behind `socket_path`, as a client of its own."""
    from rpc import unix_client

    client = unix_client(socket_path)
    client.initialize()
    client.send({"jsonrpc": "2.0", "id": "s", "method": "codespec/stats", "params": params or {}})
    return client.reply_to("s")["result"]
