"""The acceptance store: one SQLite file (WAL) in the user state dir, written by one thread.

Recording never waits on the disk: ``Store.put`` only appends to a queue; the writer thread
commits whatever arrived about once a second (``COMMIT_EVERY_S``), so a crash loses at most
that second. Readers (``codespec stats``, another daemon) open their own connection: in WAL
mode they never block the writer, nor it them.

Faults never stop completions: a file that is not a readable database is moved aside and a
fresh one started (one warning); when nothing can be written (the directory is read-only, the
disk is full) rows go to an in-memory database instead (one warning) and ``status`` says so.
Rows older than ``retention_days`` are deleted when the store opens and every hour.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs

from .record import REQUEST_COLUMNS, VERDICT_COLUMNS

log = logging.getLogger("codespec.stats")
SCHEMA_VERSION = 1
COMMIT_EVERY_S = 1.0
PRUNE_EVERY_S = 3600.0
DEFAULT_RETENTION_DAYS = 90

# version -> statements that bring a store from the previous version to it
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE requests ("
        + ", ".join(f"{name} {kind}" for name, kind in REQUEST_COLUMNS.items())
        + ")",
        "CREATE INDEX requests_t ON requests (t)",
        "CREATE INDEX requests_language_t ON requests (language, t)",
    ],
}


class StoreError(Exception):
    """The store cannot be read (for ``codespec stats``); the message is one line."""


def default_path() -> Path:
    base = os.environ.get("CODESPEC_STATE_DIR") or platformdirs.user_state_dir("codespec")
    return Path(base) / "stats.sqlite3"


def schema_version(conn: sqlite3.Connection) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to ``SCHEMA_VERSION``, one version at a time, each in a transaction."""
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(f"written by a newer codespec (schema {version} > {SCHEMA_VERSION})")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with conn:
            for statement in MIGRATIONS[target]:
                conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(target),),
            )


def open_readonly(path: Path) -> sqlite3.Connection:
    """A reader's connection (``codespec stats``); ``StoreError`` when there is nothing usable."""
    if not path.is_file():
        raise StoreError(f"no stats store at {path}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the stats store {path}: {exc}") from None
    if not version or int(version[0]) > SCHEMA_VERSION:
        raise StoreError(f"{path} is not a stats store this codespec can read")
    return conn


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
        """Commit what is queued and stop the writer (the daemon is stopping)."""
        self.queue.put(("stop",))
        self.thread.join(timeout=10)

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            return self._connect_file()
        except StoreError as exc:  # a newer codespec's store: leave it be
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

    def _connect_file(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=5)
        try:
            os.chmod(self.path, 0o600)
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
        self._warn(f"{why}; acceptance stats are kept in memory until the daemon stops")
        self.status = f"memory: {why}"
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
            if pending:
                self._commit(pending)
                pending = []
            if time.monotonic() - self.last_prune > PRUNE_EVERY_S:
                self._prune()
            for waiter in waiters:
                waiter.set()
            waiters = []
            if kind == "stop":
                return
            next_commit = time.monotonic() + COMMIT_EVERY_S

    def _commit(self, items: list[tuple]) -> None:
        with self.lock:
            try:
                _apply(self.conn, items)
                return
            except sqlite3.Error as exc:  # a full disk, a file removed underneath...
                try:
                    self.conn.rollback()
                except sqlite3.Error:
                    pass
                if self.status != "file":
                    log.debug("stats rows lost: %s", exc)
                    return
                old = self.conn
                self.conn = self._to_memory(f"cannot write {self.path}: {exc}")
                _copy_rows(old, self.conn)
                old.close()
            try:
                _apply(self.conn, items)
            except sqlite3.Error as exc:
                log.debug("stats rows lost: %s", exc)

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


def _copy_rows(source: sqlite3.Connection, target: sqlite3.Connection) -> None:
    """Carry the rows the file still held into the in-memory store, so reports stay whole."""
    try:
        rows = source.execute(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests").fetchall()
        marks = ", ".join("?" for _ in REQUEST_COLUMNS)
        with target:
            target.executemany(
                f"INSERT OR IGNORE INTO requests ({', '.join(REQUEST_COLUMNS)}) VALUES ({marks})",
                rows,
            )
    except sqlite3.Error as exc:
        log.debug("could not copy the stats rows: %s", exc)


def _is_corrupt(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "integrity" in text
