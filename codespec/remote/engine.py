"""The remote engine: a generator (``generator.py``) that decodes on a serving engine.

The prompt is built here with the local tokenizer, as for the local engine, and sent as text
(the servers parse its special tokens: vLLM, SGLang, llama.cpp's server and llama-cpp-python's
all do for a plain prompt). Text that only spells a special token (in a file, a file's name,
the document) is plain text locally; a server would read it as the token, so it is sent with
a zero-width space after its first character (``prompt_text``).

The streamed text comes back as token ids of the local tokenizer, with special-token text
split as plain text (model output is never a control token here), so codespec's stop rules
judge it as they judge local output; when a rule fires, the HTTP stream is closed at once (the
tokens received past the stop are counted in ``dropped_past_stop``).

A request tries the URLs the health says are worth trying, in order, until one streams text;
the first-token, stall and total timeouts are the worker thread's own (it waits on a queue),
so no server can hold a request past them. A fault once text has streamed answers empty (the
text so far may be a cut line). Whether a server is gone is found out on the loop thread,
whatever becomes of the requests (``health.py``): a request that yields its turn before its
own first-token timeout still leaves the server's silence counting, and a request waiting on
a server found gone stops waiting at once.

The prompt's windows are sized by what the server measurably prefills in the time budget, as
the local engine's are by its own rate (``prefill_rate``): a team server on a CPU prefills a
few hundred tokens a second, and a prompt sized for a GPU would not even start streaming
within the first-token timeout. Until a server is measured it is assumed that slow; its first
answers lift the rate to what it is. The windows' starts stay anchored across keystrokes (as
for the local engine), so the server's own prompt cache keeps what was sent before.

The HTTP client lives on one event loop thread: cancelling a stream's task closes its
connection immediately, which a blocked synchronous read would not allow.
"""

from __future__ import annotations

import asyncio
import queue
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from ..engine import Generation, GenerationParams, GenerationStats, StopRule, StopSignal
from ..engine.request import Output
from ..engine.slots import common_prefix_len
from ..sources import SERVER
from ..tokenizer import break_specials
from .config import RemoteConfig
from .health import Health
from .metrics import ServerSpeculation, from_event
from .secrets import shown
from .speculation import RemoteSpeculation
from .sse import StreamFault
from .stream import stream_completion
from .watch import Watch

POLL_S = 0.01  # how often a waiting request looks at its stop signal
# Prompt tokens per second assumed of a server not yet measured: a small model's prefill on
# two CPU cores (``docs/remote.md``, "A team server on a CPU"). A fast server's first answer
# replaces it.
COLD_PREFILL_RATE = 64.0
MIN_MEASURED_TOKENS = 64  # fewer fresh prompt tokens time the server's overhead, not its prefill
# The windows are resized only when the measured rate leaves the one in use by this much: each
# resize moves the prompt's start, and the server's cache of the prompt before is lost.
RESIZE_RATIO = 1.25
# A local bound on streamed tokens in case a server ignores max_tokens (the server's own limit
# is the real one; re-encoded text can count a few more tokens than the server did).
TOKEN_SLACK = 4


class RemoteEngine:
    """Decodes on a remote server; see the module docstring."""

    # What differs from the local engine (``generator.Generator``'s capabilities): its server
    # keeps its own prompt cache, so nothing warms here; it drafts from nothing the daemon
    # holds; it counts no passes.
    warming = None
    uses_corpora = False

    def __init__(self, config: RemoteConfig, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.health = Health(config.urls)
        self.speculation = RemoteSpeculation()  # what to ask a llama.cpp server to draft
        self.measured_rate: float | None = None  # the servers' prefill, prompt tokens/s
        self.sizing_rate = COLD_PREFILL_RATE  # the rate the windows are sized by
        self.last_prompt: dict[str, list[int]] = {}  # per URL: what its cache holds, roughly
        # what a server's tokenizer parses as special tokens
        self.special_ids = frozenset(tokenizer.get_added_vocab().values())
        self.headers = {"Accept": "text/event-stream"}
        if config.token:
            self.headers["Authorization"] = f"Bearer {config.token}"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="codespec-remote", daemon=True
        )
        self.thread.start()
        self.client: httpx.AsyncClient = self._on_loop(self._make_client())
        watch = Watch(self.health, self.client, config, self.headers)
        self.watch = asyncio.run_coroutine_threadsafe(watch.forever(), self.loop)

    @property
    def prefill_rate(self) -> float:
        """Prompt tokens per second the server prefills (the module's docstring)."""
        return self.sizing_rate

    @property
    def label(self) -> str:
        return self.config.describe()

    def passes_run(self) -> int:
        return 0

    # -- the generator seam -------------------------------------------------------------------

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        stop: StopSignal | None = None,
        stop_rule: StopRule | None = None,
    ) -> Generation:
        params = params or GenerationParams()
        stats = GenerationStats()
        stats.proposed[SERVER] = stats.accepted[SERVER] = 0
        output = Output(set(), TOKEN_SLACK * params.max_tokens + 16, stop_rule, stats)
        steps = self._steps(prompt, self._body(prompt, params), stop, output, stats, params.context)
        return Generation(steps, stats, output.tokens)

    def close(self) -> None:
        self.watch.cancel()
        try:
            self._on_loop(self.client.aclose(), timeout=2)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)

    # -- one request ---------------------------------------------------------------------------

    def prompt_text(self, prompt: list[int]) -> str:
        """The prompt as a server parses it back into these ids: the special tokens as their
        text, and any text between them that spells one broken up (the module's docstring)."""
        pieces: list[str] = []
        plain: list[int] = []
        for token in [*prompt, None]:
            if token is not None and token not in self.special_ids:
                plain.append(token)
                continue
            if plain:
                pieces.append(break_specials(self.tokenizer, self.tokenizer.decode(plain)))
                plain = []
            if token is not None:
                pieces.append(self.tokenizer.convert_ids_to_tokens(token))
        return "".join(pieces)

    def _body(self, prompt: list[int], params: GenerationParams) -> dict:
        body: dict = {
            "prompt": self.prompt_text(prompt),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.config.model:
            body["model"] = self.config.model
        if params.seed is not None:
            body["seed"] = params.seed
        if self.config.send_speculation:  # llama.cpp's server takes it per request
            n_max = 0 if not params.speculate else self.speculation.n_max(params.context)
            if n_max is not None:
                body["speculative.n_max"] = n_max
        return body

    def _steps(
        self,
        prompt: list[int],
        body: dict,
        stop: StopSignal | None,
        output: Output,
        stats: GenerationStats,
        context: str = "",
    ) -> Iterator[list[int]]:
        t0 = time.perf_counter()
        deadline = t0 + self.config.total_timeout_s
        for url in self.health.candidates():
            if time.perf_counter() >= deadline:
                break
            events: queue.Queue = queue.Queue()
            self.health.sent(url)
            task = asyncio.run_coroutine_threadsafe(
                stream_completion(
                    self.client, url, body, self.headers, self.config.max_response_bytes, events
                ),
                self.loop,
            )
            fresh = len(prompt) - common_prefix_len(self.last_prompt.get(url, []), prompt)
            self.last_prompt[url] = prompt  # (prefilled, or being prefilled, there now)
            try:
                retry = yield from self._read(
                    url, events, stop, output, stats, t0, deadline, context
                )
            finally:  # (also when the caller stops reading: a stop rule, a cancel)
                task.cancel()  # closes the HTTP stream (a stop rule, a cancel, a timeout)
                self.health.over(url)
                self._measure(stats, fresh)
            if not retry:
                break
        stats.stop_reason = stats.stop_reason or "unreachable"  # (no URL left to try)
        stats.total_s = time.perf_counter() - t0

    def _read(
        self,
        url: str,
        events: queue.Queue,
        stop: StopSignal | None,
        output: Output,
        stats: GenerationStats,
        t0: float,
        deadline: float,
        context: str = "",
    ) -> Iterator[list[int]]:
        """Read one server's stream into ``output``; return True to try the next URL."""
        last = time.perf_counter()
        texted = False
        incidents = self.health.incidents(url)
        while True:
            if stop is not None and stop.cancelled:
                stats.stop_reason = "cancelled"
                if texted:
                    self.health.succeeded(url)  # it was serving: the request ended it
                return False
            now = time.perf_counter()
            patience = self.config.stall_timeout_s if texted else self.config.first_token_timeout_s
            if now >= deadline and texted:
                stats.stop_reason = "max_time"  # what streamed so far is the answer
                self.health.succeeded(url)
                return False
            if not texted and self.health.incidents(url) != incidents:
                return True  # the watch found it gone meanwhile (and said so once)
            if now >= min(deadline, last + patience):
                if not texted and self.health.is_busy(url):  # alive, computing: not a fault
                    stats.stop_reason = "remote_busy"
                    return False
                what = "stalled" if texted else "sent no text in time"
                fault = StreamFault(f"the stream {what}", hangs=True)
                return self._fault(url, fault, output, stats, texted)
            try:
                event = events.get(timeout=min(POLL_S, max(0.0, deadline - now)))
            except queue.Empty:
                continue
            kind = event[0]
            if kind == "fault":
                return self._fault(url, event[1], output, stats, texted)
            if kind == "end":
                if not stats.stop_reason:  # ended without a finish reason: interrupted
                    early = StreamFault("the server ended the stream early", retry=False)
                    return self._fault(url, early, output, stats, texted)
                self.health.succeeded(url)
                return False
            if kind == "meta":
                self._meta(event[1], stats, context)
                continue
            _, text, finish = event
            last = time.perf_counter()  # (the timeouts wait for text: other events do not count)
            if not texted:
                texted = True
                stats.ttft_s = stats.prefill_s = last - t0
                self.health.heard(url)
            fresh = output.push(self._plain_ids(text)) if text else []
            if fresh:
                yield fresh
            if output.done:  # a stop rule fired: the stream is closed by the caller
                self.health.succeeded(url)
                return False
            if finish is not None:
                stats.stop_reason = {"length": "max_tokens"}.get(finish, "eos")

    def _fault(
        self, url: str, fault: StreamFault, output: Output, stats: GenerationStats, texted: bool
    ) -> bool:
        """Note a fault; True when the request may go on to the next URL."""
        reason = shown(fault.reason, self.config.token)
        if fault.retry:
            self.health.failed(url, reason, fault.retry_after_s, hangs=fault.hangs)
        else:
            self.health.refused(url, reason)
        if texted:  # a cut stream: its last line may be cut too, so nothing is shown
            del output.tokens[:]
            stats.tokens = 0
            stats.stop_reason = "remote_error"
            return False
        if fault.retry:
            return True  # (when no URL is left, the request ends "unreachable")
        stats.stop_reason = "remote_error"
        return False

    def _measure(self, stats: GenerationStats, fresh: int) -> None:
        """Learn the server's prefill rate from one answer: the prompt tokens it had to compute
        (what it reported, else those past what this engine sent it last) over the time to
        the first text. Queueing and the network count as prefill: a rate on the safe side."""
        if stats.ttft_s <= 0:
            return
        computed = stats.prefill_tokens or fresh
        rate = computed / stats.ttft_s  # (a lower bound: the time holds more than the prefill)
        if computed < MIN_MEASURED_TOKENS and rate <= self.sizing_rate:
            return  # a short prompt's time is mostly overhead: it says little unless it is fast
        self.measured_rate = rate if self.measured_rate is None else (self.measured_rate + rate) / 2
        if not 1 / RESIZE_RATIO < self.measured_rate / self.sizing_rate < RESIZE_RATIO:
            self.sizing_rate = self.measured_rate

    def _meta(self, event: dict, stats: GenerationStats, context: str = "") -> None:
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            cached = cached if isinstance(cached, int) else 0
            stats.cached_tokens = cached
            stats.prefill_tokens = max(0, usage["prompt_tokens"] - cached)
        timings = event.get("timings")
        if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
            stats.cached_tokens = timings["cache_n"]
        spec: ServerSpeculation | None = from_event(event)
        if spec is not None:
            self.speculation.observe(context, spec)
            stats.proposed[SERVER] = spec.drafted
            stats.accepted[SERVER] = spec.accepted
            stats.target_passes = spec.steps or stats.target_passes

    def _plain_ids(self, text: str) -> list[int]:
        """Token ids of model output, special-token text kept as text."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)[
            "input_ids"
        ]

    # -- the loop thread ------------------------------------------------------------------------

    def _on_loop(self, coroutine, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _make_client(self) -> httpx.AsyncClient:
        config = self.config
        verify: bool | str | ssl.SSLContext = config.verify
        if config.verify and config.ca_bundle:
            verify = ssl.create_default_context(cafile=config.ca_bundle)
        timeout = httpx.Timeout(
            connect=config.connect_timeout_s,
            # a backstop only: the worker thread's own timeouts come first (``_read``)
            read=max(config.first_token_timeout_s, config.stall_timeout_s) + 5.0,
            write=config.connect_timeout_s,
            pool=config.connect_timeout_s,
        )
        return httpx.AsyncClient(
            verify=verify,
            timeout=timeout,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            trust_env=False,  # no proxy from the environment: the config says where code goes
        )
