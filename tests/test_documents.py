"""Text sync whose cost follows the edit, not the document: positions found in encoded slices
(checked against a character-by-character reference), the line index mended around each edit
(checked against one rebuilt from scratch, with every kind of line break)."""

from __future__ import annotations

import random

from lsprotocol import types

from codespec.server.documents import LINE_END, Document, _units, chars_in


def reference_chars(line: str, units: int, encoding: str) -> int:
    """The definition: count characters while their code units fit."""
    count, left = 0, units
    while count < len(line) and left > 0:
        need = _units(line[count], encoding)
        if need > left:
            break
        left -= need
        count += 1
    return count


def test_positions_in_slices_match_the_character_by_character_count():
    rng = random.Random(1)
    alphabet = ["a", "é", "€", "𐐀", "\ud800", "x", "中"]  # 1-4 bytes, a pair, a lone surrogate
    for _ in range(20_000):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        for encoding in ("utf-8", "utf-16", "utf-32"):
            units = rng.randrange(0, 40)
            assert chars_in(line, units, encoding) == reference_chars(line, units, encoding)


def test_the_mended_line_index_is_the_rebuilt_one():
    rng = random.Random(2)
    pieces = ["\n", "\r", "\r\n", "ab", "x", "\n\n", "", "\r\r", "\n\r", "é𐐀"]
    for _ in range(5_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(15)))
        doc = Document("file:///t.py", text)
        doc.line_starts()
        for _ in range(5):
            a = rng.randrange(len(doc.text) + 1)
            b = rng.randrange(a, len(doc.text) + 1)
            text = "".join(rng.choice(pieces) for _ in range(rng.randrange(4)))
            where = types.Range(doc.position_at(a), doc.position_at(b))
            doc.apply(types.TextDocumentContentChangePartial(range=where, text=text), "utf-16")
            assert doc.line_starts() == [0] + [m.end() for m in LINE_END.finditer(doc.text)]


def test_keystrokes_deep_in_a_minified_line_land_where_typed():
    """(How long they take over LSP, with another session waiting: ``tests/lsp/test_fairness``.)"""
    doc = Document("file:///min.js", "a\n" + "x" * 1_000_000 + "\n")
    doc.line_starts()
    for i in range(60):
        at = types.Position(line=1, character=900_000 + i)
        change = types.TextDocumentContentChangePartial(range=types.Range(at, at), text="y")
        doc.apply(change, "utf-16")
    assert doc.text[2 + 900_000 : 2 + 900_060] == "y" * 60
    assert doc.line_starts() == [0, 2, 2 + 1_000_060 + 1]


def test_an_edited_copy_leaves_the_document_as_it_was_until_taken():
    """A costly message is applied to a copy on a thread (``session.change_off_loop``): the
    document the event loop reads stays whole meanwhile, and taking the copy gives the same
    text and line index as applying the changes in place."""
    text = "a = 1\r\nb = 2\nc = 3\r"
    doc, reference = Document("file:///x.py", text), Document("file:///x.py", text)
    doc.line_starts()
    changes = [
        types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(1, 0), types.Position(1, 1)), text="bee\r\n"
        ),
        types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(0, 5), types.Position(0, 5)), text="0"
        ),
    ]
    copy = doc.edited(changes, "utf-16")
    assert doc.text == text and doc.edits == 0 and doc.line_starts() == [0, 7, 13, 19]
    for change in changes:
        reference.apply(change, "utf-16")
    doc.take(copy)
    assert doc.text == reference.text and doc.edits == reference.edits == 2
    assert doc.line_starts() == Document("file:///y.py", reference.text).line_starts()
