"""The workspace index: per workspace folder, what each source file defines, built in the
background and kept up to date from the editors' documents.

One index per folder, shared by every session that declared it (``Workspaces``), built once
on a thread of its own at the lowest CPU priority, and pausing while the model works on a
request (``busy``): a completion never waits for indexing. Files come from ``reading`` (what
may be read and what is skipped); it holds the definitions' summaries, not the files' text,
from at most ``ReadLimits.max_total_bytes`` of text read, and, when the model drafts locally,
the files' token ids for the workspace drafter (``engine/corpus.py``, within its own token
bound). ``docs/workspace.md`` measures both.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.corpus import TokenCorpus
from ..memory import return_freed_memory
from .reading import ReadLimits, walk_sources
from .symbols import Definition, definitions

log = logging.getLogger("codespec.workspace")
BUSY_POLL_S = 0.05  # how often a paused build looks whether the model is still busy
NAMES_REFRESH_S = 1.0
MAX_CHARS_PER_TOKEN = 16
MAX_INDEXES = 8  # folders indexed at once, all sessions together (each within ReadLimits)
Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class IndexedFile:
    relative: str
    language: str
    chars: int  # the file's length (its text is not kept)
    definitions: tuple[Definition, ...]


@dataclass
class WorkspaceIndex:
    """One workspace folder's index. Readers take a consistent view without locking: entries
    are replaced whole, never changed in place."""

    root: Path
    limits: ReadLimits = field(default_factory=ReadLimits)
    # the files' token ids, for the workspace drafter; filled while ``tokenize`` is set
    corpus: TokenCorpus = field(default_factory=TokenCorpus)
    tokenize: Tokenize | None = None
    files: dict[str, IndexedFile] = field(default_factory=dict)
    by_name: dict[str, tuple[tuple[str, Definition], ...]] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)
    build_s: float = 0.0
    stopped: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # the defined names, sorted, for lookups by a name's start (``names_starting``)
    _sorted: list[str] = field(default_factory=list)
    _sorted_at: float | None = None  # when (None: never)
    _changed: bool = False
    _refresh_timer: threading.Timer | None = None

    def names_starting(self, start: str, limit: int = 64) -> list[str]:
        """Up to ``limit`` defined names that begin with ``start``. The sorted list is remade
        at most every ``NAMES_REFRESH_S`` while the index changes (a build adds names all the
        time), so a request pays a bisection, not a scan of every name."""
        now = time.monotonic()
        stale = self._sorted_at is None or (
            self._changed and now - self._sorted_at >= NAMES_REFRESH_S
        )
        if stale:
            self._changed = False
            self._sorted, self._sorted_at = sorted(list(self.by_name)), now  # (list: atomic)
        names = self._sorted
        found = []
        for i in range(bisect.bisect_left(names, start), len(names)):
            if not names[i].startswith(start) or len(found) >= limit:
                break
            found.append(names[i])
        return found

    def build(self, busy: Callable[[], bool] = lambda: False) -> None:
        """Read and index every allowed file below the root (the caller's thread)."""
        started = time.monotonic()

        def keep_going() -> bool:
            while busy() and not self.stopped:
                time.sleep(BUSY_POLL_S)
            return not self.stopped

        for source in walk_sources(self.root, self.limits, keep_going):
            if not self._has(source.relative):  # (an editor's newer text may have come first)
                self.put(source.relative, source.language, source.text)
                if self.tokenize is not None:  # draft from what is indexed so far
                    self.corpus.refresh_if_due()
        if self.tokenize is not None:
            self.corpus.refresh()
        # the walk's temporaries (texts, parse trees, token lists) are free now; glibc keeps
        # their pages unless asked (``docs/workspace.md``, "Cost")
        return_freed_memory()
        self.build_s = time.monotonic() - started
        self.ready.set()
        log.info(
            "workspace %s indexed: %d files, %d definitions, %d tokens to draft from in %.1f s",
            self.root,
            len(self.files),
            sum(len(f.definitions) for f in self.files.values()),
            self.corpus.total,
            self.build_s,
        )

    def _has(self, relative: str) -> bool:
        """Whether ``relative`` is indexed as fully as it can be now."""
        if relative not in self.files:
            return False
        return self.tokenize is None or relative in self.corpus.segments

    def put(self, relative: str, language: str, text: str) -> None:
        """Index ``text`` as the file ``relative`` (read from disk, or an editor's document)."""
        if len(text) > self.limits.max_file_bytes:
            self.remove(relative)
            return
        entry = IndexedFile(relative, language, len(text), tuple(definitions(language, text)))
        if self.tokenize is not None and self._may_fit(relative, text):
            if not self.corpus.put(relative, self.tokenize(text)):
                log.debug("workspace %s: %s left out of the drafter (bound)", self.root, relative)
        with self._lock:
            old = self.files.get(relative)
            self.files[relative] = entry
            changed = {d.name for d in entry.definitions}
            if old is not None:
                changed |= {d.name for d in old.definitions}
            for name in changed:
                kept = tuple(p for p in self.by_name.get(name, ()) if p[0] != relative)
                kept += tuple((relative, d) for d in entry.definitions if d.name == name)
                if kept:
                    self.by_name[name] = kept
                else:
                    self.by_name.pop(name, None)
            # (last: ``names_starting`` copies the names without the lock, so a copy taken
            # while this ran must be marked stale after it, never before)
            self._changed = True

    def _may_fit(self, relative: str, text: str) -> bool:
        """Whether ``text``'s tokens may fit the corpus: a file that surely passes its bound is
        not tokenized at all (a token holds at most ``MAX_CHARS_PER_TOKEN`` characters, nearly
        always)."""
        if relative in self.corpus.segments:
            return True
        return len(text) // MAX_CHARS_PER_TOKEN <= self.corpus.max_tokens - self.corpus.total

    def corpus_changed(self) -> None:
        """After an editor's document changed the corpus: rebuild the drafter's index now if
        that is due, else once it is, on a timer thread at the lowest priority."""
        if self.tokenize is None or self.corpus.refresh_if_due() or not self.corpus.changed:
            return
        with self._lock:
            if self._refresh_timer is not None:
                return
            wait = max(self.corpus.min_refresh_s, 4 * self.corpus.refresh_s)
            self._refresh_timer = threading.Timer(wait, self._refresh_later)
            self._refresh_timer.daemon = True
            self._refresh_timer.start()

    def _refresh_later(self) -> None:
        self._refresh_timer = None
        lowest_priority()
        if not self.stopped:
            self.corpus.refresh()

    def remove(self, relative: str) -> None:
        self.corpus.remove(relative)
        with self._lock:
            self._changed = True
            old = self.files.pop(relative, None)
            for name in {d.name for d in old.definitions} if old else ():
                kept = tuple(p for p in self.by_name.get(name, ()) if p[0] != relative)
                if kept:
                    self.by_name[name] = kept
                else:
                    self.by_name.pop(name, None)

    def relative(self, path: str) -> str | None:
        """``path`` (absolute) relative to the root, or None when it is not below it."""
        try:
            return Path(os.path.realpath(path)).relative_to(self.root).as_posix()
        except ValueError:
            return None

    def text_bytes(self) -> int:
        return sum(f.chars for f in self.files.values())


class Workspaces:
    """The daemon's indexes, one per folder, shared by the sessions that declared it and
    dropped when the last of them goes."""

    def __init__(
        self,
        busy: Callable[[], bool] = lambda: False,
        limits: ReadLimits | None = None,
        tokenizer: Callable[[], Tokenize | None] = lambda: None,
    ):
        self.busy = busy
        # waits for the model and gives how to tokenize for the drafter (None: no drafter)
        self.tokenizer = tokenizer
        self.limits = limits or ReadLimits()
        self.indexes: dict[Path, WorkspaceIndex] = {}
        self.users: dict[Path, int] = {}
        self._lock = threading.Lock()

    def acquire(self, folder: str) -> WorkspaceIndex | None:
        """The index of ``folder`` (a local path), built in the background on first use; None
        for a folder that is not a directory, for the file system's root or the home folder
        itself (an editor started there declares it: no project is that whole tree), and past
        ``MAX_INDEXES`` folders."""
        try:
            root = Path(os.path.realpath(folder))
            if not root.is_dir() or root == Path(root.anchor) or root == Path.home().resolve():
                log.info("workspace %s: not indexed (not a project folder)", root)
                return None
        except (OSError, RuntimeError):
            return None
        with self._lock:
            index = self.indexes.get(root)
            if index is None:
                if len(self.indexes) >= MAX_INDEXES:
                    log.info(
                        "workspace %s: not indexed (%d folders already are)", root, MAX_INDEXES
                    )
                    return None
                index = self.indexes[root] = WorkspaceIndex(root, self.limits)
                thread = threading.Thread(
                    target=self._build, args=(index,), name="codespec-index", daemon=True
                )
                thread.start()
            self.users[root] = self.users.get(root, 0) + 1
            return index

    def release(self, index: WorkspaceIndex) -> None:
        with self._lock:
            left = self.users.get(index.root, 0) - 1
            if left > 0:
                self.users[index.root] = left
                return
            self.users.pop(index.root, None)
            if self.indexes.get(index.root) is index:
                del self.indexes[index.root]
            index.stopped = True

    def _build(self, index: WorkspaceIndex) -> None:
        lowest_priority()
        try:
            index.tokenize = self.tokenizer()
            index.build(self.busy)
        except Exception:  # a bug here must not take the daemon down: no context, logged
            log.exception("indexing %s failed", index.root)
            index.ready.set()


def lowest_priority() -> None:
    """Run the calling thread at the lowest CPU priority (Linux: niceness is per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass
