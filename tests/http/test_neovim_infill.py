"""A real Neovim (both versions the plugin tests use) running a minimal client that speaks
``/infill`` as llama.vim does (``llama_vim_client.lua``: curl through jobstart, the body on
stdin, a newer request stopping the running one), against ``codespec serve --http``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editors"))

from http_helpers import daemon_stats  # noqa: E402
from test_neovim import NEOVIMS, neovim  # noqa: E402

CLIENT = Path(__file__).parent / "llama_vim_client.lua"


class Neovim:
    def __init__(self, version: str, workdir: Path) -> None:
        import pynvim  # a dev dependency

        binary = neovim(version)
        self.nvim = pynvim.attach(
            "child", argv=[str(binary), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"]
        )
        self.nvim.command(f"cd {workdir}")
        self.nvim.exec_lua(f"client = dofile([==[{CLIENT}]==])")

    def lua(self, code: str):
        return self.nvim.exec_lua(code)

    def wait(self, code: str, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.lua(code)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"not within {timeout} s: {code}")

    def close(self) -> None:
        try:
            self.nvim.command("qa!")
        except Exception:
            pass


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_neovim_completes_through_infill_and_a_newer_request_stops_the_older(
    version, http_daemon, tmp_path
):
    source = tmp_path / "area.py"
    source.write_text("def area(width, height):\n    return \n\n\nprint(area(2, 3))\n")
    editor = Neovim(version, tmp_path)
    url = f"{http_daemon.url}/infill"
    try:
        editor.nvim.command(f"edit {source}")
        editor.nvim.command("set virtualedit=onemore")  # (the cursor after the line's end)
        editor.nvim.current.window.cursor = (2, 11)  # after "    return "
        editor.lua(f"client.request([==[{url}]==], 16)")
        reply = editor.wait("return client.replies[1]")
        assert set(reply) == {"content", "timings/predicted_n", "truncated", "tokens_cached"}
        assert reply["content"] != "" and reply["timings/predicted_n"] > 0
        editor.lua("client.accept(client.replies[1])")
        line = editor.nvim.current.buffer[1]
        assert line == "    return " + reply["content"].split("\n")[0]

        # a long request, then a newer one: jobstop closes the first connection, and the
        # daemon stops decoding it (its cancelled count goes up: superseded by the newer one or
        # stopped by the closed connection, whichever it sees first) and answers the second
        before = daemon_stats(http_daemon)["daemon"]["cancelled"]
        editor.nvim.current.window.cursor = (4, 0)  # a blank line: a block, 400 tokens long
        editor.lua(f"client.request([==[{url}]==], 400)")
        time.sleep(0.6)
        editor.lua(f"client.request([==[{url}]==], 8)")
        editor.wait("return #client.replies >= 2", timeout=8.0)
        deadline = time.monotonic() + 10
        while daemon_stats(http_daemon)["daemon"]["cancelled"] == before:
            assert time.monotonic() < deadline, "the stopped request was not cancelled"
            time.sleep(0.1)
    finally:
        editor.close()
