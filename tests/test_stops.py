"""Syntax-aware rules on golden cases per language, through the real tree-sitter grammars."""

import tomllib
from pathlib import Path

import pytest

from codespec.languages import LANGUAGES, language_for
from codespec.stops import Cursor, Mode, StopChecker, TextStopRule, decide_mode, shape

DATA = Path(__file__).parent / "data" / "syntax"
MARK = "⎀"


def load_cases():
    return list(_cases())


def _cases():
    for path in sorted(DATA.glob("*.toml")):
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
        language = spec.get("language", path.stem)
        for case in spec["case"]:
            yield pytest.param(language, case, id=f"{path.stem}: {case['name']}")


def cursor_of(language: str, source: str) -> Cursor:
    source = source.lstrip("\n")
    assert source.count(MARK) == 1
    prefix, suffix = source.split(MARK)
    return Cursor(prefix, suffix, language_for(language))


def run_rules(cursor: Cursor, mode: Mode, completion: str) -> str:
    """Feed the completion as a model would: growing, one character at a time."""
    checker = StopChecker(cursor, mode)
    for n in range(1, len(completion) + 1):
        cut = checker.cut(completion[:n])
        if cut is not None:
            return shape(completion[:n][:cut], cursor, mode)
    cut = checker.cut(completion, final=True)
    return shape(completion if cut is None else completion[:cut], cursor, mode)


@pytest.mark.parametrize("language, case", load_cases())
def test_golden(language, case):
    cursor = cursor_of(language, case["source"])
    assert cursor.language.name == LANGUAGES[language].name
    assert cursor.language.parser is not None, f"no grammar for {language}"
    mode = decide_mode(cursor)
    assert mode.value == case["mode"]
    if mode is not Mode.NONE:
        assert run_rules(cursor, mode, case["completion"]) == case["expected"]


def test_every_required_language_has_a_grammar_and_cases():
    required = {
        "python",
        "javascript",
        "typescript",
        "typescriptreact",
        "go",
        "rust",
        "java",
        "c",
        "cpp",
        "lua",
        "shellscript",
    }
    assert required <= set(LANGUAGES)
    for name in required:
        assert LANGUAGES[name].parser is not None, name
    covered = {tomllib.loads(p.read_text()).get("language", p.stem) for p in DATA.glob("*.toml")}
    assert required <= covered


def test_language_from_extension_and_generic_fallback():
    assert language_for(None, "a/b/main.rs").name == "rust"
    assert language_for("tsx").name == "typescriptreact"
    generic = language_for("haskell", "x.hs")
    assert generic.parser is None
    cursor = Cursor("main = do\n  ", "\n", generic)
    assert decide_mode(cursor) is Mode.BLOCK
    # Generic rules still stop: dedent below the block.
    assert run_rules(cursor, Mode.BLOCK, "print 1\n  print 2\nother = 3\n") == "print 1\n  print 2"


def test_invoked_request_widens_the_decision():
    cursor = Cursor("x = foo", "bar()\n", language_for("python"))
    assert decide_mode(cursor) is Mode.NONE
    assert decide_mode(cursor, invoked=True) is Mode.LINE
    end_of_line = Cursor("x = 1", "\n", language_for("python"))
    assert decide_mode(end_of_line) is Mode.LINE
    assert decide_mode(end_of_line, invoked=True) is Mode.BLOCK


def test_shape_drops_a_completion_that_breaks_a_parsing_file():
    cursor = Cursor("def f():\n    return 1\n", "\nx = 2\n", language_for("python"))
    assert shape("y = (1,\n", cursor, Mode.BLOCK) == ""
    assert shape("y = 3\nz = (", cursor, Mode.BLOCK) == "y = 3"


def test_max_lines():
    cursor = Cursor("def f():\n    ", "\n    return 0\n", language_for("python"))
    checker = StopChecker(cursor, Mode.BLOCK, max_lines=3)
    text = "a = 1\n    b = 2\n    c = 3\n    d = 4\n"
    assert text[: checker.cut(text)] == "a = 1\n    b = 2\n    c = 3"


def first_cut(checker: StopChecker, completion: str, ends: list[int]) -> tuple[int, int | None]:
    """The first of ``completion[:end]`` for ``end`` in ``ends`` that the checker cuts, and
    where; (len, None) if none is cut."""
    for end in ends:
        cut = checker.cut(completion[:end])
        if cut is not None:
            return end, cut
    return len(completion), None


@pytest.mark.parametrize("language, case", load_cases())
def test_judging_the_growing_line_only_stops_sooner(language, case):
    """Fed one character at a time, the rules find the same cut as when they are asked only
    at line ends (complete lines), never later."""
    cursor = cursor_of(language, case["source"])
    mode = decide_mode(cursor)
    if mode is Mode.NONE:
        return
    completion = case["completion"]
    every_char = first_cut(StopChecker(cursor, mode), completion, range(1, len(completion) + 1))
    line_ends = [i + 1 for i, c in enumerate(completion) if c == "\n"]
    at_line_ends = first_cut(StopChecker(cursor, mode), completion, line_ends)
    assert every_char[1] == at_line_ends[1] and every_char[0] <= at_line_ends[0]


def test_a_dedenting_line_is_judged_before_it_is_complete():
    cursor = Cursor("def f(x):\n    ", "\n", language_for("python"))
    checker = StopChecker(cursor, Mode.BLOCK)
    assert checker.cut("y = x + 1\n    return y\n") is None  # still inside the body
    assert checker.cut("y = x + 1\n    return y\n  ") is None  # blank so far: no indentation yet
    text = "y = x + 1\n    return y\nd"
    assert text[: checker.cut(text)] == "y = x + 1\n    return y\n"
    assert checker.cut(text + "ef g():\n") == checker.cut(text)


def test_each_complete_line_is_parsed_once(monkeypatch):
    """Rule 4 parses the whole file per complete line; the checker is asked after every token
    (and about proposals), so each line's verdict is remembered, not parsed again. A file whose
    syntax error lies elsewhere (here an unclosed bracket far above) never parses: without the
    memory every call re-parsed every complete line."""
    import codespec.stops as stops

    parses = []
    real = stops.has_syntax_error
    monkeypatch.setattr(stops, "has_syntax_error", lambda *a: parses.append(1) or real(*a))
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(50))
    cursor = Cursor("x = (\n" + body + "def g(y):\n    ", "\n" + body, language_for("python"))
    checker = StopChecker(cursor, Mode.BLOCK)
    assert checker.doc_had_error
    parses.clear()
    completion = "a = y + 1\n    b = a * 2\n    c = b - 3\n    return c\n"
    cuts = [checker.cut(completion[:n]) for n in range(1, len(completion) + 1)]
    assert set(cuts) == {None}  # the file never parses: rule 4 never stops it
    assert len(parses) == completion.count("\n")  # once per complete line
    assert checker.cut(completion) is None and len(parses) == completion.count("\n")


class CharTokenizer:
    """One token per character: the stop hook's token <-> text mapping, and a fast HF
    tokenizer's call with offsets, without a model."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def __call__(
        self,
        text,
        add_special_tokens=False,
        return_offsets_mapping=False,
        split_special_tokens=False,
    ):
        return {
            "input_ids": [ord(c) for c in text],
            "offset_mapping": [(i, i + 1) for i in range(len(text))],
        }


def test_text_stop_rule_maps_the_cut_to_tokens():
    cursor = Cursor("x = ", "\ny = 2\n", language_for("python"))
    rule = TextStopRule(CharTokenizer(), StopChecker(cursor, Mode.LINE))
    tokens = [ord(c) for c in "42\nz = 1"]
    assert rule(tokens[:2]) is None
    assert rule(tokens) == 2
    assert rule.finish(tokens[:2], stopped_here=True) == "42"
    assert rule.finish([ord(c) for c in "42"], stopped_here=False) == "42"  # judged as final
    assert rule(tokens[:5]) == 2  # asking again (a proposal, say) changes nothing
    assert rule.finish(tokens[:2], stopped_here=True) == "42"


def test_typing_at_an_anchored_cursor_only_extends_the_prompt():
    from codespec.prompt import Anchor, extend_anchor

    anchor = Anchor("x = ", "\ny = 2\n", [1, 2, 3])
    tok = CharTokenizer()
    assert extend_anchor(tok, anchor, "x = ab", "\ny = 2\n") == [1, 2, 3, ord("a"), ord("b")]
    assert extend_anchor(tok, anchor, "x = ", "\ny = 2\n") == [1, 2, 3]
    assert extend_anchor(tok, anchor, "x = a", "\ny = 3\n") is None  # the suffix changed
    assert extend_anchor(tok, anchor, "z = a", "\ny = 2\n") is None  # text before it changed
    assert extend_anchor(tok, anchor, "x = a\n", "\ny = 2\n") is None  # a new line: re-anchor


def test_multiline_policy_over_the_syntax_decision():
    from codespec.server.jobs import apply_multiline_policy

    assert apply_multiline_policy(Mode.BLOCK, "never") is Mode.LINE
    assert apply_multiline_policy(Mode.LINE, "always") is Mode.BLOCK
    assert apply_multiline_policy(Mode.NONE, "always") is Mode.NONE
    assert apply_multiline_policy(Mode.BLOCK, "auto") is Mode.BLOCK


LINES = "".join(f"line {i:03d}\n" for i in range(200))  # 9 characters (tokens) per line


def test_a_fresh_prefix_window_is_the_longest_run_of_whole_lines_in_the_budget():
    from codespec.prompt import clip_prefix

    clipped = clip_prefix(CharTokenizer(), LINES, budget=9 * 50 + 4)
    assert clipped.startswith("line 150\n") and len(clipped) == 9 * 50
    assert clip_prefix(CharTokenizer(), LINES, budget=10_000) == LINES
    one_long_line = "x" * 1000
    assert clip_prefix(CharTokenizer(), one_long_line, budget=100) == "x" * 100  # cut inside


def test_the_prefix_window_keeps_its_first_line_while_the_cursor_moves_nearby():
    from codespec.prompt import clip_prefix

    def clip(text, keep_at):
        return clip_prefix(CharTokenizer(), text, budget=9 * 40, keep_at=keep_at)

    start = LINES.index("line 160\n")  # the last window: 40 lines, the whole budget
    # moving down a few lines: the window grows up to 1.25 x its budget from the same line
    down = LINES + "".join(f"more {i:03d}\n" for i in range(9))
    assert clip(down, start) == down[start:]
    # too far down (over 1.25 x) or up (under 0.75 x): a fresh window, as long as it fits
    far = LINES + "".join(f"more {i:03d}\n" for i in range(11))
    assert len(clip(far, start)) == 9 * 40 and not clip(far, start).startswith("line 160")
    up = LINES[: LINES.index("line 175\n")]
    assert len(clip(up, start)) == 9 * 40 and clip(up, start).startswith("line 135")
    # an offset that is no longer a line start (the text above changed): a fresh window
    assert clip(down, start + 3) == clip(down, None)
    assert clip(down, len(down) + 5) == clip(down, None)


def test_a_prompt_a_few_lines_below_the_last_one_shares_its_window(tiny_manifest):
    """Through the real tokenizer: the anchor remembers where its prefix window began, and a
    fresh prompt a few lines further down starts there too, so the cached KV of everything up
    to the old cursor line is reused; without it the window would start elsewhere."""
    from codespec.completion import CompletionOptions, prompt_at
    from codespec.engine.slots import common_prefix_len
    from codespec.runtime import load_pair

    pair = load_pair(str(tiny_manifest), progress=lambda m: None)
    pair.engine.calibration.prefill_rate = 60.0  # 2.5 s: 150 tokens, 90 of them prefix (floor 96)
    options = CompletionOptions(prompt_seconds=2.5)
    text = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(80))
    lines = text.splitlines(keepends=True)

    def cursor_at(line: int) -> Cursor:
        prefix = "".join(lines[:line])
        return Cursor(prefix, text[len(prefix) :], language_for("python"))

    first, anchor = prompt_at(pair, cursor_at(150), options, "m.py")
    assert anchor.window_at > 0 and anchor.prefix[anchor.window_at - 1] == "\n"
    below, moved = prompt_at(pair, cursor_at(153), options, "m.py", anchor=anchor)
    assert moved.window_at == anchor.window_at
    shared = common_prefix_len(first, below)
    assert shared >= len(pair.tokenizer.encode(anchor.prefix[anchor.window_at :])) - 1
    fresh, _ = prompt_at(pair, cursor_at(153), options, "m.py")
    assert common_prefix_len(first, fresh) < shared / 2


def test_a_long_name_costs_a_names_tokens_and_a_prompt_fits_the_context(tiny_manifest):
    """A 200,000-character file name (a client's URI) is cut to its end in the prompt; windows
    the settings allow but the model's context does not are cut to fit it, with the completion."""
    from codespec.completion import CompletionOptions, prompt_at
    from codespec.prompt import MAX_NAME_CHARS
    from codespec.runtime import load_pair

    pair = load_pair(str(tiny_manifest), progress=lambda m: None)
    cursor = Cursor("def f(x):\n    ", "\n", language_for("python"))
    options = CompletionOptions(prompt_seconds=0)
    short, _ = prompt_at(pair, cursor, options, "a.py")
    long_name = "d" * 200_000 + "/a.py"
    long, _ = prompt_at(pair, cursor, options, long_name, extra_files=((long_name, "x = 1"),))
    assert len(long) - len(short) < 3 * MAX_NAME_CHARS  # not 25,000 tokens
    assert pair.tokenizer.decode(long).count("/a.py") == 2  # each name keeps its end
    huge = "".join(f"value_{i} = {i} * {i}\n" for i in range(20_000))
    big = CompletionOptions(prompt_seconds=0, prefix_tokens=32768, suffix_tokens=32768)
    wide = Cursor(huge, huge, language_for("python"))
    assert pair.context_tokens == 32768  # the model's own (max_position_embeddings)
    pair.context_tokens = 2048  # as for a model of a shorter context
    prompt, _ = prompt_at(pair, wide, big, "a.py")
    assert 1500 < len(prompt) and len(prompt) + big.max_tokens <= pair.context_tokens


def test_typing_what_the_ghost_text_shows_keeps_the_rest():
    from codespec.server.jobs import typed_through

    shown = ("x = ", "\n", "compute(1, 2)", "id7")
    python = language_for("python")
    assert typed_through(shown, Cursor("x = comp", "\n", python)) == ("ute(1, 2)", "id7")
    assert typed_through(shown, Cursor("x = cr", "\n", python)) is None  # typed something else
    assert typed_through(shown, Cursor("x = comp", "\ny\n", python)) is None  # suffix changed
    assert typed_through(shown, Cursor("x = compute(1, 2)", "\n", python)) is None  # all typed
    assert typed_through(None, Cursor("x = ", "\n", python)) is None


def test_a_block_cut_by_the_token_limit_ends_at_a_full_line():
    from codespec.stops import drop_partial_line

    text = "a = 1\n    b = 2\n    c = (3,"
    assert drop_partial_line(text, Mode.BLOCK, "max_tokens") == "a = 1\n    b = 2"
    assert drop_partial_line(text, Mode.BLOCK, "eos") == text
    assert drop_partial_line("x = (1,", Mode.LINE, "max_tokens") == "x = (1,"


def test_only_settled_text_is_streamed_in_block_mode():
    from codespec.completion import settled

    assert settled("x = 1", Mode.BLOCK) == "x = 1"  # the first line shows while it grows
    assert settled("x = 1\n    y = 2\n\n\ndef g", Mode.BLOCK) == "x = 1\n    y = 2"
    assert settled("x = 1\n    y", Mode.LINE) == "x = 1\n    y"


def test_a_one_line_completion_never_parses_the_file(monkeypatch):
    """Typing in the middle of a line, or a completion of the rest of a line, needs no syntax
    tree: a large file whose syntax error lies far above the cursor took tens of milliseconds
    to re-parse on every keystroke."""
    import codespec.stops as stops

    def no_parse(*args):
        raise AssertionError("parsed the file")

    monkeypatch.setattr(stops, "parse", no_parse)
    monkeypatch.setattr(stops, "has_syntax_error", no_parse)
    python = language_for("python")
    mid_line = Cursor("x = (\ndef f(a):\n    return g(a, ", ")\n", python)
    assert decide_mode(mid_line) is Mode.LINE
    checker = StopChecker(mid_line, Mode.LINE)
    assert [checker.cut(t) for t in ("b", "b, c", "b, c\n")] == [None, None, 4]
    assert checker.cut("b, c", final=True) is None
