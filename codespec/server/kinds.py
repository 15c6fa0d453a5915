"""The kinds of work the engine worker runs, each a type that carries its own work.

A request someone waits for (``Job``) is one of

* ``CompletionJob``: a completion at a cursor (an editor's, or an HTTP client's ``/infill``);
* ``RawPromptJob``: a prompt the client built itself, continued as it is (``/completion``,
  ``/v1/completions`` with a plain prompt, chats);
* ``NextEditJob``: the edits the recent ones call for around a line (``nextedit/``).

Each says how it runs (``run``), which kind of row it leaves in the stats (``stats_kind``), which
earlier request of its document it supersedes (``supersedes``), and what the worker may do for
its place afterwards (``follow_up``: a completion looks ahead at the next keystrokes). Warm-ups
nobody waits for are ``WarmJob`` (a cursor's prompt, then the keystrokes after it) and
``RawWarmJob`` (a client's own prompt); they report what they did as ``Warmed``.

The worker (``worker.py``) only runs them: when, for how long and what it answers are the
lifecycle, the same for every kind.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..completion import CompletionResult, complete, complete_raw, prompt_at, raw_prompt
from ..lookahead import likely_next_chars, next_key_prompts
from ..nextedit.edits import LineEdit
from ..nextedit.guard import judged
from ..nextedit.suggest import NextEdit, suggest
from ..stats.record import Timing, new_id
from ..stops import Mode
from .places import JobStop, NextEditAsk, Place

if TYPE_CHECKING:
    from ..generator import Warming
    from ..runtime import LoadedPair  # (the model's stack loads with the model, not before)

OnText = Callable[[str], None]
MODE_KINDS = {Mode.LINE: "single", Mode.BLOCK: "multi", Mode.NONE: "none"}


@dataclass(eq=False)
class Job(Place):
    """A request: someone waits for its future. The subclasses are its kinds."""

    on_text: OnText | None = None
    signal: JobStop = field(default_factory=JobStop)  # pyright: ignore[reportIncompatibleVariableOverride]  (a narrower StopSignal, set once)
    future: Future = field(default_factory=Future)
    id: str = field(default_factory=new_id)  # the suggestion's id, if it becomes one
    superseded: bool = False  # cancelled because a newer request for the document came
    yielded: bool = False  # stopped after its share of the worker: another session waited
    share_timer: Any = None  # the threading.Timer that ends its share, once one is due
    timing: Timing = field(default_factory=Timing)  # arrived: when it was submitted

    def run(self, pair: LoadedPair, on_text: OnText) -> CompletionResult:
        """Run on the model; ``on_text`` hears each longer text as it streams."""
        raise NotImplementedError

    def stats_kind(self, result: CompletionResult | None) -> str:
        """The ``kind`` of the request's stats row (``stats/record.py``)."""
        raise NotImplementedError

    def supersedes(self, earlier: Job) -> bool:
        """Whether this request, submitted after ``earlier``, makes it moot: a request at a
        document replaces every earlier one there (typing stops next edits too)."""
        return self.same_document(earlier)

    def follow_up(self, result: CompletionResult) -> WarmJob | None:
        """Work for this place once the request is answered (None: none)."""
        return None


@dataclass(eq=False)
class CompletionJob(Job):
    """A completion at ``cursor`` (its prompt built here, reusing the document's anchor)."""

    def run(self, pair: LoadedPair, on_text: OnText) -> CompletionResult:
        result = complete(
            pair,
            self.cursor,
            self.options,
            path=self.path,
            extra_files=self.extra_files,
            stop=self.signal,
            on_text=on_text,
            anchor=self.anchored,
            corpora=self.corpora,
            client_stops=self.client_stops,
        )
        self.keep_anchor(result.anchor)
        return result

    def stats_kind(self, result: CompletionResult | None) -> str:
        mode = result.mode if result is not None else self.options.mode
        return MODE_KINDS[mode] if mode is not None else "none"

    def follow_up(self, result: CompletionResult) -> WarmJob | None:
        """While the user reads the answer, compute ahead the next keystrokes at its place (a
        warm-up of that place, whose prompt is cached already). Not where no model ran."""
        if result.stats is None or result.anchor is None or not self.options.look_ahead_keys:
            return None
        return WarmJob.at(self, shown_next=result.text[:1])


@dataclass(eq=False)
class RawPromptJob(Job):
    """A prompt the client built itself (``completion.complete_raw``)."""

    prompt: str = field(kw_only=True)

    def run(self, pair: LoadedPair, on_text: OnText) -> CompletionResult:
        return complete_raw(
            pair,
            self.prompt,
            self.options,
            stop=self.signal,
            on_text=on_text,
            client_stops=self.client_stops,
        )

    def stats_kind(self, result: CompletionResult | None) -> str:
        return "raw"


@dataclass(eq=False)
class NextEditJob(Job):
    """A next-edit request (``nextedit/suggest.py``), on the user's next-edit model where there
    is one: its edits are kept on the job (``found``); the result's text is the updated window
    the model wrote, empty when the edit is not sure enough to show."""

    ask: NextEditAsk = field(kw_only=True)
    found: NextEdit | None = None
    refused: str | None = None  # why the edit found may not be shown (``nextedit/guard.py``)

    def run(self, pair: LoadedPair, on_text: OnText) -> CompletionResult:
        model = pair.next_edit or pair
        separator = model.manifest.tokens.file_sep
        if not separator:  # a model without repository tokens: no prompt to write
            return CompletionResult("", Mode.NONE, None)
        ask = self.ask
        self.found = found = suggest(
            model.engine, model.tokenizer, separator, self.path or "file", ask.text, ask.line,
            ask.history, stop=self.signal,
        )  # fmt: skip
        hunk = found.shown(ask.least_confidence)
        if hunk is not None:  # sure enough: would the file be whole after it?
            self.refused = judged(
                self.cursor.language, ask.text, found.window.first, hunk, ask.history,
                ask.explained,
            )  # fmt: skip
            if self.refused is not None:
                found.stats.stop_reason = f"refused: {self.refused}"  # (counted in the stats)
        text = found.updated if self.edit() is not None else ""
        return CompletionResult(
            text, Mode.BLOCK, found.stats, prompt_tokens=found.prompt_tokens, tokens=found.tokens
        )

    def edit(self) -> LineEdit | None:
        """The edit to show (None: none found, not sure enough, or refused)."""
        if self.found is None or self.refused is not None:
            return None
        return self.found.shown(self.ask.least_confidence)

    def stats_kind(self, result: CompletionResult | None) -> str:
        return "next-edit"

    def supersedes(self, earlier: Job) -> bool:
        """Only the document's earlier next edit: a completion asked before it is what the user
        waits to see."""
        return isinstance(earlier, NextEditJob) and self.same_document(earlier)


@dataclass(frozen=True)
class Warmed:
    """What a warm-up did: prompt tokens it computed, whether a request stopped it, and the
    rows it computed ahead (None: it did not look ahead)."""

    tokens: int
    preempted: bool
    ahead_rows: int | None = None


@dataclass(eq=False)
class WarmJob(Place):
    """Prefill the prompt a request at this cursor would use, then compute ahead the next
    keystrokes there (``lookahead.py``); nobody waits for it."""

    shown_next: str = ""  # the ghost text's first character there: typing it needs no model

    def run(self, pair: LoadedPair, warming: Warming) -> Warmed:
        # the prompt a request here would use: typing at an anchored cursor extends its prompt
        prompt, anchor = prompt_at(
            pair, self.cursor, self.options, self.path, self.extra_files, anchor=self.anchored
        )
        computed = warming.warm(prompt, self.signal)
        self.keep_anchor(anchor)  # a request at this place uses exactly this prompt
        keys = self.options.look_ahead_keys
        if not keys or self.signal.cancelled:
            return Warmed(computed, self.signal.cancelled)
        tokenizer, cursor = pair.tokenizer, self.cursor

        def next_prompts(logits) -> list[list[int]]:
            chars = likely_next_chars(tokenizer, logits, keys, skip=self.shown_next)
            return next_key_prompts(tokenizer, anchor, cursor.prefix, cursor.suffix, chars)

        rows = warming.look_ahead(prompt, next_prompts, self.signal)
        return Warmed(computed, self.signal.cancelled, rows)


@dataclass(eq=False)
class RawWarmJob(WarmJob):
    """A client's own prompt computed ahead (llama.vim's ``n_predict: 0``); nothing after it."""

    prompt: str = field(kw_only=True)

    def run(self, pair: LoadedPair, warming: Warming) -> Warmed:
        ids, _ = raw_prompt(pair, self.prompt, self.options.max_tokens)
        return Warmed(warming.warm(ids, self.signal), self.signal.cancelled)
