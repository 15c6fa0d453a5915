"""The HTTP front's reading and writing (``server/http/wire.py``) and the clients' own stop
conditions (``client_stops.py``), on the request shapes llama.vim, llama.vscode and Zed send
(``requests/``: each file names the source and commit it was taken from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codespec.client_stops import ClientStops, EarliestCut
from codespec.server.http import answers, wire
from codespec.server.http.answers import Answer
from codespec.server.http.wire import BadRequest

REQUESTS = Path(__file__).parent / "requests"


def captured(name: str) -> dict:
    return json.loads((REQUESTS / f"{name}.json").read_text())


def test_llama_vim_request_reads_as_a_cursor_with_its_limits():
    ask = wire.read_infill(captured("llama_vim_fim")["body"])
    assert ask.prefix.endswith('"""The area of a circle."""\n    return ')
    assert ask.suffix.startswith("\n\n\ndef circumference")
    assert ask.extra_files == (
        ("sphere.py", captured("llama_vim_fim")["body"]["input_extra"][0]["text"]),
    )
    assert (ask.max_tokens, ask.min_indent, ask.predict_s) == (128, 4, 0.25)
    assert ask.temperature == 0.0  # its samplers are llama-server's; codespec stays greedy
    assert ask.response_fields is not None and "timings/prompt_n" in ask.response_fields
    assert not ask.prepare_only and not ask.stream


def test_requests_that_predict_nothing_only_prepare():
    assert wire.read_infill(captured("llama_vim_ring")["body"]).prepare_only
    assert wire.read_infill(captured("llama_vscode_prepare")["body"]).prepare_only
    assert not wire.read_infill(captured("llama_vscode_fim")["body"]).prepare_only


def test_zeds_request_reads_as_a_prompt_and_its_fim_markers_as_a_cursor():
    ask = wire.read_openai(captured("zed_fim_qwen")["body"])
    assert ask.prompt is not None and ask.max_tokens == 64 and len(ask.stop_words) == 14
    parts = wire.fim_parts(ask.prompt, "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    assert parts == ("def area(radius):\n    return ", "\n\nprint(area(2))\n")
    # anything but the bare form is continued as it is
    assert (
        wire.fim_parts("x" + ask.prompt, "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
        is None
    )
    assert (
        wire.fim_parts(
            "<|fim_prefix|>a<|fim_middle|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
        )
        is None
    )
    twice = "<|fim_prefix|>a<|fim_suffix|>b<|fim_suffix|>c<|fim_middle|>"
    assert wire.fim_parts(twice, "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>") is None


def test_openai_suffix_is_a_cursor():
    ask = wire.read_openai({"prompt": "def f(", "suffix": ")\n", "max_tokens": 8})
    assert (ask.prompt, ask.prefix, ask.suffix, ask.max_tokens) == (None, "def f(", ")\n", 8)


@pytest.mark.parametrize(
    "read, body, says",
    [
        (wire.read_infill, [], "JSON object"),
        (wire.read_infill, {"input_prefix": 3}, "input_prefix"),
        (wire.read_infill, {"input_extra": {"text": "x"}}, "input_extra"),
        (wire.read_infill, {"input_extra": [{"text": 1}]}, "input_extra[0]"),
        (wire.read_infill, {"n_predict": "many"}, "n_predict"),
        (wire.read_infill, {"n_predict": True}, "n_predict"),
        (wire.read_infill, {"stop": [1]}, "stop"),
        (wire.read_infill, {"stop": ["x"] * 100}, "stop"),
        (wire.read_infill, {"temperature": float("nan")}, "temperature"),
        (wire.read_infill, {"stream": "yes"}, "stream"),
        (wire.read_infill, {"n_indent": "4"}, "n_indent"),
        (wire.read_completion, {}, "prompt"),
        (wire.read_completion, {"prompt": [1, 2, 3]}, "token ids"),
        (wire.read_openai, {"prompt": "x", "n": 3}, "n must be 1"),
        (wire.read_openai, {"prompt": "x", "echo": True}, "echo"),
        (wire.read_openai, {"prompt": ["a", "b"]}, "batches"),
    ],
)
def test_bad_fields_are_named_in_one_line(read, body, says):
    with pytest.raises(BadRequest) as caught:
        read(body)
    message = str(caught.value)
    assert says in message and "\n" not in message and caught.value.status == 400


def test_huge_text_is_refused_as_too_large():
    with pytest.raises(BadRequest) as caught:
        wire.read_infill({"input_prefix": "x" * (wire.MAX_TEXT_CHARS + 1)})
    assert caught.value.status == 413


def test_limits_are_bounded():
    ask = wire.read_infill({"n_predict": 10**9, "t_max_predict_ms": 10**12, "n_indent": -5})
    assert ask.max_tokens == wire.MAX_PREDICT and ask.predict_s == 3600 and ask.min_indent == 0
    assert wire.read_infill({"n_predict": -1}).max_tokens is None  # -1: codespec's own limit
    assert wire.read_infill({"seed": -1}).seed is None


def test_response_fields_project_paths_as_llama_server_does():
    answer = Answer("x = 1", prompt_tokens=50, cached_tokens=20, predicted_tokens=4)
    answer.prompt_ms, answer.predicted_ms = 300.0, 40.0
    fields = ("content", "timings/prompt_n", "timings/predicted_per_second", "truncated", "nope/x")
    out = answers.llama_answer(answer, fields)
    assert out == {
        "content": "x = 1",
        "timings/prompt_n": 30,  # the prompt tokens computed, not those reused
        "timings/predicted_per_second": 100.0,
        "truncated": False,
    }
    assert answers.llama_answer(answer, ("",)) == {}  # llama.vim's ring request asks for nothing
    whole = answers.llama_answer(answer)
    assert whole["stop"] is True and whole["tokens_cached"] == 20 and whole["has_new_line"] is False


def test_openai_answer_and_error_shapes():
    out = answers.openai_answer(
        Answer("y", stop_type="limit", prompt_tokens=3, predicted_tokens=2), "cmpl-1"
    )
    assert out["object"] == "text_completion" and out["choices"][0]["text"] == "y"
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert answers.error_body("no", 401)["error"]["type"] == "authentication_error"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stop_words_cut_before_the_first_and_partial_words_are_held_back():
    stops = ClientStops(words=("\n\n", "END"))
    assert stops.cut("a = 1\nb = 2") is None
    assert stops.cut("a = 1\n\nb") == 5
    assert stops.cut("xEND\n\n") == 1
    assert (
        stops.held_back("abc\n") == 1
        and stops.held_back("abcEN") == 2
        and stops.held_back("ab") == 0
    )


def test_n_indent_ends_before_a_line_indented_less():
    stops = ClientStops(min_indent=4)
    assert stops.cut("x\n    y\n        z") is None
    assert stops.cut("x\n    y\n  ") is None  # its indent is not known until it shows text
    assert stops.cut("x\n    y\nz = 1") == len("x\n    y")
    assert stops.cut("x\n\n\tz") == len("x\n")  # (a tab counts as one, as llama-server counts)


def test_the_time_limit_ends_at_a_line_end_once_it_has_passed():
    clock = Clock()
    stops = ClientStops(predict_s=0.25, clock=clock)
    assert stops.cut("a\nb") is None  # the first call starts the clock
    clock.now = 0.3
    assert stops.cut("a\nb") == 1
    assert stops.cut("ab") is None  # no line has ended: go on
    assert stops.cut("a\nb", final=True) is None  # a finished text is not judged by the clock


def test_earliest_cut_wins():
    assert EarliestCut([ClientStops(words=("c",)), ClientStops(words=("b",))]).cut("abc") == 1
    assert EarliestCut([]).cut("abc") is None
    assert not ClientStops() and ClientStops(words=("x",))


def test_a_stream_holds_back_only_what_may_still_change():
    from codespec.server.http.front import streamable

    at_cursor = wire.read_infill({"input_prefix": "f("})
    assert streamable("x, y)  ", at_cursor, None) == "x, y"  # ")" may already follow the cursor
    assert streamable("a\n    b = [1", at_cursor, None) == "a\n    b = [1"
    raw = wire.read_completion({"prompt": "p", "stop": ["END"]})
    stops = ClientStops(words=raw.stop_words)
    assert streamable("x)  E", raw, stops) == "x)  "  # "E" may begin "END"; a prompt keeps ")"


def test_in_a_document_that_parsed_a_stream_sends_only_lines_it_parses_with():
    """Shaping cuts a completion back to its longest line prefix that the document parses
    with (a single line: all or nothing), so only such lines may go out before the end."""
    from codespec.server.http.front import streamable

    at_cursor = wire.read_infill({"input_prefix": "def f():\n    "})

    def parses(text: str) -> bool:
        return text.count("(") == text.count(")")

    assert streamable("x = g(1)\ny = g(", at_cursor, None, parses) == "x = g(1)"
    assert streamable("x = g(1", at_cursor, None, parses) == ""  # one line: not before its end
    assert streamable("a   \nb = g(2)\nc", at_cursor, None, parses) == "a\nb = g(2)"


def test_a_chat_is_read_with_text_parts_and_refused_otherwise():
    from codespec.server.http.wire import read_chat

    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
    ask = read_chat({"messages": [{"role": "user", "content": parts}], "stream": True})
    assert ask.messages == (("user", "Hello, world"),) and ask.chat and ask.openai
    assert ask.max_tokens is None and ask.stream and not ask.include_usage
    for body in (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        {"messages": [{"role": "tool", "content": "x"}]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
        {"messages": [{"role": "user", "content": "x"}], "stream_options": "yes"},
        {"messages": "hello"},
    ):
        with pytest.raises(BadRequest) as refused:
            read_chat(body)
        assert "\n" not in str(refused.value)
