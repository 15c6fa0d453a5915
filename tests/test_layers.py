"""Imports run one way (docs/architecture.md): each module imports only its own room or the
layers below it, so the engine never learns about servers, nor the stats store about either."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "codespec"

# Lowest first. A room is a top-level module or subpackage of codespec.
LAYERS = [
    {"files", "memory", "languages", "machine", "client_stops", "numbers", "printable"},
    {"stats", "engine", "quant", "tokenizer"},
    {"models", "stops", "generator", "pairs", "remote", "workspace", "ggml"},
    {"prompt", "draft_verdict", "backend_choice", "nextedit"},
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
