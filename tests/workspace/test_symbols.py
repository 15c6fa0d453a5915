"""Definitions from the tags queries, on files nobody vetted: a query run in pieces finds
exactly what one query over the whole tree finds, and a file built to make the query crawl
costs a bounded time while other threads keep running."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from codespec.workspace import symbols

REPO = Path(__file__).resolve().parents[2]


def tracked(folder: str, suffix: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).rglob("*" + suffix) if "node_modules" not in p.parts)


SAMPLES = {
    "python": tracked("codespec", ".py")[:40],
    "typescript": tracked("editor-plugins/vscode/src", ".ts")[:10],
    "lua": tracked("editor-plugins", ".lua")[:10],
}


def whole_tree_definitions(language: str, text: str) -> list[tuple]:
    """The naive path: one query over the whole tree."""
    grammar = symbols._grammar(language)
    assert grammar is not None
    tree = symbols._parser(language, grammar).parse(text.encode("utf-8"))
    source, found = text.encode("utf-8"), {}
    for _, captures in symbols.tree_sitter.QueryCursor(grammar.query).matches(tree.root_node):
        names = captures.get("name")
        node = next(
            (n for k, ns in captures.items() if k.startswith("definition.") for n in ns), None
        )
        if names and node is not None:
            kind = next(k for k in captures if k.startswith("definition.")).split(".", 1)[1]
            name = source[names[0].start_byte : names[0].end_byte].decode()
            found.setdefault((node.start_byte, node.end_byte), (name, kind, node.start_point[0]))
    return sorted(found.values(), key=lambda d: d[2])


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_the_query_in_small_pieces_finds_what_the_whole_query_finds(language, monkeypatch):
    monkeypatch.setattr(symbols, "PIECE_NODES", 8)  # nearly every node is split
    files = [p for p in SAMPLES[language] if p.stat().st_size < 200_000]
    assert files, f"no {language} sample in the repository"
    compared = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        found = [(d.name, d.kind, d.line) for d in symbols.definitions(language, text, 60.0)]
        assert found == whole_tree_definitions(language, text), path
        compared += len(found)
    assert compared > 0


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("python", "(" * 200_000),
        ("javascript", "{" * 200_000),
        ("python", "class A:\n    x = " + "(" * 200_000),
        ("lua", "f(" * 100_000),
        ("typescript", "<" * 200_000),
    ],
)
def test_a_file_built_to_make_the_query_crawl_is_bounded_and_shares_the_interpreter(language, text):
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.002)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.monotonic()
    try:
        symbols.definitions(language, text)
    finally:
        done.set()
        ticker.join()
    # without pieces, one query call ran for tens of seconds holding the interpreter
    assert time.monotonic() - started < 5 * symbols.BUDGET_S + 2
    assert max(gaps) < 1.0
    assert [d.name for d in symbols.definitions("python", "def after():\n    pass\n")] == ["after"]
