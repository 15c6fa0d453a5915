"""Where a remote engine is and how to talk to it: the ``[engine]`` table.

It comes from the settings file (``~/.config/codespec/config.toml``), a pair manifest, or
``codespec serve --engine URL``. Every value is checked here, once, and a bad one is a one-line
``EngineConfigError``: a daemon pointed at a server it cannot use says so at start.

The API token is read from a file only (never a flag: flags show in ``ps``), and the file must
be this user's and readable by its owner alone, as ssh insists for its keys.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..files import FileError, read_text

PROTOCOLS = ("openai",)  # POST /v1/completions with stream: vLLM, SGLang, llama.cpp's server


class EngineConfigError(Exception):
    """The ``[engine]`` settings cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class RemoteConfig:
    """A remote engine: base URLs tried in order (failover), and the limits of one request."""

    urls: tuple[str, ...]
    model: str = ""  # the server's model name ("" lets the server pick its only model)
    token: str = field(default="", repr=False)  # never printed, never logged
    token_file: str = ""
    verify: bool = True  # TLS certificates are checked unless a user turns it off
    ca_bundle: str = ""  # a CA file to check them against (a team's own CA)
    connect_timeout_s: float = 3.0
    first_token_timeout_s: float = 10.0  # connected -> first streamed text
    stall_timeout_s: float = 5.0  # the longest gap between two streamed events
    total_timeout_s: float = 30.0  # the whole request
    max_response_bytes: int = 1 << 20  # a stream longer than this is cut (a hostile server)
    protocol: str = "openai"
    # llama.cpp's server takes its speculation per request: sent when codespec's policy says
    # speculate=False (plain decoding asked for) as ``speculative.n_max = 0``.
    send_speculation: bool = True

    def describe(self) -> str:
        """The engine for status lines and logs: hosts and model, never the token."""
        hosts = ", ".join(self.urls)
        return f"remote {self.model or 'model'} at {hosts}"


def check_url(url: str, where: str) -> str:
    """A base URL as the client will use it (no trailing slash); refuse what cannot work."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineConfigError(f"{where}: {url!r} is not an http:// or https:// URL")
    if parts.username or parts.password:
        raise EngineConfigError(f"{where}: put the token in token_file, not in the URL")
    if parts.query or parts.fragment:
        raise EngineConfigError(f"{where}: {url!r}: a base URL has no query or fragment")
    return url.strip().rstrip("/")


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_warnings(config: RemoteConfig) -> list[str]:
    """One line per base URL that would send prompts (code) unencrypted off this machine."""
    return [
        f"warning: {url} is plain http to another host: prompts and the token travel unencrypted"
        for url in config.urls
        if urlsplit(url).scheme == "http" and not is_loopback(url)
    ]


def read_token(path: str, what: str = "token_file") -> str:
    """The token in a file only its owner can read (mode 0600 or stricter); ``what`` names the
    setting or flag in messages."""
    name = os.path.expanduser(path)
    try:
        info = os.stat(name)
    except OSError as exc:
        raise EngineConfigError(f"{what} {name}: {exc.strerror or exc}") from None
    if stat.S_ISREG(info.st_mode) and info.st_uid != os.getuid():
        raise EngineConfigError(f"{what} {name} belongs to another user; use a file of yours")
    if stat.S_ISREG(info.st_mode) and info.st_mode & 0o077:
        raise EngineConfigError(
            f"{what} {name} is readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"chmod 600 it"
        )
    try:
        token = read_text(name, 64 << 10).strip()
    except FileError as exc:
        raise EngineConfigError(f"{what}: {exc}") from None
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise EngineConfigError(f"{what} {name}: the token must be one line of printable text")
    return token


def _number(table: dict, key: str, default: float, low: float, high: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise EngineConfigError(f"{where}: {key} must be a number from {low:g} to {high:g}")
    return float(value)


KNOWN_KEYS = {
    "kind",
    "url",
    "urls",
    "model",
    "token_file",
    "verify",
    "ca_bundle",
    "connect_timeout_s",
    "first_token_timeout_s",
    "stall_timeout_s",
    "total_timeout_s",
    "max_response_bytes",
    "protocol",
    "send_speculation",
}


def from_table(table: Any, where: str = "[engine]") -> RemoteConfig | None:
    """The remote engine an ``[engine]`` table names, or None for ``kind = "local"``."""
    if not isinstance(table, dict):
        raise EngineConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise EngineConfigError(f"{where}: unknown keys {unknown}")
    kind = table.get("kind", "remote" if ("url" in table or "urls" in table) else "local")
    if kind == "local":
        return None
    if kind != "remote":
        raise EngineConfigError(f'{where}: kind must be "local" or "remote"')
    urls = table.get("urls", [table["url"]] if "url" in table else [])
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        raise EngineConfigError(f"{where}: urls must be a list of base URLs (at least one)")
    for key in ("model", "token_file", "ca_bundle", "protocol"):
        if not isinstance(table.get(key, ""), str):
            raise EngineConfigError(f"{where}: {key} must be a string")
    for key in ("verify", "send_speculation"):
        if not isinstance(table.get(key, True), bool):
            raise EngineConfigError(f"{where}: {key} must be true or false")
    protocol = table.get("protocol", "openai")
    if protocol not in PROTOCOLS:
        raise EngineConfigError(f"{where}: protocol must be one of {', '.join(PROTOCOLS)}")
    ca_bundle = table.get("ca_bundle", "")
    if ca_bundle and not Path(ca_bundle).expanduser().is_file():
        raise EngineConfigError(f"{where}: ca_bundle {ca_bundle} is not a file")
    token_file = table.get("token_file", "")
    return RemoteConfig(
        urls=tuple(check_url(u, where) for u in urls),
        model=table.get("model", ""),
        token=read_token(token_file) if token_file else "",
        token_file=token_file,
        verify=table.get("verify", True),
        ca_bundle=ca_bundle,
        connect_timeout_s=_number(table, "connect_timeout_s", 3.0, 0.1, 60, where),
        first_token_timeout_s=_number(table, "first_token_timeout_s", 10.0, 0.1, 600, where),
        stall_timeout_s=_number(table, "stall_timeout_s", 5.0, 0.1, 600, where),
        total_timeout_s=_number(table, "total_timeout_s", 30.0, 0.5, 3600, where),
        max_response_bytes=int(
            _number(table, "max_response_bytes", 1 << 20, 1 << 10, 1 << 30, where)
        ),
        protocol=protocol,
        send_speculation=table.get("send_speculation", True),
    )
