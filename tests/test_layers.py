"""Imports run one way (docs/architecture.md): each module imports only its own room or the
layers below it, so the engine never learns about servers, nor the stats store about either."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "codespec"

# Lowest first. A room is a top-level module or subpackage of codespec.
LAYERS = [
    {"files", "memory", "languages", "machine", "client_stops", "numbers", "printable", "sources"},
    {"stats", "engine", "quant", "tokenizer"},
    {"models", "stops", "generator", "pairs", "remote", "workspace", "ggml", "torch_backend"},
    {"prompt", "draft_verdict", "backend_choice", "library_choice", "nextedit"},
    {"runtime"},
    {"lookahead", "completion"},
    {"settings"},
    {"server", "bench"},
    {"daemon_client"},
    {"cli"},
    {"__main__", "__init__"},
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def room_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def imported_rooms(path: Path) -> set[str]:
    """The codespec rooms that ``path`` imports, at module level or inside functions."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [target] if node.module else [[*base, a.name] for a in node.names]
            elif node.module and node.module.split(".")[0] == "codespec":
                names = [node.module.split(".")]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "codespec"]
        else:
            continue
        rooms.update(name[1] for name in names if len(name) > 1)
    return rooms


def test_every_room_has_a_layer():
    rooms = {room_of(p) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set(LAYER), f"give these a layer: {sorted(rooms - set(LAYER))}"


def test_no_import_runs_upward():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = room_of(path)
        for target in imported_rooms(path):
            if target != room and LAYER.get(target, 99) >= LAYER[room]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert not upward, upward


def test_the_check_sees_every_form_of_import():
    """The parser itself: ``from . import module``, ``from ..room import name`` two levels
    down, and imports inside functions (the command line imports its rooms lazily)."""
    assert "draft_verdict" in imported_rooms(PACKAGE / "runtime.py")
    assert {"completion", "stats", "stops"} <= imported_rooms(PACKAGE / "server" / "jobs.py")
    assert {"server", "stats"} <= imported_rooms(PACKAGE / "cli" / "serve.py")
    assert imported_rooms(PACKAGE / "engine" / "loop.py") == {"engine", "machine", "memory"}


def imported_modules(path: Path, package_root: Path = PACKAGE) -> set[str]:
    """The codespec modules ``path`` imports, dotted (``codespec.server.jobs``), type-only
    imports included: a circle of them is a circle of knowledge, whether or not Python runs
    it."""
    package = path.relative_to(package_root.parent).with_suffix("").parts[:-1]
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = [*package[: len(package) - node.level + 1]]
            if node.module:
                modules.add(".".join([*base, *node.module.split(".")]))
            else:
                modules.update(".".join([*base, alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("codespec."):
            modules.add(str(node.module))
    return modules


def import_circles(room: str, package_root: Path = PACKAGE) -> list[list[str]]:
    """The circles of imports among the modules of ``room`` (depth-first, each once)."""
    files = {
        ".".join(p.relative_to(package_root.parent).with_suffix("").parts): p
        for p in (package_root / room).rglob("*.py")
    }
    arrows = {
        name: imported_modules(path, package_root) & set(files) for name, path in files.items()
    }
    circles, done = [], set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            circles.append(trail[trail.index(name) :] + [name])
            return
        if name in done:
            return
        for target in sorted(arrows[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(files):
        visit(name, [])
    return circles


def test_the_server_modules_import_each_other_in_no_circle():
    assert import_circles("server") == []


def test_the_circle_check_finds_a_circle(tmp_path):
    """Its positive control: two modules that import each other, one of them type-only."""
    room = tmp_path / "codespec" / "room"
    room.mkdir(parents=True)
    (room / "a.py").write_text("from .b import B\n")
    (room / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    circles = import_circles("room", tmp_path / "codespec")
    assert circles == [["codespec.room.a", "codespec.room.b", "codespec.room.a"]]


def imports_torch(path: Path) -> bool:
    """Whether ``path`` imports torch (or transformers, which imports it), anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in ("torch", "transformers") for name in names):
            return True
    return False


def test_the_engine_imports_no_torch():
    """The decode loop's maths is numpy's: torch is the torch backend's (``torch_backend/``),
    so a ggml-only install never needs it to run the engine."""
    assert [p.name for p in (PACKAGE / "engine").glob("*.py") if imports_torch(p)] == []
    assert imports_torch(PACKAGE / "torch_backend" / "kvcache.py")  # (the check sees one)
