"""Snippets of the other open documents for one request: the windows most like the code above
the cursor, and the window the user last edited, as Copilot's neighbouring tabs and Continue's
recently edited ranges do.

The whole of another document rarely fits a prompt, and its first lines (imports, a licence) are
seldom what helps. What helps is code that looks like the code being written (the same calls, the
same names) and code the user just changed elsewhere. So each other open document of the
language family is cut into windows of ``WINDOW_LINES`` lines, ``STEP_LINES`` apart; a window's
score is the Jaccard similarity of its identifiers and those of the lines above the cursor, plus
``RECENT_EDIT_BONUS`` when it holds the document's last edit made in the last ``RECENT_S``
seconds. The best windows above ``MIN_SCORE`` are shown, at most one per document.

Only lines above the cursor's line are compared, so typing on a line never changes the choice;
and a window chosen for a document's last prompt stays while it still scores
``KEEP_SCORE`` (below ``MIN_SCORE``: hysteresis), since the KV cache reuses a prompt only up to
its first changed token and these windows come before the file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .symbols import KEYWORDS

WINDOW_LINES = 20
STEP_LINES = 10
QUERY_LINES = 20  # the lines above the cursor a window is compared with
MAX_SNIPPETS = 2
MIN_SCORE = 0.1
KEEP_SCORE = 0.05
RECENT_EDIT_BONUS = 0.25
RECENT_S = 600.0
MAX_DOCUMENT_LINES = 20_000  # a longer document is not cut into windows (its cost per request)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Neighbour:
    """Another open document as the snippets see it: its name in the prompt, its text, and the
    line and time (``time.monotonic``) of its last edit (None: not edited since it was opened)."""

    path: str
    text: str
    edited_line: int | None = None
    edited_at: float | None = None


@dataclass(frozen=True)
class Snippet:
    path: str
    start_line: int  # 0-based, in its document
    text: str
    score: float

    @property
    def key(self) -> tuple[str, int]:
        return (self.path, self.start_line)


@dataclass
class SnippetMemory:
    """The snippets a document's last prompt held (see the module's docstring)."""

    keys: list[tuple[str, int]] = field(default_factory=list)


def identifiers(text: str) -> frozenset[str]:
    """The names in ``text``, keywords left out (every window shares ``def`` and ``return``)."""
    return frozenset(
        name for name in IDENTIFIER.findall(text) if len(name) > 1 and name.lower() not in KEYWORDS
    )


def query_of(prefix: str) -> frozenset[str]:
    """The identifiers of the ``QUERY_LINES`` lines above the cursor's line."""
    lines = prefix.split("\n")[:-1]  # the cursor's line is being typed
    return identifiers("\n".join(lines[-QUERY_LINES:]))


@functools.lru_cache(maxsize=32)
def windows(text: str) -> tuple[tuple[int, str, frozenset[str]], ...]:
    """``(first line, text, identifiers)`` of each window, ``STEP_LINES`` apart; () for a huge
    document. Cached per text: a document unchanged since the last request costs nothing (a
    string keeps its hash)."""
    lines = text.split("\n")
    if len(lines) > MAX_DOCUMENT_LINES:
        return ()
    last = max(len(lines) - WINDOW_LINES, 0)
    starts = list(range(0, last + 1, STEP_LINES))
    if starts[-1] != last:  # the document's end gets its window too
        starts.append(last)
    names = [identifiers(line) for line in lines]
    return tuple(
        (
            s,
            "\n".join(lines[s : s + WINDOW_LINES]).strip("\n") + "\n",
            frozenset().union(*names[s : s + WINDOW_LINES]),
        )
        for s in starts
    )


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def choose_snippets(
    prefix: str,
    neighbours: Iterable[Neighbour],
    now: float,
    memory: SnippetMemory | None = None,
) -> list[Snippet]:
    """The windows of ``neighbours`` worth showing for a cursor after ``prefix``, best first,
    except that those of the last prompt (``memory``) keep their places while they score
    ``KEEP_SCORE``."""
    query = query_of(prefix)
    best: dict[str, Snippet] = {}  # per document, its best window
    kept: dict[tuple[str, int], Snippet] = {}
    remembered = set(memory.keys) if memory else set()
    for neighbour in neighbours:
        recent = neighbour.edited_at is not None and now - neighbour.edited_at <= RECENT_S
        for start, text, names in windows(neighbour.text):
            score = jaccard(query, names)
            line = neighbour.edited_line
            if recent and line is not None and start <= line < start + WINDOW_LINES:
                score += RECENT_EDIT_BONUS
            snippet = Snippet(neighbour.path, start, text, score)
            if snippet.key in remembered and score >= KEEP_SCORE:
                kept[snippet.key] = snippet
            if score >= MIN_SCORE and (
                neighbour.path not in best or score > best[neighbour.path].score
            ):
                best[neighbour.path] = snippet
    chosen = [kept[key] for key in (memory.keys if memory else []) if key in kept]
    paths = {s.path for s in chosen}
    for snippet in sorted(best.values(), key=lambda s: -s.score):
        if len(chosen) >= MAX_SNIPPETS:
            break
        if snippet.path not in paths:
            chosen.append(snippet)
            paths.add(snippet.path)
    chosen = chosen[:MAX_SNIPPETS]
    if memory is not None:
        memory.keys = [s.key for s in chosen]
    return chosen


def as_files(snippets: list[Snippet]) -> tuple[tuple[str, str], ...]:
    """The snippets as prompt files ``(path, text)``."""
    return tuple((s.path, s.text) for s in snippets)
