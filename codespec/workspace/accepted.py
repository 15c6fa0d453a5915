"""The completions the user accepted, as token ids: a corpus the workspace drafter searches,
kept across daemon restarts in the user's state directory, and forgotten on request.

What the user accepted yesterday is the best predictor of what they type today. Each accepted
completion is kept as the last ``LEAD_TOKENS`` tokens before its cursor (so that a lookup of the
same situation finds it) followed by the accepted text's tokens: token ids only, no text and no
path. The file (``accepted-tokens.bin``, 0600) is a magic line then little-endian int32 ids,
each completion ended by a -1; a torn last record (a crash mid-write) is dropped when the file
is read. Past ``max_tokens`` the oldest half is dropped and the file is
rewritten (to a temporary file, then renamed). ``codespec forget`` deletes the file; a running
daemon notices within ``CHECK_S`` and forgets its copy too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..engine.corpus import SEPARATOR, TokenCorpus

log = logging.getLogger("codespec.workspace")
MAGIC = b"codespec accepted tokens 1\n"
FILE_NAME = "accepted-tokens.bin"
LEAD_TOKENS = 16
MAX_TOKENS = 200_000
CHECK_S = 1.0  # how often a request's look at the file (``corpus``) may stat it


def read_records(path: Path) -> list[np.ndarray]:
    """The completions in ``path``; [] for a missing file. ValueError: not such a file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not a codespec accepted-tokens file")
    body = data[len(MAGIC) :]
    ids = np.frombuffer(body[: len(body) - len(body) % 4], dtype="<i4")
    ends = np.flatnonzero(ids == SEPARATOR)
    if not len(ends):
        return []
    # every record ends with a separator: what follows the last one is a torn record
    records = np.split(ids[: ends[-1]], ends[:-1])
    records = [r[r != SEPARATOR] for r in records]
    return [r.astype(np.int32) for r in records if len(r) and (r >= 0).all()]


def encode(records: list[np.ndarray]) -> bytes:
    """``records`` as the file holds them after its magic line: each ended by a separator."""
    return b"".join(np.append(r, SEPARATOR).astype("<i4").tobytes() for r in records)


class AcceptedCompletions:
    """The accepted completions' corpus and file (``path`` None: kept in memory only)."""

    def __init__(
        self,
        path: Path | None,
        tokenizer: Callable[[], Callable[[str], list[int]] | None] = lambda: None,
        max_tokens: int = MAX_TOKENS,
    ) -> None:
        self.path = path
        self.tokenizer = tokenizer  # how to tokenize, once the model is loaded (None: never)
        self.max_tokens = max_tokens
        self._corpus = TokenCorpus(max_tokens=max_tokens, min_refresh_s=0.0)
        self._records: list[np.ndarray] = []
        self._added = 0  # records ever added: their names in the corpus
        self._rewrite = False  # the file must be rewritten whole (records were dropped)
        self._lock = threading.Lock()
        self._file_id: tuple[int, int] | None = None  # (device, inode) of the file we read
        self._checked_at = 0.0
        if path is not None:
            try:
                for record in read_records(path):
                    self._keep(record)
                self._file_id = _identity(path)
                # a torn tail (or dropped records) is rewritten away before the next append,
                # which would otherwise be read as part of the torn record
                kept = len(MAGIC) + len(encode(self._records))
                self._rewrite = self._rewrite or (path.exists() and path.stat().st_size != kept)
            except (OSError, ValueError) as exc:  # someone else's file: never written to
                log.warning("accepted completions kept in memory only: %s", exc)
                self.path = None
            self._corpus.refresh()

    def corpus(self) -> TokenCorpus:
        """The corpus to draft from; emptied when the file was deleted (``codespec forget``)."""
        now = time.monotonic()
        if self.path is not None and self._records and now - self._checked_at >= CHECK_S:
            self._checked_at = now
            if _identity(self.path) != self._file_id:
                self._forget_memory()
        return self._corpus

    def learn(self, before: str, accepted: str) -> None:
        """The user accepted ``accepted`` after ``before`` (the document before the cursor):
        keep its tokens. Errors (a full disk) are logged; the memory copy is kept anyway."""
        tokenize = self.tokenizer()
        if tokenize is None or not accepted:
            return
        lead = tokenize(before[-4 * LEAD_TOKENS * 8 :])[-LEAD_TOKENS:] if before else []
        record = np.asarray(lead + tokenize(accepted), dtype=np.int32)
        with self._lock:
            if self.path is not None and _identity(self.path) != self._file_id:
                self._forget_memory()
            self._keep(record)
            self._corpus.refresh()
            if self.path is not None:
                try:
                    self._write(record)
                except OSError as exc:
                    log.warning("accepted completions not saved: %s", exc)

    def _keep(self, record: np.ndarray) -> None:
        """Add ``record``; past the bound the older half goes (and the file is rewritten)."""
        record = record[: self.max_tokens]
        if self._corpus.total + len(record) > self.max_tokens:
            self._records = self._records[len(self._records) // 2 :]
            while self._records and sum(map(len, self._records)) + len(record) > self.max_tokens:
                self._records.pop(0)
            self._corpus = TokenCorpus(max_tokens=self.max_tokens, min_refresh_s=0.0)
            for kept in self._records:
                self._corpus.put(str(self._added), kept)
                self._added += 1
            self._rewrite = True
        self._corpus.put(str(self._added), record)
        self._added += 1
        self._records.append(record)

    def _write(self, record: np.ndarray) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        here = _identity(self.path)
        if self._rewrite or here is None or here != self._file_id:
            temporary = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(MAGIC + encode(self._records))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            self._rewrite = False
        else:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o600)
            with os.fdopen(fd, "ab") as out:
                out.write(encode([record]))
        self._file_id = _identity(self.path)

    def _forget_memory(self) -> None:
        log.info("accepted completions forgotten (their file was removed)")
        self._records = []
        self._corpus = TokenCorpus(max_tokens=self.max_tokens, min_refresh_s=0.0)
        self._file_id = _identity(self.path) if self.path is not None else None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def forget(path: Path) -> bool:
    """Delete the accepted completions at ``path``; True when there were some.
    ValueError: the file there is not ours (it is left alone)."""
    try:
        with open(path, "rb") as file:
            if file.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path} is not a codespec accepted-tokens file; left alone")
        path.unlink()
    except FileNotFoundError:
        return False
    return True
