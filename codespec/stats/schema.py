"""The store's schema: its version, the migrations that bring an older store up to it, where
the store lives, and how a reader opens it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import platformdirs

from .record import ADDED_IN_2, ADDED_IN_3, ADDED_IN_4, ADDED_IN_5, REQUEST_COLUMNS

SCHEMA_VERSION = 5
BUSY_TIMEOUT_S = 5.0  # one attempt waits this long for another process's lock

# version -> statements that bring a store from the previous version to it
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE requests ("
        + ", ".join(
            f"{name} {kind}"
            for name, kind in REQUEST_COLUMNS.items()
            if name not in ADDED_IN_2 + ADDED_IN_3 + ADDED_IN_4 + ADDED_IN_5
        )
        + ")",
        "CREATE INDEX requests_t ON requests (t)",
        "CREATE INDEX requests_language_t ON requests (language, t)",
    ],
    2: [f"ALTER TABLE requests ADD COLUMN {name} {REQUEST_COLUMNS[name]}" for name in ADDED_IN_2],
    3: [f"ALTER TABLE requests ADD COLUMN {name} {REQUEST_COLUMNS[name]}" for name in ADDED_IN_3],
    4: [f"ALTER TABLE requests ADD COLUMN {name} {REQUEST_COLUMNS[name]}" for name in ADDED_IN_4],
    5: [f"ALTER TABLE requests ADD COLUMN {name} {REQUEST_COLUMNS[name]}" for name in ADDED_IN_5],
}


class StoreError(Exception):
    """The store cannot be read (for ``codespec stats``); the message is one line."""


def default_path() -> Path:
    base = os.environ.get("CODESPEC_STATE_DIR") or platformdirs.user_state_dir("codespec")
    return Path(base) / "stats.sqlite3"


def schema_version(conn: sqlite3.Connection) -> int:
    """The store's schema version (0: a new file). A value that is not a whole number from 0
    up (text, a fraction, a negative, an empty string) is a damaged store: the writer moves it
    aside as it does an unreadable file (``sqlite3.DatabaseError`` saying "malformed")."""
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return 0 if row is None else parse_version(row[0])


def parse_version(value: object) -> int:
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise sqlite3.DatabaseError(f"malformed schema_version {text[:20]!r} in the store")
    return int(text)


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
        found = parse_version(version[0]) if version else None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the stats store {path}: {exc}") from None
    if found is None or found > SCHEMA_VERSION:
        raise StoreError(f"{path} is not a stats store this codespec can read")
    if found < SCHEMA_VERSION:  # written by an older codespec: bring it up first
        conn.close()
        try:
            writer = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
            migrate(writer)
            writer.close()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot update the stats store {path}: {exc}") from None
        return open_readonly(path)
    return conn
