"""Switching the daemon to another model (``codespec/chooseModel``): the daemon runs itself
again with the other model's flags, as the same process, on the same listening socket.

One daemon serves one model. A fresh process is the one state every part of the daemon already
starts from (the model, its tokenizer's corpora, the prompt anchors, the engine's measured
prices), so a switch is a restart that loses no connection attempt: the listening socket and the
socket's lock are handed to the new program (``--listening-fds``), so editors' relays that
reconnect meanwhile wait in the socket's backlog instead of starting a daemon of their own. The
sessions' connections end with the old program; each relay replays its session to the new one
(``relay.py``), and every session is told the model's state with ``codespec/status``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..models import ModelError
from ..models.listing import EMBEDDED, model_rows
from ..models.user_models import manifest_for_model

if TYPE_CHECKING:
    pass

LISTENING_FDS = "--listening-fds"  # (hidden) "SOCKET,LOCK": inherited from the daemon before
MODEL_FLAGS = ("--model", "--draft-model", "--pair")  # each takes one value


def checked_row(name: str, folders: tuple[str, ...]) -> dict:
    """The ``codespec models`` row of ``name`` (or a GGUF file's path), once it is known to make
    a pair that can load here; ``ValueError`` with one line otherwise."""
    rows = model_rows(folders)
    row = next((r for r in rows if r["name"] == name), None)
    if row is None and Path(name).expanduser().is_file():
        row = {"name": name, "store": "path"}
    if row is None:
        raise ValueError(f"no model named {name!r} here (codespec models lists them)")
    if "error" in row:
        raise ValueError(f"{name}: {row['error']}")
    if row["store"] != EMBEDDED:
        try:
            manifest_for_model(name, folders, True, None)
        except ModelError as exc:
            raise ValueError(str(exc)) from None
    return row


def model_flags(row: dict) -> list[str]:
    """The flags that run a row of ``models.listing.model_rows``: the embedded pair by its
    manifest path (a pair's bare name would defer to ``[model]`` in the settings file, which
    the user just chose against), any other model by its name."""
    from ..models import load_manifest

    if row.get("store") == EMBEDDED:
        return ["--pair", str(load_manifest(row["name"]).path)]
    return ["--model", str(row["name"])]


def restart_argv(argv: list[str], flags: list[str], fds: tuple[int, int]) -> list[str]:
    """``argv`` (the daemon's own arguments after ``codespec``) with its model flags replaced by
    ``flags`` and the inherited sockets named."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in (*MODEL_FLAGS, LISTENING_FDS):
            skip = "=" not in arg  # (the value is the next argument)
            continue
        out.append(arg)
    return [*out, *flags, LISTENING_FDS, f"{fds[0]},{fds[1]}"]


def running_name(argv: list[str]) -> str | None:
    """The model ``argv`` names with ``--model`` (None: a pair runs)."""
    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None


def parse_fds(value: str) -> tuple[int, int]:
    """``--listening-fds``'s value: the listening socket's and the lock's descriptors."""
    socket_fd, lock_fd = (int(part) for part in value.split(","))
    return socket_fd, lock_fd


def run_again(argv: list[str], socket_fd: int, lock_fd: int) -> NoReturn:
    """Replace this process with ``codespec ARGV``, the two descriptors kept open across."""
    os.set_inheritable(socket_fd, True)
    os.set_inheritable(lock_fd, True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "codespec", *argv])
