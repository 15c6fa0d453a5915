"""Reading a file a user or a client names: regular files only, size-capped, UTF-8.

``/dev/zero``, a FIFO, a directory or a huge file never gets read without limit or blocks the
reader: the file is opened without blocking, checked with ``fstat`` (the thing opened, not a name
that could change in between) and read up to the cap. Every failure is one ``FileError`` whose
message names the file and says what is wrong.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

MAX_DOCUMENT_BYTES = 4 << 20  # a source file to complete in: far above real source files
MAX_SMALL_FILE_BYTES = 1 << 20  # manifests, settings, tokens


class FileError(Exception):
    """A file that cannot be read as asked; the message is one line for the user."""


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileError(f"no such file: {name}") from None
    except IsADirectoryError:
        raise FileError(f"{name} is a directory, not a file") from None
    except OSError as exc:
        raise FileError(f"cannot open {name}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = None
    if stat.S_ISDIR(info.st_mode):
        problem = f"{name} is a directory, not a file"
    elif not stat.S_ISREG(info.st_mode):
        problem = f"{name} is not a regular file (a device, pipe or socket)"
    elif info.st_size > limit:
        problem = f"{name} is too large ({info.st_size} bytes; at most {limit})"
    if problem is not None:
        os.close(fd)
        raise FileError(problem)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew while we read
        raise FileError(f"{name} is too large (more than {limit} bytes)")
    return data


def read_text(path: str | os.PathLike, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(f"{path} is not UTF-8 text (byte {exc.start})") from None


NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LOG_FILE = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def create_new(path: Path, mode: int) -> int:
    """A file descriptor of a new file at ``path`` (a temporary name of ours), never through a
    symlink planted there: what is at the name already (a crashed run's leftover, a link) is
    removed first, itself, never what a link points to."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, NEW_FILE, mode)


def open_log(path: Path) -> int:
    """A log file's descriptor for appending (0600), never followed through a symlink."""
    return os.open(path, LOG_FILE, 0o600)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) atomically: a temporary file in the same folder,
    flushed to disk, then renamed over ``path``; a crash or a full disk leaves the old file
    or none, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = create_new(tmp, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# How the daemon opens the files it owns (state, config, cache and runtime folders): never
# through a symlink planted at the name, never blocking on a FIFO or a device put there.
OWNED = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_owned(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A descriptor of a file the daemon owns: a regular file of this user, not reached through
    a link. ``FileError`` (one line) for anything else: a link, a FIFO, a device, a directory,
    another user's file, which are left as they are. FileNotFoundError passes through."""
    name = str(path)
    try:
        fd = os.open(name, flags | OWNED, mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileError(f"{name} is a symbolic link: left alone") from None
        raise FileError(f"cannot open {name}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"{name} is not a regular file (a directory, device, pipe or socket): left alone"
    elif info.st_uid != os.getuid():
        problem = f"{name} belongs to another user: left alone"
    if problem is not None:
        os.close(fd)
        raise FileError(problem)
    os.set_blocking(fd, True)
    return fd


def read_owned(path: str | os.PathLike, limit: int = MAX_SMALL_FILE_BYTES) -> bytes:
    """The bytes of a file the daemon owns (``open_owned``), of at most ``limit`` bytes."""
    fd = open_owned(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileError(f"{path} is too large (more than {limit} bytes)")
    return data


def read_owned_text(path: str | os.PathLike, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """``read_owned`` as UTF-8 text."""
    try:
        return read_owned(path, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def parse_json(text: str | bytes) -> Any:
    """JSON read from a file or a peer. Anything that is not JSON raises ``ValueError``, input
    nested too deeply for the parser included (``json`` itself raises ``RecursionError``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def parse_toml(text: str) -> dict[str, Any]:
    """TOML read from a file: ``tomllib.TOMLDecodeError`` (a ``ValueError``) for anything that
    is not TOML, input nested too deeply for the parser included."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("nested too deeply to read") from None


def write_atomically(path: Path, text: str) -> None:
    """Best effort, for caches of measurements: one that cannot be written only means
    measuring again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        with os.fdopen(create_new(tmp, 0o644), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


def read_keyed(path: Path, key: str) -> object:
    """The value ``write_keyed`` kept under ``key`` in the JSON file ``path`` (None: no file, a
    damaged one, or no such key)."""
    try:
        saved = parse_json(read_owned_text(path))
    except (OSError, FileError, ValueError):
        return None
    return saved.get(key) if isinstance(saved, dict) else None


def write_keyed(path: Path, key: str, value: object) -> None:
    """Keep ``value`` under ``key`` in the JSON file ``path``, beside the other keys there (a
    file that cannot be written is left alone: what it keeps is measured again)."""
    try:
        saved = parse_json(read_owned_text(path))
        saved = saved if isinstance(saved, dict) else {}
    except (OSError, FileError, ValueError):
        saved = {}
    saved[key] = value
    write_atomically(path, json.dumps(saved, indent=1))
