"""One completion, text to text: decide the mode, build the prompt, decode with the stop rules,
shape the result. The CLI and the LSP server both call ``complete``; ``complete_raw`` continues
a prompt a client built itself (the HTTP front's ``/completion`` and ``/v1/completions``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .client_stops import ClientStops, EarliestCut
from .engine import GenerationParams, GenerationStats, StopSignal
from .engine.corpus import TokenCorpus
from .prompt import Anchor, FimRequest, build_fim_prompt, extend_anchor
from .runtime import LoadedPair
from .stops import (
    Cursor,
    Mode,
    StopChecker,
    TextStopRule,
    decide_mode,
    drop_partial_line,
    shape,
)
from .workspace.context import (
    CHARS_PER_TOKEN,
    EXTRA_SHARE_WITH_DEFINITIONS,
    MIN_DEFINITION_TOKENS,
    WORKSPACE_SHARE,
)


@dataclass
class CompletionResult:
    text: str
    mode: Mode
    stats: GenerationStats | None  # None when no model ran (mode NONE)
    prompt_tokens: int = 0
    anchor: Anchor | None = None  # pass it to the next request for the same document
    tokens: list[int] = field(default_factory=list)  # the generated token ids, before shaping
    truncated: bool = False  # the prompt lost its start to fit the model's context


@dataclass
class CompletionOptions:
    max_tokens: int = 64
    line_max_tokens: int = 48
    max_lines: int = 24
    temperature: float = 0.0
    seed: int | None = None
    speculate: bool = True
    stop_rules: bool = True
    invoked: bool = False  # an explicit request from the user widens the mode
    mode: Mode | None = None  # force a mode instead of deciding
    prefix_tokens: int = 1024  # the most prompt tokens of each part; see ``sized_by_time``
    suffix_tokens: int = 256
    extra_tokens: int = 1024
    prompt_seconds: float = 0.0  # > 0: shrink the windows to a prefill of about this long
    # of that prefill, the share other files take when there are any (``sized_by_time``)
    extra_share: float = 0.2
    extra_floor: int = 0  # the fewest tokens other files get then, whatever the time budget
    look_ahead_keys: int = 0  # > 0: the daemon computes ahead this many next keystrokes


MIN_PREFIX_TOKENS = 96  # windows sized by time never shrink below these
MIN_SUFFIX_TOKENS = 32


def sized_by_time(
    options: CompletionOptions, prefill_rate: float | None, has_extra: bool = True
) -> CompletionOptions:
    """Options whose prompt windows a cold prefill fills in about ``prompt_seconds`` on this
    machine (``prefill_rate`` tokens/s, measured at load): ``extra_share`` for other files
    (none when there are none: ``has_extra``), the rest 3:1 between prefix and suffix, each at
    most its configured size and at least a floor. The default 2.5 s fits a warm-up into a 3 s
    pause (after its 0.3 s delay); see docs/benchmarks.md for what smaller windows cost in
    exact match."""
    if options.prompt_seconds <= 0 or not prefill_rate:
        return options
    total = prefill_rate * options.prompt_seconds
    extra_share = min(max(options.extra_share, 0.0), 0.8) if has_extra else 0.0
    extra_floor = options.extra_floor if has_extra else 0

    def within(share: float, floor: int, cap: int) -> int:
        return max(min(round(share * total), cap), min(floor, cap))

    return replace(
        options,
        prefix_tokens=within(0.75 * (1 - extra_share), MIN_PREFIX_TOKENS, options.prefix_tokens),
        suffix_tokens=within(0.25 * (1 - extra_share), MIN_SUFFIX_TOKENS, options.suffix_tokens),
        extra_tokens=within(extra_share, extra_floor, options.extra_tokens),
    )


def with_definitions(options: CompletionOptions) -> CompletionOptions:
    """``options`` for a prompt that holds workspace definitions (``workspace/context.py``):
    they take a larger share of a prompt sized by time, and at least a floor of tokens, as the
    prefix and suffix do (the definitions come first in the prompt and stay while the user
    types nearby, so their prefill is paid once and then cached)."""
    return replace(
        options, extra_share=EXTRA_SHARE_WITH_DEFINITIONS, extra_floor=MIN_DEFINITION_TOKENS
    )


def definition_chars(options: CompletionOptions, prefill_rate: float | None) -> int:
    """How many characters of definitions a prompt with ``options`` has room for."""
    room = sized_by_time(with_definitions(options), prefill_rate).extra_tokens
    return int(min(room, options.extra_tokens * WORKSPACE_SHARE) * CHARS_PER_TOKEN)


# Tokens of a prompt that are not windows: special tokens, the repository's and files' names.
PROMPT_OVERHEAD_TOKENS = 256


def within_context(options: CompletionOptions, pair: LoadedPair) -> CompletionOptions:
    """Options whose windows, with the completion and the prompt's overhead, fit the model's
    context: the other files' share goes first, then the suffix's and prefix's in proportion
    (a prompt past the context would fail the model, and the settings allow one)."""
    context = getattr(pair, "context_tokens", None)
    if not context:
        return options  # (not known: a stand-in pair that only tokenizes)
    new = max(options.max_tokens, options.line_max_tokens)
    room = max(context - new - PROMPT_OVERHEAD_TOKENS, MIN_PREFIX_TOKENS + MIN_SUFFIX_TOKENS)
    prefix, suffix, extra = options.prefix_tokens, options.suffix_tokens, options.extra_tokens
    if prefix + suffix + extra <= room:
        return options
    extra = max(0, min(extra, room - prefix - suffix))
    if prefix + suffix > room:
        suffix = suffix * room // (prefix + suffix)
        prefix = room - suffix
    return replace(options, prefix_tokens=prefix, suffix_tokens=suffix, extra_tokens=extra)


def complete(
    pair: LoadedPair,
    cursor: Cursor,
    options: CompletionOptions | None = None,
    path: str = "",
    extra_files: tuple[tuple[str, str], ...] = (),
    stop: StopSignal | None = None,
    on_text: Callable[[str], None] | None = None,
    anchor: Anchor | None = None,
    corpora: tuple[TokenCorpus, ...] = (),
    client_stops: ClientStops | None = None,
) -> CompletionResult:
    """Complete at ``cursor``; ``on_text`` receives the text so far after each target pass.
    ``corpora``: token corpora the engine may draft from (the workspace's, the accepted
    completions'; ``engine/corpus.py``). ``client_stops``: the client's own stop conditions,
    judged with codespec's rules (the earlier cut wins).

    With the ``anchor`` of an earlier request on the same document, text typed at that cursor
    since then extends the cached prompt instead of rebuilding it (see ``prompt.Anchor``).
    ``stop`` ends it early (``engine/stop.py``). ``pair.engine`` is any generator
    (``generator.py``).
    """
    options = options or CompletionOptions()
    mode = options.mode or decide_mode(cursor, invoked=options.invoked)
    if mode is Mode.NONE:
        return CompletionResult("", mode, None, anchor=anchor)
    prompt, anchor = prompt_at(pair, cursor, options, path, extra_files, anchor)
    checkers: list = [StopChecker(cursor, mode, options.max_lines)] if options.stop_rules else []
    if client_stops:
        checkers.append(client_stops)
    rule = TextStopRule(pair.tokenizer, EarliestCut(checkers)) if checkers else None
    params = GenerationParams(
        max_tokens=options.line_max_tokens if mode is Mode.LINE else options.max_tokens,
        temperature=options.temperature,
        seed=options.seed,
        speculate=options.speculate,
        context=mode.value,
        corpora=corpora,
        not_before_cursor=suffix_span(pair, prompt) if corpora else None,
    )
    generation = pair.engine.generate(prompt, params, stop=stop, stop_rule=rule)

    def stopped_by_rule() -> bool:
        return generation.stats.stop_reason == "stop_rule"

    for _ in generation:
        if on_text is not None:
            if rule is not None and stopped_by_rule():
                text = rule.finish(generation.tokens, stopped_here=True)
            else:
                text = pair.tokenizer.decode(generation.tokens)
            text = settled(text, mode)
            if text and not text.endswith("\ufffd"):  # wait for a multi-byte character's end
                on_text(text)
    if rule is not None:
        text = rule.finish(generation.tokens, stopped_here=stopped_by_rule())
        text = shape(drop_partial_line(text, mode, generation.stats.stop_reason), cursor, mode)
    else:
        text = pair.tokenizer.decode(generation.tokens)
    return CompletionResult(
        text, mode, generation.stats, len(prompt), anchor, list(generation.tokens)
    )


def complete_raw(
    pair: LoadedPair,
    text: str,
    options: CompletionOptions,
    stop: StopSignal | None = None,
    on_text: Callable[[str], None] | None = None,
    client_stops: ClientStops | None = None,
) -> CompletionResult:
    """Continue ``text`` as it is: a prompt the client built, special tokens included (a FIM
    prompt of its own, a next-edit prompt). No mode and no syntax rules (where the cursor is,
    codespec cannot know); the model's end tokens, ``max_tokens`` and ``client_stops`` end it.
    Speculation drafts from the prompt itself (n-gram lookup) and the draft model as always.
    A prompt past the model's context keeps its end (``CompletionResult.truncated``)."""
    tokenizer = pair.tokenizer
    prompt, truncated = raw_prompt(pair, text, options.max_tokens)
    rule = TextStopRule(tokenizer, client_stops) if client_stops else None
    params = GenerationParams(
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        seed=options.seed,
        speculate=options.speculate,
        context="raw",
    )
    generation = pair.engine.generate(prompt, params, stop=stop, stop_rule=rule)

    def text_so_far() -> str:
        if rule is None:
            return tokenizer.decode(generation.tokens)
        stopped_here = generation.stats.stop_reason == "stop_rule"
        return rule.finish(generation.tokens, stopped_here=stopped_here)

    for _ in generation:
        if on_text is not None:
            partial = text_so_far()
            if partial and not partial.endswith("\ufffd"):
                on_text(partial)
    return CompletionResult(
        text_so_far(),
        Mode.BLOCK,
        generation.stats,
        len(prompt),
        tokens=list(generation.tokens),
        truncated=truncated,
    )


def raw_prompt(pair: LoadedPair, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """``text``'s ids, special tokens read as such, and whether its start was dropped to leave
    room in the model's context for ``max_tokens`` more."""
    prompt = pair.tokenizer.encode(text, add_special_tokens=False)
    room = max(pair.context_tokens - max_tokens - 1, 1)
    if len(prompt) <= room:
        return prompt, False
    return prompt[len(prompt) - room :], True


def suffix_span(pair: LoadedPair, prompt: list[int]) -> tuple[int, int] | None:
    """Where the FIM prompt's suffix lies, markers included: from its ``fim_suffix`` marker
    to just after its ``fim_middle`` (text typed since the prompt was built follows that)."""
    tokens, tokenizer = pair.manifest.tokens, pair.tokenizer
    if not tokens.fim_suffix:  # (a prompt of the prefix alone has no suffix)
        return None
    suffix_id = tokenizer.convert_tokens_to_ids(tokens.fim_suffix)
    middle_id = tokenizer.convert_tokens_to_ids(tokens.fim_middle)
    if suffix_id is None or middle_id is None:
        return None
    try:
        start = len(prompt) - 1 - prompt[::-1].index(suffix_id)
        end = len(prompt) - prompt[::-1].index(middle_id)
    except ValueError:
        return None
    return (start, end) if start < end else None


def prompt_at(
    pair: LoadedPair,
    cursor: Cursor,
    options: CompletionOptions,
    path: str = "",
    extra_files: tuple[tuple[str, str], ...] = (),
    anchor: Anchor | None = None,
) -> tuple[list[int], Anchor]:
    """The prompt for a cursor and the anchor to keep for the next request: the anchored
    prompt extended by what was typed at it, or a fresh one (windows sized by time)."""
    prompt = extend_anchor(pair.tokenizer, anchor, cursor.prefix, cursor.suffix)
    if prompt is not None and anchor is not None:
        return prompt, anchor
    request = FimRequest(
        cursor.prefix,
        cursor.suffix,
        path=path,
        extra_files=extra_files,
        prefix_from=anchor.window_at if anchor is not None else None,
    )
    sized = sized_by_time(options, pair.engine.prefill_rate, has_extra=bool(extra_files))
    budgets = within_context(sized, pair)
    prompt, window_at = build_fim_prompt(
        pair.tokenizer,
        pair.manifest.tokens,
        request,
        budgets.prefix_tokens,
        budgets.suffix_tokens,
        budgets.extra_tokens,
    )
    return prompt, Anchor(cursor.prefix, cursor.suffix, prompt, window_at)


def settled(text: str, mode: Mode) -> str:
    """The part of a growing completion that is safe to show: in multi-line mode the complete
    lines (the stop rules judge whole lines, so a partial one may still be cut), or the first
    line while it grows."""
    if mode is Mode.BLOCK and "\n" in text:
        return text[: text.rfind("\n")].rstrip()  # blank lines at the end may still be cut
    return text
