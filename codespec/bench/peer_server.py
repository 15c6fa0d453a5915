"""`codespec bench --peer llama.cpp --peer-server PATH`: llama.cpp's own speculation, as its
``llama-server`` runs it, on the same holes as the in-process peer (``peer.py``).

llama-cpp-python exposes prompt-lookup decoding only; llama.cpp's draft-model speculation lives
in its server (``--spec-type draft-simple``). So the bench starts the server binary the user
built from the same llama.cpp, on the pair's target GGUF (and draft GGUF), one at a time on a
loopback port, and streams each hole from its native ``/completion`` endpoint: the prompt as
our token ids, greedy, the generated ids returned with the text (``return_tokens``) so that our
stop rules see tokens, as they do in ``peer.generate``. A stop closes the stream, and the server
cancels the request. Times run from the request to each streamed token.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from ..models import ModelError
from ..remote.sse import SseParser
from ..stops import StopChecker, TextStopRule
from .corpus import Hole
from .peer import Complete
from .runner import cursor_of, mode_of

START_TIMEOUT_S = 180.0  # loading two GGUF files on a slow 2-core machine
RESPONSE_LIMIT = 8 << 20  # bytes of one streamed completion


def check_binary(path: str) -> Path:
    """The server binary, or a one-line error (raised before any model loads)."""
    binary = Path(path).expanduser()
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise ModelError(f"--peer-server: {path} is not an executable llama-server binary")
    return binary


def variants(draft: Path | None) -> dict[str, list[str]]:
    """The server configurations measured: plain, and its draft-model speculation with the
    pair's own draft GGUF at llama.cpp's default draft settings."""
    out: dict[str, list[str]] = {"plain": []}
    if draft is not None:
        out["draft_model"] = ["--spec-type", "draft-simple", "--model-draft", str(draft)]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(binary: Path, target: Path, extra: list[str]) -> Iterator[str]:
    """A llama-server on the target GGUF, one slot, on a loopback port; its URL."""
    port = _free_port()
    threads = str(os.cpu_count() or 1)
    command = [str(binary), "--model", str(target), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--ctx-size", "4096", "--parallel", "1", "--threads", threads, *extra]
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(server, url, log)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_ready(server: subprocess.Popen, url: str, log) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            last = log.read().decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ModelError(f"llama-server exited ({server.returncode}): {last[0][:200]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise ModelError(f"llama-server did not answer /health within {START_TIMEOUT_S:.0f} s")


def completer(client: httpx.Client, url: str, tokenizer, stop_ids: set[int]) -> Complete:
    """``complete(hole, prompt, max_tokens)``: greedy tokens from the server until a stop, as
    ``peer.generate`` returns them."""

    def ask(prompt: list[int], n_predict: int, stream: bool) -> dict:
        body = dict(prompt=prompt, n_predict=n_predict, temperature=0.0, top_k=1)
        return body | dict(cache_prompt=True, return_tokens=True, stream=stream)

    def complete(hole: Hole, prompt: list[int], max_tokens: int) -> dict:
        checker = StopChecker(cursor_of(hole), mode_of(hole))
        streamed: list[int] = []
        arrivals: list[tuple[int, float]] = []  # (tokens generated so far, seconds) per event
        text, drafted, accepted = "", None, None
        t0 = time.perf_counter()
        with client.stream("POST", f"{url}/completion", json=ask(prompt, max_tokens, True)) as r:
            if r.status_code != 200:
                raise ModelError(f"llama-server answered HTTP {r.status_code}")
            parser = SseParser(RESPONSE_LIMIT)
            for data in (d for chunk in r.iter_raw() for d in parser.feed(chunk)):
                event = json.loads(data)
                if event.get("stop"):  # the last event: the server's own counts, no text
                    timings = event.get("timings") or {}
                    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
                    break
                text += event.get("content") or ""
                streamed += event.get("tokens") or []
                generated = int(event.get("tokens_predicted", len(streamed)))
                arrivals.append((generated, time.perf_counter() - t0))
                if checker.cut(text) is not None or set(streamed) & stop_ids:
                    break  # closing the stream cancels the request
        end = time.perf_counter() - t0
        ids = streamed
        if arrivals and arrivals[-1][0] != len(streamed):
            # A token that ends inside a UTF-8 character is not streamed (its bytes come with
            # the next one): ask for the same greedy tokens whole, untimed.
            whole = client.post(f"{url}/completion", json=ask(prompt, arrivals[-1][0], False))
            ids = whole.json().get("tokens") or []
        ids = next((ids[:i] for i, t in enumerate(ids) if t in stop_ids), ids)[:max_tokens]
        keep = TextStopRule(tokenizer, checker)(ids)
        ids = ids[:keep] if keep is not None else ids
        # the completion ends when the event that brought its last token arrives
        total = next((s for n, s in arrivals if n >= max(1, len(ids))), end)
        return dict(
            tokens=ids,
            ttft_ms=1000 * (arrivals[0][1] if arrivals else end),
            total_ms=1000 * total,
            drafted=drafted,
            accepted=accepted,
        )

    return complete


@contextlib.contextmanager
def server_variant(
    binary: Path, target: Path, extra: list[str], tokenizer, stop_ids: set[int]
) -> Iterator[Complete]:
    with serving(binary, target, extra) as url, httpx.Client(timeout=120.0) as client:
        yield completer(client, url, tokenizer, stop_ids)
