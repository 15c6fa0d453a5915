"""What a hostile or careless server sends back never leaks the token, whole or in part, nor
raw control characters, into the log or the status every editor is told; a malformed event is
refused at once, not waited out. A real HTTP stream through the fault proxy (its "raw" mode
sends a reply the test writes), the remote engine reading it as it reads any server."""

from __future__ import annotations

import json
import logging
import time

import pytest
from remote_helpers import needs_server

from codespec.engine import GenerationParams
from codespec.remote.config import from_table
from codespec.remote.engine import RemoteEngine
from codespec.remote.secrets import SECRET_PART, scrub

pytestmark = needs_server
TOKEN = "sk-" + "Zq7RbT9wLm2XvKp4Jd8HsNc6Yf3GtA1u"  # random, as real ones are


@pytest.fixture
def engine_with_token(tiny_manifest, tmp_path, proxy):
    from transformers import AutoTokenizer

    from codespec.models import load_manifest

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    tokenizer = AutoTokenizer.from_pretrained(load_manifest(str(tiny_manifest)).target.path)
    table = {"urls": [proxy.url], "token_file": str(token_file), "first_token_timeout_s": 3.0}
    engine = RemoteEngine(from_table(table), tokenizer)
    heard: list[str] = []
    engine.health.listeners.append(lambda state, message: heard.append(message))
    yield engine, tokenizer, heard
    engine.close()


def leaked(text: str) -> list[str]:
    """The runs of ``SECRET_PART`` characters of the token found in ``text``."""
    parts = {TOKEN[i : i + SECRET_PART] for i in range(len(TOKEN) - SECRET_PART + 1)}
    return sorted(part for part in parts if part in text)


def ask(engine, tokenizer) -> float:
    t0 = time.perf_counter()
    generation = engine.generate(tokenizer.encode("def f():\n"), GenerationParams(8))
    list(generation)
    assert generation.tokens == []
    return time.perf_counter() - t0


def reply(status: str, body: bytes, content_type: bytes = b"text/plain") -> bytes:
    return (
        b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: " + content_type
        + b"\r\ncontent-length: " + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n" + body
    )  # fmt: skip


@pytest.mark.parametrize("status", ["401 Unauthorized", "503 Service Unavailable"])
@pytest.mark.parametrize("pad", [0, 150, 180, 188, 195, 199, 2030, 2046])
def test_no_part_of_the_token_reaches_the_log_or_the_status(
    engine_with_token, proxy, caplog, status, pad
):
    """The token echoed after ``pad`` bytes: wherever a cut falls (the shown 200 characters,
    the 2 KB read of an error body), none of its characters in a row are shown."""
    engine, tokenizer, heard = engine_with_token
    proxy.mode = "raw"
    proxy.raw = reply(status, b"x" * pad + b"Bearer " + TOKEN.encode() + b" was refused")
    caplog.set_level(logging.DEBUG)
    ask(engine, tokenizer)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert status.split()[0] in logged  # (the reply was read and logged: the control)
    assert leaked(logged) == [] and leaked("\n".join(heard)) == []


def test_an_sse_error_event_does_not_leak_the_token_either(engine_with_token, proxy, caplog):
    engine, tokenizer, heard = engine_with_token
    event = {"error": {"message": "y" * 190 + " token " + TOKEN}}
    proxy.mode = "raw"
    proxy.raw = reply(
        "200 OK", b"data: " + json.dumps(event).encode() + b"\n\n", b"text/event-stream"
    )
    caplog.set_level(logging.DEBUG)
    ask(engine, tokenizer)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "reported an error" in logged
    assert leaked(logged) == [] and leaked("\n".join(heard)) == []


def test_control_characters_from_the_server_are_not_passed_on(engine_with_token, proxy, caplog):
    engine, tokenizer, heard = engine_with_token
    proxy.mode = "raw"
    proxy.raw = reply("503 Service Unavailable", b"\x1b[2J\x1b[31mred\x07 busy\rOK")
    caplog.set_level(logging.DEBUG)
    ask(engine, tokenizer)
    shown = "\n".join([*(r.getMessage() for r in caplog.records), *heard])
    assert "red" in shown and "busy" in shown
    assert not any(c in shown for c in "\x1b\x07\r")


def test_a_deeply_nested_event_is_refused_at_once(engine_with_token, proxy, caplog):
    """An event nested 1,000 deep: refused as unreadable within a moment, not left to the
    first-token timeout."""
    engine, tokenizer, heard = engine_with_token
    proxy.mode = "raw"
    body = b"data: " + b"[" * 1000 + b"]" * 1000 + b"\n\n"
    proxy.raw = reply("200 OK", body, b"text/event-stream")
    caplog.set_level(logging.DEBUG)
    assert ask(engine, tokenizer) < 2.0  # (the first-token timeout is 3 s)
    assert "nested too deeply" in "\n".join(r.getMessage() for r in caplog.records)


def test_scrub_masks_every_run_and_keeps_other_text():
    assert scrub("a " + TOKEN + " b", TOKEN) == "a <token> b"
    assert scrub("head " + TOKEN[:12], TOKEN) == "head <token>"  # a cut left its beginning
    assert scrub(TOKEN[-7:] + " tail", TOKEN) == "<token> tail"  # ... or its end
    assert scrub("nothing of it here", TOKEN) == "nothing of it here"
    assert scrub("text", None) == "text"
