"""The generator seam: what a completion needs from whatever decodes.

``completion.complete`` builds a prompt (token ids, with the local tokenizer), hands it to a
generator with the request's params, a stop rule and a stop signal, and reads back a stream of
accepted tokens and the request's stats. The local engine (``engine.Engine``) is one generator;
an engine on another machine can be another, without touching completion, stop rules, server or
stats. What an implementation must keep:

* iterating the ``Generation`` yields each new run of accepted tokens as it comes (streaming);
  ``Generation.tokens`` is everything kept so far, after the stop rule's cuts;
* the stop rule is applied to the growing output as it streams, and generation ends when it
  fires (``engine.request.Output`` does this for any generator);
* ``stop`` set from another thread ends generation soon, with ``stop_reason == "cancelled"``;
* ``prefill_rate`` (prompt tokens per second, None when unknown) sizes prompt windows by time.

What differs between generators is said by their capabilities, never found by probing:
``warming`` is what warms places and looks ahead while nobody waits (``Warming``: the local
engine; None for a remote one, whose server keeps its own prompt cache), ``uses_corpora``
whether the workspace's token corpora are drafted from, ``health`` a remote engine's
reachability (None locally), ``passes_run`` the passes run so far (cancel checks count them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

from .engine import Generation, GenerationParams, StopRule, StopSignal
from .engine.tree import Logits


class Reachability(Protocol):
    """A remote engine's reachability (``remote/health.py``): who is told when it changes."""

    listeners: list[Callable[[str, str], None]]  # (state, message)


class Generator(Protocol):
    @property
    def prefill_rate(self) -> float | None: ...

    @property
    def label(self) -> str:
        """What decodes, for status lines ("local", or a remote engine's hosts and model)."""
        ...

    @property
    def warming(self) -> Warming | None: ...

    @property
    def uses_corpora(self) -> bool: ...

    @property
    def health(self) -> Reachability | None: ...

    def passes_run(self) -> int: ...

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        stop: StopSignal | None = None,
        stop_rule: StopRule | None = None,
    ) -> Generation: ...


class Warming(Protocol):
    """A generator that can prepare a place before a request comes (the local engine)."""

    def warm(self, prompt: list[int], stop: StopSignal) -> int: ...

    def look_ahead(
        self,
        prompt: list[int],
        next_prompts: Callable[[Logits], list[list[int]]],
        stop: StopSignal,
    ) -> int: ...


class SlowedGenerator:
    """A generator whose every run of accepted tokens comes ``delay_s`` late, as on a slow CPU
    (``serve --test-pass-delay``: tests of what editors do while a request runs). Everything
    else is the wrapped generator's."""

    def __init__(self, inner: Generator, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    @property
    def prefill_rate(self) -> float | None:
        return self.inner.prefill_rate

    @property
    def label(self) -> str:
        return self.inner.label

    @property
    def warming(self) -> Warming | None:
        return self.inner.warming

    @property
    def uses_corpora(self) -> bool:
        return self.inner.uses_corpora

    @property
    def health(self) -> Reachability | None:
        return self.inner.health

    def passes_run(self) -> int:
        return self.inner.passes_run()

    def generate(
        self,
        prompt: list[int],
        params: GenerationParams | None = None,
        stop: StopSignal | None = None,
        stop_rule: StopRule | None = None,
    ) -> Generation:
        generation = self.inner.generate(prompt, params, stop, stop_rule)

        def late() -> Iterator[list[int]]:
            for step in generation:
                time.sleep(self.delay_s)
                yield step

        return Generation(late(), generation.stats, generation.tokens)
