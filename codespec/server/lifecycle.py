"""What plain pygls lacks, applied to each raw message before pygls dispatches it.

``admit`` decides, for one well-formed JSON-RPC message, whether it is dispatched, answered
with an error right here, or dropped; it also normalizes the few things pygls gets wrong:

* lifecycle: -32002 before ``initialize``, -32600 for a second ``initialize`` or after
  ``shutdown``; notifications before ``initialize`` are dropped (nothing to apply them to);
* a message with an ``id`` is a request and gets exactly one reply: one naming a method that
  LSP defines as a notification gets -32600 instead of being dispatched and left unanswered;
* ``initialize`` params must be an object (else -32602; a failed ``initialize`` does not count:
  the session counts as initialized only once pygls has accepted one);
* position encodings: utf-8 when offered, else utf-16, whatever else the client lists
  (``lsp/PROTOCOL.md``);
* ``didOpen`` without a ``languageId`` gets an empty one: the language then comes from the
  file's extension; a request without ``params`` gets ``null`` ones (JSON-RPC allows it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lsprotocol import types

from .framing import error_reply

NOTIFICATIONS = frozenset(
    method
    for method, kinds in types.METHOD_TO_TYPES.items()
    if kinds[0].__name__.endswith("Notification")
) | {"codespec/cursor"}


@dataclass
class Lifecycle:
    """Where one session is in the LSP lifecycle."""

    initialized: bool = False  # an initialize request succeeded
    shutdown: bool = False


DISPATCH, DROP = "dispatch", "drop"


def admit(state: Lifecycle, message: dict) -> str | dict:
    """DISPATCH, DROP, or the error reply to send instead of dispatching ``message``."""
    method, msg_id = message.get("method"), message.get("id")
    if method is None:  # a response from the client (to one of our requests)
        return DISPATCH
    if msg_id is None:
        if not state.initialized and method != types.EXIT:
            return DROP
        return DISPATCH
    if method in NOTIFICATIONS:
        return error_reply(msg_id, -32600, f"Invalid Request: {method} is a notification")
    if method == types.INITIALIZE:
        if state.initialized:
            return error_reply(msg_id, -32600, "initialize was already called")
        problem = _initialize_problem(message.get("params"))
        if problem:
            return error_reply(msg_id, -32602, f"Invalid params: {problem}")
        _choose_position_encoding(message["params"])
        return DISPATCH
    if not state.initialized:
        return error_reply(msg_id, -32002, "the server is not initialized yet")
    if state.shutdown:
        return error_reply(msg_id, -32600, "the server is shutting down")
    if method == types.SHUTDOWN:
        state.shutdown = True
    return DISPATCH


LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # (a pair in the JSON is one character here)


def plain_strings(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD. JSON lets a client
    send half of a surrogate pair; nothing downstream can encode it (the tokenizer, the stats,
    the log). The replacement has the same length in UTF-16 units and in UTF-8 bytes (as its
    surrogate counts them), so no position moves."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value) if LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {key: plain_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_strings(item) for item in value]
    return value


def normalize(message: dict) -> dict:
    """Fill in what a lenient client leaves out and pygls would choke on; no lone surrogates."""
    message = plain_strings(message)
    if "method" in message:
        message.setdefault("params", None)  # JSON-RPC lets a request leave params out
    if message.get("method") == types.TEXT_DOCUMENT_DID_OPEN:
        params = message.get("params")
        document = params.get("textDocument") if isinstance(params, dict) else None
        if isinstance(document, dict) and "languageId" not in document:
            document["languageId"] = ""
    return message


def _initialize_problem(params) -> str | None:
    """What is wrong with ``initialize`` params that lsprotocol's lenient converter would let
    through (it turns a list where an object belongs into an empty object)."""
    if not isinstance(params, dict):
        return "initialize takes an object"
    capabilities = params.get("capabilities")
    if not isinstance(capabilities, dict):
        return "capabilities must be an object"
    for key, value in capabilities.items():
        if key != "experimental" and not isinstance(value, dict):
            return f"capabilities.{key} must be an object"
    pid = params.get("processId")
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool)):
        return "processId must be an integer or null"
    return None


def _choose_position_encoding(params: dict) -> None:
    """Leave pygls exactly one encoding to pick: utf-8 when offered, else utf-16."""
    capabilities = params.get("capabilities")
    general = capabilities.get("general") if isinstance(capabilities, dict) else None
    if not isinstance(general, dict):
        return
    offered = general.get("positionEncodings")
    if isinstance(offered, list):
        general["positionEncodings"] = ["utf-8"] if "utf-8" in offered else ["utf-16"]
