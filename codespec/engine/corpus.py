"""Lookup beyond the prompt: an index of token ids (a workspace's files, the completions a user
accepted) and the proposer that drafts from it.

Prompt lookup (``ngram.py``) only sees the prompt. Code repeats across a repository far more
than inside one file: call sequences, argument lists, error handling, test scaffolds. A
``TokenCorpus`` holds named segments of token ids (one per file, or per accepted completion);
``CorpusProposer`` finds the context's last tokens in it and proposes what followed, exactly as
prompt lookup does, with the match length and the matches' vote as evidence for the policy.

The index is a sorted array of every position's 3-gram key (three token ids packed into one
integer: exact, no hashing), so finding the context's last three tokens is a binary search;
each hit is then extended backwards to its full match length, and the longest matches win.
Segments change one at a time (an edited file, an accepted completion); the sorted array is
rebuilt from them by ``refresh``, which whoever changed the corpus calls off the request path,
at most once per ``min_refresh_s`` and never more than a fifth of the time
(``refresh_if_due``). A lookup reads the last built snapshot: it never waits for a rebuild.

Memory is bounded by ``max_tokens``: ``BYTES_PER_TOKEN`` a token (the segments, their joined
ids, the sorted keys and their positions), and about as much again while a rebuild runs; a
segment that would pass the bound is not added (``docs/workspace.md`` measures it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .ngram import adapted_span, vote
from .proposers import WORKSPACE, Kind, Proposals, Sampling
from .tree import Candidate

if TYPE_CHECKING:
    from .request import GenerationParams

KEY_BITS = 21  # bits per token id in a 3-gram key: vocabularies up to 2M ids
GRAM = 3  # tokens a key holds: the shortest match the corpus proposes from
SEPARATOR = -1  # between segments: never matches a token, ends every continuation
MAX_HITS = 256  # hits of one 3-gram extended per lookup (the most recent ones)
BYTES_PER_TOKEN = 20


@dataclass(frozen=True)
class _Snapshot:
    """An immutable sorted index over the segments as they were when it was built."""

    tokens: np.ndarray  # int32, segments joined with SEPARATOR
    keys: np.ndarray  # int64, sorted 3-gram keys
    starts: np.ndarray  # int32, where each key's 3-gram starts in ``tokens``

    @classmethod
    def empty(cls) -> _Snapshot:
        none = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0, dtype=np.int32), none, none.astype(np.int32))


def gram_keys(tokens: np.ndarray) -> np.ndarray:
    """The 3-gram key starting at every position that has three tokens after it (-1 where
    a separator is among them, so no key spans two segments)."""
    t = tokens.astype(np.int64)
    if len(t) < GRAM:
        return np.zeros(0, dtype=np.int64)
    keys = (t[:-2] << (2 * KEY_BITS)) | (t[1:-1] << KEY_BITS) | t[2:]
    broken = (t[:-2] < 0) | (t[1:-1] < 0) | (t[2:] < 0)
    keys[broken] = -1
    return keys


class TokenCorpus:
    """Named segments of token ids, searchable by their last tokens (see the module doc)."""

    def __init__(self, max_tokens: int = 2_000_000, min_refresh_s: float = 2.0) -> None:
        self.max_tokens = max_tokens
        self.min_refresh_s = min_refresh_s
        self.segments: dict[str, np.ndarray] = {}
        self.total = 0  # tokens in ``segments``
        self.snapshot = _Snapshot.empty()
        self.changed = False
        self.refreshed_at = 0.0
        self.refresh_s = 0.0  # how long the last rebuild took
        self._lock = threading.Lock()  # writers only; readers take ``snapshot`` as it is

    def put(self, name: str, tokens: list[int] | np.ndarray) -> bool:
        """Set segment ``name`` (replacing it); False when it would pass ``max_tokens``."""
        array = np.asarray(tokens, dtype=np.int32)
        with self._lock:
            old = self.segments.get(name)
            total = self.total - (len(old) if old is not None else 0) + len(array)
            if total > self.max_tokens:
                return False
            self.segments[name] = array
            self.total, self.changed = total, True
        return True

    def remove(self, name: str) -> None:
        with self._lock:
            old = self.segments.pop(name, None)
            if old is not None:
                self.total -= len(old)
                self.changed = True

    def refresh(self) -> None:
        """Rebuild the sorted index from the segments (O(n log n); off the request path)."""
        started = time.monotonic()
        with self._lock:
            parts = list(self.segments.values())
            self.changed = False
        joined: list[np.ndarray] = []
        for part in parts:
            joined += [part, np.array([SEPARATOR], dtype=np.int32)]
        tokens = np.concatenate(joined) if joined else np.zeros(0, dtype=np.int32)
        keys = gram_keys(tokens)
        starts = np.flatnonzero(keys >= 0).astype(np.int32)
        order = np.argsort(keys[starts], kind="stable")
        self.snapshot = _Snapshot(tokens, keys[starts][order], starts[order])
        self.refreshed_at = time.monotonic()
        self.refresh_s = self.refreshed_at - started

    def refresh_if_due(self) -> bool:
        """Rebuild when something changed and the last rebuild is long enough ago: at least
        ``min_refresh_s``, and four times as long as it took (rebuilds at most a fifth of the
        time). True when it rebuilt."""
        wait = max(self.min_refresh_s, 4 * self.refresh_s)
        if not self.changed or time.monotonic() - self.refreshed_at < wait:
            return False
        self.refresh()
        return True

    def memory_bytes(self) -> int:
        s = self.snapshot
        return s.tokens.nbytes + s.keys.nbytes + s.starts.nbytes + 4 * self.total

    def lookup(
        self, context: list[int], span: int, branches: int, max_match: int = 32
    ) -> list[Candidate]:
        """Up to ``branches`` distinct continuations of ``context``'s end found in the corpus,
        from its longest matches (at least ``GRAM`` tokens), most recent first, each at most
        ``span`` tokens; ``evidence`` is the match length, ``support`` the matches' vote."""
        s = self.snapshot
        if len(context) < GRAM or span <= 0 or not len(s.keys):
            return []
        tail = np.asarray(context[-max_match:], dtype=np.int64)
        key = int(gram_keys(tail[-GRAM:])[0])
        if key < 0:
            return []
        lo, hi = np.searchsorted(s.keys, key, "left"), np.searchsorted(s.keys, key, "right")
        if lo == hi:
            return []
        hits = s.starts[max(lo, hi - MAX_HITS) : hi].astype(np.int64)  # (stable: latest last)
        lengths = GRAM + _backward_match(s.tokens, hits, tail[:-GRAM])
        longest = int(lengths.max())
        best = hits[lengths == longest][::-1]  # most recent first
        after = best + GRAM
        following = s.tokens[np.minimum(after, len(s.tokens) - 1)]
        spans: list[tuple[int, ...]] = []  # distinct, none a beginning of another
        for start in after:
            continuation = s.tokens[start : start + span]
            cut = np.flatnonzero(continuation == SEPARATOR)
            tokens = tuple(int(t) for t in continuation[: cut[0] if len(cut) else span])
            if not tokens or any(other[: len(tokens)] == tokens for other in spans):
                continue
            # a span this one extends gives way to it, in its place (a longer guess is free)
            spans = [tokens if tokens[: len(other)] == other else other for other in spans]
            if tokens not in spans:
                if len(spans) >= branches:
                    break
                spans.append(tokens)
        following = following[following != SEPARATOR]
        return [
            Candidate(list(t), "workspace", evidence=longest, support=vote(following, t[0]))
            for t in dict.fromkeys(spans)
        ]


def _backward_match(tokens: np.ndarray, hits: np.ndarray, before: np.ndarray) -> np.ndarray:
    """For each hit, how many tokens before it equal the end of ``before``, counted back."""
    n = len(before)
    if n == 0:
        return np.zeros(len(hits), dtype=np.int64)
    back = hits[:, None] - np.arange(1, n + 1)[None, :]  # (hits, n): positions going back
    seen = np.where(back >= 0, tokens[np.maximum(back, 0)], SEPARATOR)
    equal = seen == before[::-1][None, :]
    return np.cumprod(equal, axis=1).sum(axis=1)


class CorpusProposer:
    """Lookup in token corpora (``proposers.Proposer``): the request's workspace and the
    user's accepted completions. Free like prompt lookup: no model runs."""

    name = WORKSPACE
    kind = Kind.LOOKUP

    def __init__(self, span: int = 10, max_span: int = 32, branches: int = 3) -> None:
        self.span = span
        self.max_span = max_span
        self.branches = branches
        self.corpora: tuple[TokenCorpus, ...] = ()

    def begin(self, params: GenerationParams) -> bool:
        """The corpora the coming request may draft from (none: nothing to propose)."""
        self.corpora = params.corpora
        return bool(self.corpora)

    def context(
        self, prompt: list[int], generated: list[int], params: GenerationParams
    ) -> list[int]:
        """The corpora hold code as written, so they are searched for the text before the
        cursor and what follows it, without the FIM prompt's suffix in between."""
        start, end = params.not_before_cursor or (len(prompt), len(prompt))
        return prompt[max(0, start - 64) : start] + prompt[end:] + generated

    def propose(
        self, context: list[int], budget: int, sampling: Sampling | None = None
    ) -> Proposals:
        """The longest-matching corpus's continuations (ties: the first corpus given)."""
        best: list[Candidate] = []
        for corpus in self.corpora:
            found = corpus.lookup(context, min(self.span, budget), self.branches)
            if found and (not best or found[0].evidence > best[0].evidence):
                best = found
        return Proposals(best)

    def lag(self, context: list[int]) -> int:
        return 0

    def observe(self, proposed: int, accepted: int) -> None:
        self.span = adapted_span(self.span, self.max_span, proposed, accepted)
