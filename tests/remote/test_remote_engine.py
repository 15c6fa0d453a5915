"""The remote engine against a real llama-cpp-python server, directly and through a fault
proxy: streaming, stop rules and cancel closing the stream, every fault answered within its
deadline with one log line per incident, failover, recovery, the token kept out of logs."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest
from remote_helpers import needs_server

from codespec.engine import GenerationParams, StopSignal
from codespec.models import load_manifest
from codespec.remote.config import from_table
from codespec.remote.engine import RemoteEngine
from codespec.remote.health import READY, UNREACHABLE

pytestmark = needs_server
PROMPT_TEXT = "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>"


@pytest.fixture(scope="module")
def tokenizer(tiny_manifest):
    from transformers import AutoTokenizer

    manifest = load_manifest(str(tiny_manifest))
    return AutoTokenizer.from_pretrained(manifest.target.path)


@pytest.fixture
def make_engine(tokenizer):
    engines: list[RemoteEngine] = []

    def make(*urls: str, **table) -> RemoteEngine:
        table = {
            "urls": list(urls),
            "first_token_timeout_s": 2.0,
            "stall_timeout_s": 1.0,
            "total_timeout_s": 6.0,
            **table,
        }
        engine = RemoteEngine(from_table(table), tokenizer)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def run(engine: RemoteEngine, tokenizer, max_tokens=12, **kw):
    """Generate for the test prompt; (generation, seconds)."""
    t0 = time.perf_counter()
    generation = engine.generate(tokenizer.encode(PROMPT_TEXT), GenerationParams(max_tokens), **kw)
    pieces = list(generation)
    generation.pieces = pieces
    return generation, time.perf_counter() - t0


def test_streams_the_servers_own_greedy_text(make_engine, tokenizer, llama_server):
    """What streams is what the server generates for the same prompt without streaming, in
    more than one piece, ended by its token limit."""
    engine = make_engine(llama_server)
    generation, _ = run(engine, tokenizer, max_tokens=12)
    reply = httpx.post(
        f"{llama_server}/v1/completions",
        json={"prompt": PROMPT_TEXT, "max_tokens": 12, "temperature": 0.0},
        timeout=30,
    ).json()
    assert tokenizer.decode(generation.tokens) == reply["choices"][0]["text"]
    assert len(generation.pieces) > 1
    assert generation.stats.stop_reason == "max_tokens"
    assert generation.stats.ttft_s > 0


def test_special_token_text_in_the_prompt_stays_text_on_the_server(make_engine, tokenizer):
    """A file that spells ``<|endoftext|>`` or ``<|fim_middle|>`` is text locally; the prompt
    sent keeps the prompt's own special tokens and breaks up the spelled ones, so the server's
    tokenizer (parsing special tokens) gets them back as the same kind of thing."""
    engine = make_engine("http://127.0.0.1:9")
    content = 'END = "<|endoftext|>"  # <|fim_middle|> and <|fim_middle|x\n'
    plain = tokenizer(content, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    special = tokenizer.convert_tokens_to_ids(
        ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]
    )
    prompt = [special[0], *plain, special[1], special[2]]
    text = engine.prompt_text(prompt)
    assert text.startswith("<|fim_prefix|>") and text.endswith("<|fim_suffix|><|fim_middle|>")
    assert text.count("<|fim_middle|>") == 1 and "<|endoftext|>" not in text
    server_ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # specials parsed
    assert [i for i in server_ids if i in engine.special_ids] == [*special]
    assert text.replace("\u200b", "") == tokenizer.decode(prompt)


def test_special_token_text_in_output_stays_text(make_engine, tokenizer):
    engine = make_engine("http://127.0.0.1:9")
    ids = engine._plain_ids("a<|endoftext|>b")
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") not in ids
    assert tokenizer.decode(ids) == "a<|endoftext|>b"


def test_a_stop_rule_closes_the_stream(make_engine, tokenizer, proxy):
    """A rule that stops at 3 tokens ends a 80-token request at once, and the proxy sees the
    client hang up while the server was still generating."""
    engine = make_engine(proxy.url)
    full, full_seconds = run(engine, tokenizer, max_tokens=80)
    generation, seconds = run(
        engine, tokenizer, max_tokens=80, stop_rule=lambda t: 3 if len(t) >= 3 else None
    )
    assert generation.stats.stop_reason == "stop_rule"
    assert generation.tokens == full.tokens[:3]
    assert len(full.tokens) >= 70 and seconds < full_seconds / 2
    deadline = time.monotonic() + 5
    while proxy.closed_early < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.closed_early >= 1


def test_cancel_closes_the_stream_at_once(make_engine, tokenizer, proxy):
    proxy.mode, proxy.trickle_s = "trickle", 0.01  # a slow stream: cancel lands mid-way
    engine = make_engine(proxy.url, stall_timeout_s=5.0, total_timeout_s=30.0)
    stop = StopSignal()
    threading.Timer(0.5, stop.cancel).start()
    generation, seconds = run(engine, tokenizer, max_tokens=200, stop=stop)
    assert generation.stats.stop_reason == "cancelled"
    assert seconds < 0.5 + 0.3
    deadline = time.monotonic() + 5
    while proxy.closed_early < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.closed_early >= 1


FAULTS = {
    # mode: (what the log line says, the stop reason)
    "drop": ("unreachable", "unreachable"),
    "stall": ("sent no text in time", "unreachable"),
    "503": ("HTTP 503", "unreachable"),
    "429": ("HTTP 429", "unreachable"),
    "cut": ("", "remote_error"),
    "stall_mid": ("stalled", "remote_error"),
    "garbage": ("not JSON", "remote_error"),
    "huge": ("larger than", "remote_error"),
}


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_each_fault_is_answered_in_time_with_one_log_line(
    mode, make_engine, tokenizer, proxy, caplog
):
    """Two requests into the same fault: both end within the first-token deadline plus a
    margin, with nothing shown, and the log has one line for the incident, not one per
    request."""
    proxy.mode = mode
    engine = make_engine(proxy.url, max_response_bytes=256 << 10)
    caplog.set_level(logging.INFO, logger="codespec.remote")
    for _ in range(2):
        generation, seconds = run(engine, tokenizer, max_tokens=200)
        assert seconds < 2.0 + 1.0, f"{mode}: {seconds:.1f} s"
        assert generation.tokens == []
        assert generation.stats.stop_reason in ("unreachable", "remote_error")
        time.sleep(0.6)  # past the first backoff: the second request tries the server again
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "codespec.remote" and r.levelno >= logging.WARNING
    ]
    assert len(lines) == 1, lines  # (a probe that finds it back may add "reachable again")
    assert FAULTS[mode][0] in lines[0]


def test_a_trickling_server_is_cut_at_the_total_deadline(make_engine, tokenizer, proxy):
    """A server that never stalls long but never finishes: answered at the total deadline with
    what streamed (whole tokens), not held by it."""
    proxy.mode, proxy.trickle_s = "trickle", 0.002  # an event (~230 bytes) every ~0.5 s
    engine = make_engine(proxy.url, total_timeout_s=2.0, stall_timeout_s=1.0)
    generation, seconds = run(engine, tokenizer, max_tokens=60)
    assert seconds < 2.0 + 0.3
    assert generation.stats.stop_reason == "max_time"
    assert generation.tokens


def test_429_backs_off_for_retry_after(make_engine, tokenizer, proxy):
    proxy.mode = "429"
    engine = make_engine(proxy.url)
    run(engine, tokenizer)
    assert engine.health.candidates() == []  # Retry-After: 1 s, the server asked for it
    before = proxy.connections
    generation, seconds = run(engine, tokenizer)
    assert proxy.connections == before and seconds < 0.1  # not even tried
    assert generation.stats.stop_reason == "unreachable"
    time.sleep(1.1)
    proxy.mode = "pass"
    generation, _ = run(engine, tokenizer)
    assert generation.tokens


def test_fails_over_to_the_next_url_and_remembers(make_engine, tokenizer, llama_server, caplog):
    caplog.set_level(logging.INFO, logger="codespec.remote")
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens there
    engine = make_engine(dead, llama_server)
    first, _ = run(engine, tokenizer)
    assert first.tokens
    second, seconds = run(engine, tokenizer)  # the dead one is in backoff: straight to the live
    assert second.tokens == first.tokens
    assert engine.health.down_urls() == [dead]
    lines = [r.getMessage() for r in caplog.records if r.name == "codespec.remote"]
    assert len(lines) == 1 and dead in lines[0]


def test_status_goes_unreachable_and_recovers_without_a_request(make_engine, tokenizer, proxy):
    engine = make_engine(proxy.url)
    heard: list[str] = []
    engine.health.listeners.append(lambda state, message: heard.append(state))
    proxy.mode = "drop"
    run(engine, tokenizer)
    assert heard == [UNREACHABLE]
    proxy.mode = "pass"
    deadline = time.monotonic() + 10
    while heard[-1] != READY and time.monotonic() < deadline:
        time.sleep(0.1)
    assert heard == [UNREACHABLE, READY]  # the probe found it back


def keep_asking(engine, tokenizer, seconds: float, each_s: float) -> list[float]:
    """Requests back to back for ``seconds``, each given up after ``each_s`` (as the worker
    ends a request whose turn is over while other editors wait): each one's duration."""
    durations: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stop = StopSignal()
        timer = threading.Timer(each_s, stop.cancel)
        timer.start()
        _, took = run(engine, tokenizer, stop=stop)
        timer.cancel()
        durations.append(took)
    return durations


def test_a_server_that_never_answers_is_found_gone_though_no_request_waits_long(
    make_engine, tokenizer, proxy
):
    """Accepts, never answers, and every request is given up before its own 10 s first-token
    timeout: the server's silence still counts across them, a probe finds nobody there, and
    from then on requests are answered at once and the status says unreachable."""
    proxy.mode = "stall"
    engine = make_engine(proxy.url, first_token_timeout_s=10.0, connect_timeout_s=1.0)
    heard: list[str] = []
    engine.health.listeners.append(lambda state, message: heard.append(state))
    durations = keep_asking(engine, tokenizer, seconds=7.0, each_s=1.0)
    assert heard == [UNREACHABLE], durations
    assert "no answer to a probe" in engine.health.message()
    assert min(durations) < 0.1  # once it was found gone, requests no longer wait


def test_a_busy_server_is_not_taken_for_a_gone_one(make_engine, tokenizer, proxy, caplog):
    """Silent on completions but answering a probe: busy, said once in the log; it is never
    marked down, and its first text clears it."""
    caplog.set_level(logging.INFO, logger="codespec.remote")
    proxy.mode = "busy"
    engine = make_engine(proxy.url, first_token_timeout_s=10.0, connect_timeout_s=1.0)
    keep_asking(engine, tokenizer, seconds=8.0, each_s=1.0)
    assert engine.health.down_urls() == [] and engine.health.state == READY
    lines = [r.getMessage() for r in caplog.records if r.name == "codespec.remote"]
    assert len(lines) == 1 and "busy" in lines[0], lines
    proxy.mode = "pass"
    generation, _ = run(engine, tokenizer)
    assert generation.tokens
    assert not any(s.busy for s in engine.health.states)


def test_a_whole_json_reply_is_read_as_the_completion(make_engine, tokenizer, proxy):
    """A server that ignores ``stream`` and answers 200 with the completion object."""
    body = (
        b'{"choices": [{"text": " a + b", "finish_reason": "stop"}], "usage": {"prompt_tokens": 9}}'
    )
    proxy.mode = "raw"
    proxy.raw = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )
    engine = make_engine(proxy.url)
    generation, _ = run(engine, tokenizer)
    assert tokenizer.decode(generation.tokens) == " a + b"
    assert generation.stats.stop_reason == "eos"
    assert engine.health.state == READY


def test_the_token_is_sent_and_never_logged(make_engine, tokenizer, proxy, tmp_path, caplog):
    """The server gets the token as a bearer; a server echoing it in an error reply does not
    put it into the log."""
    token_file = tmp_path / "token"
    token_file.write_text("sk-secret-1234567890\n")
    token_file.chmod(0o600)
    proxy.mode = "401"
    engine = make_engine(proxy.url, token_file=str(token_file))
    caplog.set_level(logging.DEBUG)
    generation, _ = run(engine, tokenizer)
    assert generation.tokens == []
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "401" in text and "bad credentials" in text  # the reply was read and logged...
    assert "sk-secret" not in text  # ...without the token it echoed
    assert "sk-secret" not in repr(engine.config)
    # a server that refuses the token refuses every request: the editors are told so
    assert engine.health.state == UNREACHABLE
    assert "refuses codespec's token" in engine.health.message()
    assert "sk-secret" not in engine.health.message()


@pytest.mark.real_model
def test_the_embedded_gguf_served_completes_through_codespec(tokenizer):
    """The path a user takes: llama.cpp (llama-cpp-python's server) on the embedded GGUF, and
    codespec's own completion over it, stop rules on: a single line that ends the statement."""
    from remote_helpers import start_llama_server

    from codespec.completion import CompletionOptions, complete
    from codespec.languages import language_for
    from codespec.models import gguf_file
    from codespec.runtime import load_remote_pair
    from codespec.stops import Cursor

    default = load_manifest()
    server, url = start_llama_server(gguf_file(default.target, default.install_hint))
    pair = load_remote_pair(from_table({"url": url, "first_token_timeout_s": 60}))
    try:
        prefix = "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return "
        cursor = Cursor(prefix, "\n\n\nprint(fibonacci(10))\n", language_for("python"))
        partials: list[str] = []
        result = complete(
            pair, cursor, CompletionOptions(max_tokens=32), path="fib.py", on_text=partials.append
        )
        assert "fibonacci(n - 1)" in result.text.replace("n-1", "n - 1"), result.text
        assert "\n" not in result.text and partials
        assert result.stats.stop_reason in ("eos", "stop_rule")
    finally:
        pair.engine.close()
        server.terminate()
        server.wait(timeout=30)


def test_tls_is_verified_unless_told_and_a_ca_bundle_is_honoured(
    make_engine, tokenizer, llama_server, tmp_path
):
    """An HTTPS server with a certificate no public CA signed: refused by default, served
    with the team's CA file named, and with verify = false."""
    import shutil
    import ssl
    import subprocess

    from remote_helpers import FaultProxy

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    proxy = FaultProxy(int(llama_server.rsplit(":", 1)[1]), tls=tls)
    try:
        assert proxy.url.startswith("https://")
        refused, _ = run(make_engine(proxy.url), tokenizer)
        assert refused.tokens == [] and refused.stats.stop_reason == "unreachable"
        trusted, _ = run(make_engine(proxy.url, ca_bundle=str(cert)), tokenizer)
        assert trusted.tokens
        unchecked, _ = run(make_engine(proxy.url, verify=False), tokenizer)
        assert unchecked.tokens == trusted.tokens
    finally:
        proxy.close()


@pytest.mark.real_model
def test_a_team_server_on_a_cpu_answers_the_first_request_and_keeps_its_cache(tokenizer):
    """The README's team-server paragraph with nothing else set, on a CPU: llama-cpp-python's
    server on the embedded GGUF and a document of a few thousand tokens. The first prompt is
    sized for a server not yet measured, so text streams within the 10 s first-token timeout
    (a prompt sized for a GPU took longer than that to prefill, and the server was taken for
    gone); the rate is then measured, and once the windows are sized by it a keystroke's
    prompt shares its start with the one before, so the server's cache makes it cheaper."""
    from remote_helpers import large_document, start_llama_server

    from codespec.completion import complete
    from codespec.languages import language_for
    from codespec.models import gguf_file
    from codespec.remote.engine import COLD_PREFILL_RATE
    from codespec.runtime import load_remote_pair
    from codespec.settings import Settings, completion_options
    from codespec.stops import Cursor

    default = load_manifest()
    server, url = start_llama_server(
        gguf_file(default.target, default.install_hint), "--n_threads", "2"
    )
    pair = load_remote_pair(from_table({"url": url}))  # the default timeouts
    try:
        engine = pair.engine
        assert isinstance(engine, RemoteEngine)
        assert engine.prefill_rate == COLD_PREFILL_RATE
        prefix, suffix = large_document()
        options = completion_options(Settings())
        results = []
        for typed in ("", "r", "re", "res"):
            cursor = Cursor(prefix + typed, suffix, language_for("python"))
            results.append(complete(pair, cursor, options, path="handlers.py"))
        first = results[0]
        assert first.stats.stop_reason not in ("unreachable", "remote_error"), first.stats
        assert first.text and first.stats.ttft_s < 10.0
        assert engine.health.state == READY and engine.health.down_urls() == []
        assert engine.measured_rate is not None
        for result in results:
            assert result.stats.stop_reason not in ("unreachable", "remote_error"), result.stats
        # A server faster than the cold guess lifts the windows after its first answer (a
        # prompt that starts elsewhere, computed afresh); from then on a keystroke's prompt
        # starts where the one before began, and the server's cache makes it cheaper than the
        # first prompt that started there.
        starts = [r.anchor.window_at if r.anchor else None for r in results]
        kept = [i for i in range(1, len(results)) if starts[i] == starts[i - 1]]
        assert kept, starts
        fresh = {start: results[starts.index(start)].stats.ttft_s for start in starts}
        assert all(results[i].stats.ttft_s < fresh[starts[i]] for i in kept), starts + [
            round(r.stats.ttft_s, 2) for r in results
        ]
    finally:
        pair.engine.close()
        server.terminate()
        server.wait(timeout=30)
