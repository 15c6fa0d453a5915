"""Where the daemon listens and how a peer proves itself: the runtime folder and its socket,
the lock that makes one process the daemon of a socket, and the TCP token's 0600 file.

Kept apart from ``daemon.py`` so that the relay (``codespec lsp``, one per editor window) and
the stats command reach a daemon without importing the model's stack.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from pathlib import Path

import platformdirs

from ..files import FileError, read_text, write_private

AUTH = "codespec/auth"
# sent to a TCP peer whose token was wrong, just before the daemon closes the connection, so that
# a relay with a stale token says so and exits instead of reconnecting
AUTH_REFUSED = "codespec/authRefused"


def runtime_dir() -> Path:
    base = os.environ.get("CODESPEC_RUNTIME_DIR") or platformdirs.user_runtime_dir("codespec")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def default_socket() -> Path:
    return runtime_dir() / "codespec.sock"


def token_file() -> Path:
    return Path(platformdirs.user_config_dir("codespec")) / "daemon.token"


TOKEN_FORMAT = re.compile(r"[A-Za-z0-9_-]{32,256}")  # what secrets.token_urlsafe(32) writes


class TokenError(Exception):
    """The token file is damaged or unreadable: TCP is not served with it."""


def read_or_create_token(path: Path | None = None) -> str:
    """The TCP token from its 0600 file, created once, atomically: written to a temporary
    file, flushed to disk, then linked into place (if two processes race, one token wins and
    both read it). A token that is not well-formed (an empty file left by a full disk, say) is
    never used: ``TokenError`` says what to do."""
    path = path or token_file()
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            write_private(tmp, secrets.token_urlsafe(32))
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        except OSError as exc:
            raise TokenError(f"cannot create the token file {path}: {exc.strerror}") from None
        finally:
            tmp.unlink(missing_ok=True)
    try:
        os.chmod(path, 0o600)
        token = read_text(path, limit=4096).strip()
    except (OSError, FileError) as exc:
        raise TokenError(f"cannot read the token file: {exc}") from None
    if not TOKEN_FORMAT.fullmatch(token):
        raise TokenError(
            f"the token file {path} does not hold a well-formed token (empty or damaged); "
            "delete it and a new one is made"
        )
    return token


class DaemonRunning(Exception):
    """Another daemon already owns the socket."""


def claim_socket(socket_path: Path) -> int:
    """Take the lock that makes this process the one daemon of ``socket_path``: a lock file
    beside the socket, held (``flock``) for the process's whole life and released by the
    kernel when it ends, however it ends. Returns the lock's file descriptor."""
    lock_path = socket_path.with_name(socket_path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise DaemonRunning(
            f"another codespec daemon (pid {owner}) already serves {socket_path}"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
