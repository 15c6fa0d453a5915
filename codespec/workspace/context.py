"""Cross-file context for one request: what other files of the workspace say about the names
near the cursor, chosen per request and ordered so the cached prompt survives typing.

Retrieval helps only some completions and can hurt others, so nothing is added unless there is
a reason: a name used near the cursor that the file itself does not define, and that another
file of the workspace does (or a name being typed that starts like one). What is added is each
such definition's summary (signature, doc comment, a class's outline: ``symbols.py``), grouped
by the file that holds it and shown in the repo-level prompt format with the file's path.

The KV cache reuses a prompt up to its first changed token, so the chunks a document was last
given stay where they were while they still fit; new ones go after them (``ContextMemory``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .index import WorkspaceIndex
from .symbols import IDENTIFIER, KEYWORDS, Definition

NEAR_LINES_BEFORE, NEAR_LINES_AFTER = 3, 1  # where "near the cursor" is: its statement
MAX_DEFINITIONS_PER_NAME = 3  # a name defined in more files than this says little
MIN_TYPED_PREFIX = 3  # a partly typed name is looked up from this many characters
MAX_TYPED_MATCHES = 4
# languages whose files may define what another uses (a .ts file imports from a .js one)
FAMILIES = {
    "typescript": {"typescript", "typescriptreact", "javascript"},
    "typescriptreact": {"typescript", "typescriptreact", "javascript"},
    "javascript": {"javascript", "typescript", "typescriptreact"},
    "c": {"c", "cpp"},
    "cpp": {"c", "cpp"},
}
TYPED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
# Of the extra-context token budget, the share workspace definitions may take (the rest is left
# to the other open documents), counted in characters at a cautious characters per token.
WORKSPACE_SHARE = 0.5
CHARS_PER_TOKEN = 3
# With workspace definitions in it, the prompt's other files take this share of a prompt sized
# by time (``completion.sized_by_time``) instead of the usual: a definition is worth more of a
# slow CPU's prefill than the far end of the prefix (``docs/workspace.md``, "Measured").
EXTRA_SHARE_WITH_DEFINITIONS = 0.4
MIN_DEFINITION_TOKENS = 64  # ... and at least this many tokens (a signature or two)


@dataclass(frozen=True)
class Chunk:
    """One definition shown in the prompt: ``path``'s ``definition``."""

    path: str
    definition: Definition

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.path, self.definition.line, self.definition.name)


@dataclass
class ContextMemory:
    """The chunks a document's last prompt held, in order (see the module's docstring)."""

    chunks: list[Chunk] = field(default_factory=list)


def names_near_cursor(prefix: str, suffix: str) -> list[str]:
    """Identifiers near the cursor, nearest first (the lines just above count most)."""
    before = prefix.split("\n")[-NEAR_LINES_BEFORE:]
    after = suffix.split("\n")[:NEAR_LINES_AFTER]
    ordered: list[str] = []
    seen: set[str] = set()
    for line in [*reversed(before), *after]:
        for name in IDENTIFIER.findall(line):
            if name not in seen and len(name) >= 2 and name.lower() not in KEYWORDS:
                seen.add(name)
                ordered.append(name)
    return ordered


def choose_chunks(
    index: WorkspaceIndex,
    path: str | None,
    language: str,
    prefix: str,
    suffix: str,
    char_budget: int,
    memory: ContextMemory | None = None,
) -> list[Chunk]:
    """The definitions worth showing for a cursor in ``path`` (relative to the index's root,
    None for a document outside it): [] when nothing near the cursor needs another file."""
    if char_budget <= 0:
        return []
    family = FAMILIES.get(language, {language})
    own = index.files.get(path) if path else None
    defined_here = {d.name for d in own.definitions} if own else set()
    wanted: list[Chunk] = []
    seen: set[tuple[str, int, str]] = set()

    def add(found: tuple[tuple[str, Definition], ...]) -> None:
        elsewhere = [(p, d) for p, d in found if p != path and _language(index, p) in family]
        if not elsewhere or len(elsewhere) > MAX_DEFINITIONS_PER_NAME:
            return
        for file, definition in elsewhere:
            chunk = Chunk(file, definition)
            if chunk.key not in seen:
                seen.add(chunk.key)
                wanted.append(chunk)

    typed = TYPED_NAME.search(prefix)
    if typed and len(typed.group()) >= MIN_TYPED_PREFIX:  # a name being typed: what it may be
        start = typed.group()
        # (the index thread may be adding names meanwhile: single lookups, no iteration)
        matches = [n for n in index.names_starting(start) if n not in defined_here]
        for name in sorted(matches, key=len)[:MAX_TYPED_MATCHES]:
            add(index.by_name.get(name, ()))
    for name in names_near_cursor(prefix, suffix):
        if name not in defined_here:
            add(index.by_name.get(name, ()))
    if memory is not None:  # the last prompt's chunks as the index has them now
        memory.chunks = [c for c in (_current(index, c) for c in memory.chunks) if c]
    return _fit(wanted, char_budget, memory)


def _current(index: WorkspaceIndex, chunk: Chunk) -> Chunk | None:
    """``chunk`` as its file defines it now (None: gone)."""
    for path, definition in index.by_name.get(chunk.definition.name, ()):
        if path == chunk.path and definition.kind == chunk.definition.kind:
            return chunk if definition == chunk.definition else Chunk(path, definition)
    return None


def _language(index: WorkspaceIndex, path: str) -> str:
    entry = index.files.get(path)
    return entry.language if entry else ""


def _fit(wanted: list[Chunk], char_budget: int, memory: ContextMemory | None) -> list[Chunk]:
    """The chunks to show within ``char_budget``, as a ring that keeps the cache valid: the
    last prompt's chunks stay in their places (those no longer wanted too, while there is
    room), new ones follow, most wanted first; to make room, the oldest unwanted chunks go
    first, then the least wanted new ones."""
    wanted_keys = {c.key for c in wanted}
    old = list(memory.chunks) if memory else []
    old_keys = {c.key for c in old}
    new = [c for c in wanted if c.key not in old_keys]

    def cost(chunks: list[Chunk]) -> int:
        return sum(len(c.definition.summary) + 1 for c in chunks)

    while old and cost(old + new) > char_budget:
        unwanted = next((c for c in old if c.key not in wanted_keys), None)
        if unwanted is None:
            break
        old.remove(unwanted)
    while new and cost(old + new) > char_budget:
        new.pop()
    while old and cost(old) > char_budget:  # the budget shrank: the newest wanted stay
        old.pop(0)
    chosen = old + new
    if memory is not None:
        memory.chunks = chosen
    return chosen


def as_files(chunks: list[Chunk]) -> tuple[tuple[str, str], ...]:
    """The chunks as prompt files ``(path, text)``: one per file, in the order its first chunk
    came, its definitions in that order, separated as a reader of an outline expects."""
    grouped: dict[str, list[str]] = {}
    for chunk in chunks:
        grouped.setdefault(chunk.path, []).append(chunk.definition.summary)
    return tuple((path, "\n\n".join(summaries) + "\n") for path, summaries in grouped.items())
