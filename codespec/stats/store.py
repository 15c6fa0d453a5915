"""The acceptance store: one SQLite file (WAL) in the user state dir, written by one thread.

Recording never waits on the disk: ``Store.put`` only appends to a queue; the writer thread
commits whatever arrived about once a second (``COMMIT_EVERY_S``), so a crash loses at most
that second. Readers (``codespec stats``, another daemon) open their own connection: in WAL
mode they never block the writer, nor it them.

Faults never stop completions, and nothing put is lost while the daemon runs:

* a file that is not a readable database is moved aside and a fresh one started (one warning);
* a store locked by another process is retried at each commit, the rows kept queued, for up to
  ``LOCKED_FOR_S``; only a failure that lasts (the directory is read-only, the disk is full,
  the lock is never released) moves the rows to an in-memory database (one warning, and
  ``status`` says so), and the file is tried again every ``RETRY_FILE_S``: once it can be
  written, every row held in memory is written to it and ``status`` is "file" again;
* a store file deleted or replaced under the daemon is noticed at the next commit, and its
  rows are carried into a new file at the path;
* the path is checked before anything touches it: only a regular file (or none: it is created
  0600, never through a symlink) is used.

On ``close`` what is queued is committed and the WAL checkpointed into the main file, so a
copy of ``stats.sqlite3`` alone holds every row. Rows older than ``retention_days`` are
deleted when the store opens and every hour.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .record import REQUEST_COLUMNS, VERDICT_COLUMNS
from .schema import BUSY_TIMEOUT_S, StoreError, default_path, migrate

log = logging.getLogger("codespec.stats")
COMMIT_EVERY_S = 1.0
PRUNE_EVERY_S = 3600.0
DEFAULT_RETENTION_DAYS = 90
LOCKED_FOR_S = 60.0  # a lock held longer than this counts as a lasting failure
MAX_QUEUED_ITEMS = 100_000  # rows and verdicts kept for a locked store before memory takes them
RETRY_FILE_S = 60.0  # while in memory: how often the file is tried again


class Store:
    """The daemon's store: ``put_request`` / ``put_verdict`` from any thread, never blocking;
    ``read`` runs a query on the writer's connection (under its lock, so it sees every row
    committed so far); ``flush`` waits until everything put so far is committed."""

    def __init__(
        self,
        path: Path | None = None,
        retention_days: float = DEFAULT_RETENTION_DAYS,
        max_pages: int | None = None,  # testing aid: a small "disk" that fills up
    ) -> None:
        self.path = path or default_path()
        self.retention_days = retention_days
        self.max_pages = max_pages
        self.queue: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.status = "file"  # file | memory: <why>
        self.warnings: list[str] = []
        self.inode: int | None = None  # the file's, as opened: a replaced file is noticed
        self.locked_since: float | None = None  # when commits started failing on a lock
        self.next_file_retry = 0.0
        self.conn = self._open()
        self.last_prune = 0.0
        self._prune()
        self.thread = threading.Thread(target=self._run, name="codespec-stats", daemon=True)
        self.thread.start()

    # -- any thread ---------------------------------------------------------------------------

    def put_request(self, row: dict) -> None:
        self.queue.put(("request", row))

    def put_verdict(self, request_id: str, fields: dict) -> None:
        self.queue.put(("verdict", request_id, fields))

    def flush(self, timeout: float = 10.0) -> bool:
        done = threading.Event()
        self.queue.put(("flush", done))
        return done.wait(timeout)

    def read(self, query: Callable[[sqlite3.Connection], Any]) -> Any:
        with self.lock:
            return query(self.conn)

    def close(self) -> None:
        """Commit what is queued, checkpoint, close the file and stop the writer (the daemon
        is stopping)."""
        self.queue.put(("stop",))
        self.thread.join(timeout=10)

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            return self._connect_file()
        except StoreError as exc:  # a newer codespec's store, not a regular file: leave it be
            return self._to_memory(f"cannot use {self.path}: {exc}")
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _is_corrupt(exc):
                return self._to_memory(f"cannot write {self.path}: {exc}")
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self._warn(f"the stats store {self.path} was unreadable ({exc}); moved to {aside}")
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    Path(str(self.path) + suffix).unlink(missing_ok=True)
                return self._connect_file()
            except (OSError, sqlite3.DatabaseError, StoreError) as again:
                return self._to_memory(f"cannot start a fresh {self.path}: {again}")
        except OSError as exc:
            return self._to_memory(f"cannot write {self.path}: {exc.strerror or exc}")

    def _prepare_file(self) -> None:
        """Check what is at the path before anything touches it: nothing (then an empty 0600
        file is made, never through a symlink) or a regular file (made private if it is this
        user's). A device, a FIFO, a directory is refused, and left as it is."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(self.path, flags, 0o600))
            return
        if not stat.S_ISREG(info.st_mode):
            raise StoreError("it is not a regular file")
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            os.chmod(self.path, 0o600)

    def _connect_file(self) -> sqlite3.Connection:
        self._prepare_file()
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        try:
            self.inode = os.stat(self.path).st_ino
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at each checkpoint
            if self.max_pages is not None:
                conn.execute(f"PRAGMA max_page_count={int(self.max_pages)}")
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _to_memory(self, why: str) -> sqlite3.Connection:
        self._warn(f"{why}; acceptance stats are kept in memory until the file can be written")
        self.status = f"memory: {why}"
        self.next_file_retry = time.monotonic() + RETRY_FILE_S
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        migrate(conn)
        return conn

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    # -- the writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        pending: list[tuple] = []  # rows and verdicts not committed yet
        waiters: list[threading.Event] = []  # flush() callers
        next_commit = time.monotonic() + COMMIT_EVERY_S
        while True:
            item: tuple
            try:
                item = self.queue.get(timeout=max(next_commit - time.monotonic(), 0.0))
            except queue.Empty:
                item = ("tick",)
            kind = item[0]
            if kind in ("request", "verdict"):
                pending.append(item)
            elif kind == "flush":
                waiters.append(item[1])
            if kind in ("request", "verdict") and time.monotonic() < next_commit:
                continue  # keep batching
            if self.status != "file" and time.monotonic() >= self.next_file_retry:
                self._back_to_file()
            if pending and self._commit(pending):
                pending = []
            if time.monotonic() - self.last_prune > PRUNE_EVERY_S:
                self._prune()
            if not pending:  # (a flush waits while a lock keeps its rows queued)
                for waiter in waiters:
                    waiter.set()
                waiters = []
            if kind == "stop":
                if pending:  # still locked at the end: the rows go to memory, then out
                    self._commit(pending, give_up=True)
                self._close()
                for waiter in waiters:
                    waiter.set()
                return
            next_commit = time.monotonic() + COMMIT_EVERY_S

    def _commit(self, items: list[tuple], give_up: bool = False) -> bool:
        """Write ``items`` in one transaction. False when they stay queued for the next try
        (the file is locked by another process, for now); a lasting failure moves everything
        to memory, where they are written."""
        with self.lock:
            if self.status == "file":
                self._follow_the_path()
            try:
                _apply(self.conn, items)
                self.locked_since = None
                return True
            except sqlite3.Error as exc:  # a lock, a full disk, a file removed underneath...
                try:
                    self.conn.rollback()
                except sqlite3.Error:
                    pass
                if self.status != "file":
                    log.debug("stats rows lost: %s", exc)
                    return True
                if _is_locked(exc) and not give_up and not self._locked_too_long(items):
                    return False
                old = self.conn
                self.conn = self._to_memory(f"cannot write {self.path}: {exc}")
                _copy_rows(old, self.conn)
                old.close()
                self.locked_since = None
            try:
                _apply(self.conn, items)
            except sqlite3.Error as exc:
                log.debug("stats rows lost: %s", exc)
            return True

    def _locked_too_long(self, items: list[tuple]) -> bool:
        now = time.monotonic()
        if self.locked_since is None:
            self.locked_since = now
            log.info("the stats store %s is locked by another process; retrying", self.path)
        return now - self.locked_since > LOCKED_FOR_S or len(items) > MAX_QUEUED_ITEMS

    def _follow_the_path(self) -> None:
        """A store file deleted or replaced under the daemon: start a new file at the path and
        carry this one's rows into it (the open connection still reads the old file)."""
        try:
            same = os.stat(self.path).st_ino == self.inode
        except OSError:
            same = False
        if same:
            return
        old = self.conn
        try:
            self.conn = self._connect_file()
        except (OSError, sqlite3.Error, StoreError) as exc:
            self.conn = self._to_memory(f"cannot write {self.path}: {exc}")
        else:
            self._warn(f"the stats store {self.path} was deleted or replaced; rows carried over")
        _copy_rows(old, self.conn)
        old.close()

    def _back_to_file(self) -> None:
        """While the rows are in memory: try the file again; once it takes them, write every
        row held in memory into it and go on there."""
        self.next_file_retry = time.monotonic() + RETRY_FILE_S
        with self.lock:
            try:
                conn = self._connect_file()
            except (OSError, sqlite3.Error, StoreError) as exc:
                log.debug("the stats store is still not writable: %s", exc)
                return
            if not _copy_rows(self.conn, conn, replace=True):
                conn.close()
                return
            self.conn.close()
            self.conn, self.status = conn, "file"
        self._warn(f"the stats store {self.path} can be written again; rows held in memory saved")

    def _close(self) -> None:
        """Fold the WAL into the main file and close it: a copy of the file alone is whole."""
        with self.lock:
            try:
                if self.status == "file":
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self.conn.close()
            except sqlite3.Error as exc:
                log.debug("closing the stats store: %s", exc)

    def _prune(self) -> None:
        self.last_prune = time.monotonic()
        cutoff = time.time() - self.retention_days * 86400
        with self.lock:
            try:
                with self.conn:
                    self.conn.execute("DELETE FROM requests WHERE t < ?", (cutoff,))
            except sqlite3.Error as exc:
                log.debug("pruning the stats store failed: %s", exc)


def _apply(conn: sqlite3.Connection, items: list[tuple]) -> None:
    """Write one batch in one transaction."""
    with conn:
        for item in items:
            if item[0] == "request":
                row = {k: v for k, v in item[1].items() if k in REQUEST_COLUMNS}
                names = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                conn.execute(
                    f"INSERT OR IGNORE INTO requests ({names}) VALUES ({marks})",
                    tuple(row.values()),
                )
            elif item[0] == "verdict":
                _, request_id, fields = item
                fields = {k: v for k, v in fields.items() if k in VERDICT_COLUMNS}
                if fields:
                    assignments = ", ".join(f"{k} = ?" for k in fields)
                    conn.execute(
                        f"UPDATE requests SET {assignments} WHERE id = ?",
                        (*fields.values(), request_id),
                    )


def _copy_rows(
    source: sqlite3.Connection, target: sqlite3.Connection, replace: bool = False
) -> bool:
    """Carry every row of ``source`` into ``target``, so reports stay whole (``replace``: the
    source's copy of a row wins, with the verdicts it got since). Whether it worked."""
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    names = ", ".join(REQUEST_COLUMNS)
    marks = ", ".join("?" for _ in REQUEST_COLUMNS)
    try:
        rows = source.execute(f"SELECT {names} FROM requests").fetchall()
        with target:
            target.executemany(f"{verb} INTO requests ({names}) VALUES ({marks})", rows)
        return True
    except sqlite3.Error as exc:
        log.debug("could not copy the stats rows: %s", exc)
        return False


def _is_locked(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _is_corrupt(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "integrity" in text
