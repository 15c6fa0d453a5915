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

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..engine.corpus import SEPARATOR, TokenCorpus
from ..files import FileError, create_new, open_owned

log = logging.getLogger("codespec.workspace")
MAGIC = b"codespec accepted tokens 1\n"
FILE_NAME = "accepted-tokens.bin"
LEAD_TOKENS = 16
MAX_TOKENS = 200_000
CHECK_S = 1.0  # how often a request's look at the file (``corpus``) may stat it


def read_records(path: Path, max_tokens: int = MAX_TOKENS) -> list[np.ndarray]:
    """The completions in ``path``, the newest ``max_tokens`` of them at most (a larger file is
    read from its end, never whole); [] for a missing file. ValueError: not such a file (a
    link, a FIFO, another user's or another program's file: left alone)."""
    try:
        fd = open_owned(path)
    except FileNotFoundError:
        return []
    except FileError as exc:
        raise ValueError(str(exc)) from None
    with os.fdopen(fd, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a codespec accepted-tokens file")
        size = os.fstat(f.fileno()).st_size - len(MAGIC)
        keep = 4 * (2 * max_tokens + 1)  # the records' ids and separators, with room to spare
        if size > keep:  # (a record cut at the start is dropped below, with the torn ones)
            f.seek(len(MAGIC) + size - keep - size % 4)
        body = f.read(keep + 4)
    ids = np.frombuffer(body[: len(body) - len(body) % 4], dtype="<i4")
    if size > keep:  # the first record read may be a tail: start after its separator
        first = np.flatnonzero(ids == SEPARATOR)
        ids = ids[first[0] + 1 :] if len(first) else ids[:0]
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
                for record in read_records(path, max_tokens):
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
                except (OSError, FileError) as exc:
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
            # a new file beside it (never through a link planted at the name), then renamed
            temporary = self.path.with_name(self.path.name + ".tmp")
            fd = create_new(temporary, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(MAGIC + encode(self._records))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
            self._rewrite = False
        else:
            self._append(encode([record]))
        self._file_id = _identity(self.path)

    def _append(self, data: bytes) -> None:
        """Append whole records, or nothing: a short write (a full disk, a file-size limit) is
        cut back off, and the next write rewrites the file from memory, so a torn record
        never shifts the ones after it."""
        assert self.path is not None
        fd = open_owned(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
            except OSError:
                written = -1
            if written != len(data):
                self._rewrite = True
                os.ftruncate(fd, size)
                raise OSError(errno.ENOSPC, "the accepted completion did not fit on the disk")
        finally:
            os.close(fd)

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
        fd = open_owned(path)
    except FileNotFoundError:
        return False
    except FileError as exc:
        raise ValueError(str(exc)) from None
    with os.fdopen(fd, "rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a codespec accepted-tokens file; left alone")
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
