"""A warm-up gives way to a request: between two decoder layers when the request is elsewhere,
at the end of the running prefill chunk when the request is at the warmed place (that chunk is
the request's own prefill). A request's wait is capped once the model is ready, not while it
loads.

A real worker and engine on the tiny pair; every decoder layer of the target is slowed down, so
that a warm-up's prefill chunk is long enough to be caught in the middle.
"""

import threading
import time

import pytest

from codespec.completion import CompletionOptions
from codespec.languages import language_for
from codespec.runtime import load_pair
from codespec.server.kinds import CompletionJob, WarmJob
from codespec.server.places import AnchorSlot
from codespec.server.worker import Worker
from codespec.stops import Cursor, Mode
from codespec.torch_backend import decoder

LAYER_S = 0.1  # added after each decoder layer
BODY = "".join(f"def f{i}(x):\n    return x * {i} + len(str(x))\n\n" for i in range(40))
OPTIONS = CompletionOptions(max_tokens=3, mode=Mode.LINE, speculate=False)


@pytest.fixture(scope="module")
def layers_ran():
    """Every target decoder layer slowed; the row counts of the layers that ran."""
    ran: list[int] = []
    layer = decoder.decoder_layer

    def slow_layer(*args, **kwargs):
        out = layer(*args, **kwargs)
        ran.append(out.shape[1])
        time.sleep(LAYER_S)  # then the pass asks whether to go on
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decoder, "decoder_layer", slow_layer)
        yield ran


@pytest.fixture(scope="module")
def slow_pair(tiny_manifest, layers_ran):
    """The tiny pair, each target layer slowed; and the row counts of the layers that ran."""
    return slowed(load_pair(str(tiny_manifest), progress=lambda m: None)), layers_ran


@pytest.fixture(scope="module")
def slow_w8a8_pair(tiny_manifest, layers_ran):
    """The same with w8a8 layers (the CPU's default kernels): one-row passes are exact there,
    so the worker computes next keystrokes ahead."""
    pair = load_pair(str(tiny_manifest), progress=lambda m: None, quantize="w8a8")
    return slowed(pair), layers_ran


def slowed(pair):
    pair.engine.calibration.prefill_rate = 100_000.0  # a warm-up's whole prompt goes in one chunk
    assert pair.engine.target._lean()  # its passes run decoder.decoder_layer, layer by layer
    return pair


@pytest.fixture
def worker(slow_pair):
    yield from started(slow_pair[0])


@pytest.fixture
def ahead_worker(slow_w8a8_pair):
    yield from started(slow_w8a8_pair[0])


def started(pair):
    pair.engine.target.reset()
    worker = Worker(lambda: pair)
    yield worker
    worker.stop()
    worker.thread.join(timeout=60)  # its last warm-up or look-ahead too: the pair is shared


def place(uri: str, text: str, line: int, typed: str = "", **more) -> dict:
    """The fields of a job at the start of ``line`` of ``text``, after typing ``typed`` there."""
    lines = text.splitlines(keepends=True)
    prefix = "".join(lines[:line])
    cursor = Cursor(prefix + typed, text[len(prefix) :], language_for("python"))
    fields = dict(session=1, uri=uri, edits=1, cursor=cursor, options=OPTIONS, path=uri[8:])
    return fields | more


def request(uri: str, text: str, line: int, typed: str = "", **more) -> CompletionJob:
    """A completion request at ``place``."""
    return CompletionJob(**place(uri, text, line, typed, **more))


def first_chunk_rows(ran: list[int], timeout: float = 30.0) -> int:
    """Wait until the warm-up's first layer has run; the rows of its chunk."""
    deadline = time.monotonic() + timeout
    while not ran:
        assert time.monotonic() < deadline, "the warm-up never ran"
        time.sleep(0.01)
    return ran[0]


def test_a_request_elsewhere_stops_the_warm_up_between_layers(slow_pair, worker):
    _, ran = slow_pair
    ran.clear()
    worker.warm(WarmJob(**place("file:///a.py", BODY, 60)))
    rows = first_chunk_rows(ran)
    assert rows > 300  # the warm-up's prompt, in one chunk
    job = request("file:///b.py", "import os\n\n\ndef main():\n    \n", 4)
    assert worker.submit(job).result(timeout=60) is not None
    assert ran.count(rows) == 1  # layer 0 of the chunk ran; layer 1 never did
    assert ran[1] < rows  # the next layer to run was the request's
    assert worker.stats.warm_preempted == 1 and worker.stats.warm_tokens == 0


def test_a_request_at_the_warmed_place_lets_the_chunk_finish_and_reuses_it(slow_pair, worker):
    _, ran = slow_pair
    ran.clear()
    worker.warm(WarmJob(**place("file:///c.py", BODY, 60)))
    rows = first_chunk_rows(ran)
    job = request("file:///c.py", BODY, 60)
    assert worker.submit(job).result(timeout=60) is not None
    assert ran[:2] == [rows, rows]  # both layers of the warm-up's chunk ran
    assert worker.stats.warm_tokens == rows
    assert worker.stats.last_prompt["prefill_tokens"] <= 2
    assert worker.stats.last_prompt["cached_tokens"] >= rows


def test_closing_the_document_stops_its_warm_up_between_layers(slow_pair, worker):
    _, ran = slow_pair
    ran.clear()
    worker.warm(WarmJob(**place("file:///d.py", BODY, 60)))
    rows = first_chunk_rows(ran)
    worker.forget_document(1, "file:///d.py")
    worker.warm(WarmJob(**place("file:///e.py", "x = 1\n", 1)))  # runs once d's has stopped
    deadline = time.monotonic() + 30
    while worker.stats.warmed < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.stats.warmed == 2
    assert ran.count(rows) == 1


def test_a_warm_up_where_the_user_types_extends_the_typing_prompt(slow_pair, worker):
    """Typing at a completed place appends to its anchored prompt (``prompt.Anchor``); a
    warm-up there prefills that prompt, not a fresh one that would re-anchor the place."""
    slot = AnchorSlot()
    job = request("file:///f.py", BODY, 60, anchor=slot)
    assert worker.submit(job).result(timeout=60) is not None
    anchor = slot.anchor
    before = worker.stats.warm_tokens
    worker.warm(WarmJob(**place("file:///f.py", BODY, 60, typed="de", anchor=slot)))
    deadline = time.monotonic() + 30
    while worker.stats.warmed < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.stats.warmed == 1
    assert worker.stats.warm_tokens - before <= 2  # the typed tokens, no more
    assert slot.anchor is anchor


@pytest.mark.parametrize("elsewhere", [True, False])
def test_a_newer_request_stops_the_prefill_of_the_previous_one(
    slow_pair, worker, elsewhere, monkeypatch
):
    """On another line the previous request's prefill chunk stops between two layers; on the
    same line it finishes (the new request's prompt shares it) and the new request reuses it."""
    pair, ran = slow_pair
    monkeypatch.setattr(pair.engine.target, "prefill_chunk", 100_000)  # one chunk per prompt
    ran.clear()
    first = request("file:///g.py", BODY, 60, anchor=AnchorSlot())
    answer = worker.submit(first)
    rows = first_chunk_rows(ran)
    second = CompletionJob(
        **place("file:///g.py", BODY, 30 if elsewhere else 60, anchor=AnchorSlot())
    )
    assert worker.submit(second).result(timeout=60) is not None
    assert answer.result(timeout=60) is None  # superseded: answered empty
    assert first.signal.preempted == elsewhere
    assert ran.count(rows) == (1 if elsewhere else 2)
    if not elsewhere:
        assert worker.stats.last_prompt["cached_tokens"] >= rows - 1  # all but the last token


def test_the_queue_deadline_counts_from_when_the_model_was_ready(slow_pair):
    """A slow load (a cold disk, a busy machine) must not drop the requests made meanwhile:
    the editor asked once and shows the load; once the model is ready it gets its answer. Once
    the model is ready, a request left waiting behind a long one is dropped as before."""
    pair, ran = slow_pair
    pair.engine.target.reset()
    loaded = threading.Event()

    def get_pair():
        loaded.wait()
        return pair

    worker = Worker(get_pair, queue_deadline_s=0.5)
    try:
        # the worker takes the first request and waits for the load; the second, newer,
        # waits in the queue (the first is superseded: answered empty when the load ends)
        superseded = worker.submit(request("file:///h.py", "import os\n\n\ndef f():\n", 4))
        time.sleep(0.2)  # the worker has taken it
        during_load = worker.submit(request("file:///h.py", "import os\n\n\ndef g():\n", 4))
        time.sleep(1.5)  # three deadlines while "loading"
        loaded.set()
        assert superseded.result(timeout=60) is None
        assert during_load.result(timeout=60) is not None
        assert worker.stats.expired == 0
        ran.clear()
        long = worker.submit(request("file:///j.py", BODY, 60))
        first_chunk_rows(ran)  # it runs: the next request waits behind it
        behind = worker.submit(request("file:///k.py", "x = 1\n", 1))
        assert long.result(timeout=60) is not None
        assert behind.result(timeout=60) is None and worker.stats.expired == 1
    finally:
        worker.stop()


AHEAD = CompletionOptions(max_tokens=3, mode=Mode.LINE, speculate=False, look_ahead_keys=4)


def wait_for(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def layers_at_answer(future, ran: list[int]) -> list[int]:
    """Filled with ``len(ran)`` the moment the worker answers (in its own thread, before it
    goes on to a look-ahead whose layers would add to ``ran``)."""
    mark: list[int] = []
    future.add_done_callback(lambda _: mark.append(len(ran)))
    return mark


def likely_chars(pair, shown: str) -> list[str]:
    """The characters the look-ahead computes after the last request (``lookahead.py``)."""
    from codespec.lookahead import likely_next_chars

    return likely_next_chars(
        pair.tokenizer, pair.engine.warm_ups.prompt_logits[1], 4, skip=shown[:1]
    )


def test_after_an_answer_the_next_keystrokes_are_computed_ahead_and_answered_without_a_pass(
    slow_w8a8_pair, ahead_worker
):
    """While the user reads the answer, the worker computes the likeliest next keystrokes; a
    request after one of them starts from its logits (its first token needs no pass), and gets
    the completion it gets without look-ahead."""
    pair, ran = slow_w8a8_pair
    assert not pair.engine.calibration.pad_single_row  # quantized: one-row passes are exact
    slot = AnchorSlot()
    first = ahead_worker.submit(request("file:///l.py", BODY, 60, anchor=slot, options=AHEAD))
    shown = first.result(timeout=60).text
    wait_for(lambda: ahead_worker.stats.looked_ahead == 1)
    chars = likely_chars(pair, shown)
    assert len(chars) >= 2 and ahead_worker.stats.ahead_rows >= len(chars)
    ran.clear()
    typed = place("file:///l.py", BODY, 60, typed=chars[1], anchor=slot, options=AHEAD)
    answer = ahead_worker.submit(CompletionJob(**typed))
    layers = layers_at_answer(answer, ran)
    result = answer.result(timeout=60)
    assert ahead_worker.stats.ahead_hits == 1 and result.stats.ahead
    assert result.stats.prefill_tokens == 0
    # no prefill pass, nor a first decoding pass (the token after the prompt was computed
    # ahead too, unless it ended the text): the layers of the other decoding passes only
    assert layers == [2 * max(0, result.stats.target_passes - 1)]

    ahead_worker.stop()  # (the look-ahead after that answer runs on the same pair: wait it out)
    ahead_worker.thread.join(timeout=60)
    pair.engine.target.reset()  # the same keystroke, nothing computed ahead
    plain = Worker(lambda: pair)
    try:
        again = {**typed, "options": OPTIONS, "anchor": AnchorSlot(slot.anchor)}
        expected = plain.submit(CompletionJob(**again)).result(timeout=60)
    finally:
        plain.stop()
    assert not expected.stats.ahead and expected.text == result.text


def test_a_request_stops_a_look_ahead_between_layers(slow_w8a8_pair, ahead_worker):
    pair, ran = slow_w8a8_pair
    slot = AnchorSlot()
    shown = ahead_worker.submit(request("file:///m.py", BODY, 60, anchor=slot, options=AHEAD))
    at_answer = layers_at_answer(shown, ran)
    shown.result(timeout=60)
    start = at_answer[0]
    wait_for(lambda: len(ran) > start)  # the look-ahead's first pass has begun (layer 0 ran)
    width = ran[start]
    assert width >= 2  # a tree of next keystrokes, not a one-row pass
    typed = place("file:///m.py", BODY, 60, typed="\t\t", anchor=slot, options=AHEAD)
    assert ahead_worker.submit(CompletionJob(**typed)).result(timeout=60) is not None
    assert ran[start + 1] != width  # layer 1 of the look-ahead never ran: the request's did
    assert ahead_worker.stats.looked_ahead == 0 and ahead_worker.stats.ahead_hits == 0


def test_no_look_ahead_when_it_is_off(slow_w8a8_pair, ahead_worker):
    """Off, nothing is looked ahead; then, on this very worker, the same request with the
    look-ahead on is (so the count read below is one that moves)."""
    pair, ran = slow_w8a8_pair
    before = ahead_worker.stats.looked_ahead
    job = request("file:///n.py", BODY, 60, anchor=AnchorSlot())  # look_ahead_keys=0
    assert ahead_worker.submit(job).result(timeout=60) is not None
    time.sleep(1.0)
    assert ahead_worker.stats.looked_ahead == before and pair.engine.target.ahead.standing is None
    on = request("file:///n2.py", BODY, 60, anchor=AnchorSlot(), options=AHEAD)
    assert ahead_worker.submit(on).result(timeout=60) is not None
    wait_for(lambda: ahead_worker.stats.looked_ahead == before + 1)
