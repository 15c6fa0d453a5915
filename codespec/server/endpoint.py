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
import stat
import warnings
from pathlib import Path

import platformdirs

from ..files import FileError, open_owned, write_private

AUTH = "codespec/auth"
# sent to a TCP peer whose token was wrong, just before the daemon closes the connection, so that
# a relay with a stale token says so and exits instead of reconnecting
AUTH_REFUSED = "codespec/authRefused"


SUN_PATH_MAX = 107  # bytes of a unix socket's path (sun_path holds 108 with its NUL)


class EndpointError(Exception):
    """The socket's folder or path cannot be used safely; the message is one line."""


def runtime_dir() -> Path:
    """The daemon's folder (``CODESPEC_RUNTIME_DIR``, else the user runtime dir): made 0700 if
    missing, and refused unless it is a directory of this user's that nobody else can open."""
    base = os.environ.get("CODESPEC_RUNTIME_DIR") or _user_runtime_dir()
    path = Path(base)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(path)
    except OSError as exc:
        raise EndpointError(f"cannot use the runtime folder {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise EndpointError(f"refusing the runtime folder {path}: it is not a directory")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise EndpointError(
            f"refusing the runtime folder {path}: it must be this user's and private "
            f"(owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}; 700 is expected)"
        )
    return path


def _user_runtime_dir() -> str:
    """platformdirs' user runtime dir, quietly: without ``XDG_RUNTIME_DIR`` (a container, a
    root shell) it falls back to a folder it checks itself (``/run/user/<uid>``, else one in
    the temporary folder), and this module checks whatever it gives; its warning about the
    fallback (with a line of its source) would otherwise come before every command's output."""
    quiet = getattr(platformdirs, "RuntimeDirWarning", UserWarning)  # (platformdirs >= 4.4)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", quiet)
            return platformdirs.user_runtime_dir("codespec")
    except OSError as exc:
        raise EndpointError(f"no usable runtime folder: {exc.strerror or exc}") from None


def default_socket() -> Path:
    return runtime_dir() / "codespec.sock"


def check_socket_path(path: Path) -> None:
    """A socket path the daemon can listen on, or ``EndpointError`` saying why not: short
    enough for a unix socket, not a directory or another kind of file, in a folder nobody else
    can write to (or one that is sticky, as /tmp: others cannot replace what is ours there)."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise EndpointError(
            f"the socket path is {len(os.fsencode(path))} bytes, over the {SUN_PATH_MAX} a unix "
            "socket allows: choose a shorter --socket"
        )
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISSOCK(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a socket"
        raise EndpointError(f"cannot listen on {path}: it is {kind}")
    try:
        folder = os.stat(path.parent)
    except OSError as exc:
        raise EndpointError(f"cannot use the socket folder {path.parent}: {exc.strerror}") from None
    shared = folder.st_mode & 0o022 and not folder.st_mode & stat.S_ISVTX
    if shared or folder.st_uid not in (os.getuid(), 0):
        raise EndpointError(
            f"refusing the socket folder {path.parent}: others can write to it "
            f"(owner uid {folder.st_uid}, mode {stat.S_IMODE(folder.st_mode):o})"
        )


def check_socket_owner(path: Path) -> None:
    """Connect only to a socket this user's daemon made: anyone else's could read the code."""
    try:
        owner = os.lstat(path).st_uid
    except FileNotFoundError:
        return  # no daemon yet: connecting fails, and one of ours is started
    if owner != os.getuid():
        raise EndpointError(f"refusing {path}: the socket belongs to uid {owner}, not this user")


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
        fd = open_owned(path)  # this user's regular file, not a link: its mode is ours to set
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(os.dup(fd), "rb") as f:
                token = f.read(4096).decode("utf-8", "replace").strip()
        finally:
            os.close(fd)
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
    try:  # never through a planted symlink, and only into a regular file of this user's
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise EndpointError(f"cannot open the lock file {lock_path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise EndpointError(f"refusing the lock file {lock_path}: not a regular file of this user")
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
