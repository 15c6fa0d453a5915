"""Look-ahead on the ggml backend (``codespec/ggml/ahead.py``), on a tiny random GGUF in 4-bit
blocks: a prompt computed ahead is answered without a pass with the very logits its prefill
computes, the cache after it is the cache that prefill leaves, and a completion is the same
token for token whether or not it was looked ahead (hit, miss, interrupted).

"The same" is against the prefill the engine runs without a look-ahead: the prompt the text
holds, then the new prompt's few ids in one padded pass (a prefill from an empty cache chunks
the prompt differently, so its rows round differently)."""

import numpy as np
import pytest
from helpers import GGML_LIBRARY, GGML_MODULE, PreemptAfter, write_tiny_gguf

from codespec.engine import Cancelled, Engine, GenerationParams, StopSignal
from codespec.engine.policy import SpeculationPolicy

pytest.importorskip(GGML_MODULE)

from codespec.ggml.backend import GgmlModel  # noqa: E402
from codespec.ggml.llama import Settings  # noqa: E402

BASE = 1000  # token ids of ordinary text in the real vocabulary
PROMPT = [BASE + (7 * i + 3) % 89 for i in range(60)]
A, B, C, D, E = (BASE + k for k in (1, 2, 3, 4, 5))
# the prompts after typing: one more token; the last token replaced (typed text tokenized
# anew); two more tokens; one of them sharing the first with another
NEXT = [PROMPT + [A], PROMPT[:-1] + [B], PROMPT + [C, D], PROMPT + [C, E]]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("ggml-ahead") / "tiny-q4.gguf"
    return write_tiny_gguf(path, hidden=128, quantized=True, live_tokens=range(BASE, BASE + 6))


def model(path, n_ctx: int = 1024) -> GgmlModel:
    return GgmlModel(str(path), settings=Settings(n_ctx=n_ctx, n_seq_max=19, library=GGML_LIBRARY))


def after_prompt(path, ids: list[int]) -> tuple[np.ndarray, GgmlModel]:
    """What the engine computes for ``ids`` without a look-ahead: PROMPT cached, then ``ids``."""
    fresh = model(path)
    fresh.prefill(PROMPT)
    return fresh.prefill(ids)[0], fresh


def looked_ahead(path) -> GgmlModel:
    target = model(path)
    logits, _, _ = target.prefill(PROMPT)
    calls = target.forward_calls
    rows = target.ahead.look_ahead(NEXT, known={tuple(PROMPT): logits})
    # the root is PROMPT[:-1]; a, b, c and d in a first pass (four rows), e after c in a
    # second, on the cells of the first
    assert rows == 5 and target.forward_calls - calls == 0  # (look-ahead passes are not counted)
    assert target.ahead.standing is not None and target.ahead.standing.root == len(PROMPT) - 1
    return target


@pytest.mark.parametrize("ids", [PROMPT, *NEXT])
def test_a_prompt_computed_ahead_is_answered_without_a_pass_with_its_own_logits(tiny_gguf, ids):
    target = looked_ahead(tiny_gguf)
    assert target.ahead.looked_ahead(ids)
    logits, reused, computed = target.prefill(ids)
    assert (reused, computed) == (len(ids), 0) and target.ahead.standing is None
    expected, fresh = after_prompt(tiny_gguf, ids)
    assert np.array_equal(logits, expected)
    assert target.ahead.sequence() == ids == target.ids
    # and the next passes see the cache that prefill leaves
    assert np.array_equal(target.forward([BASE + 7, BASE + 8]), fresh.forward([BASE + 7, BASE + 8]))
    assert np.array_equal(target.forward([BASE + 9]), fresh.forward([BASE + 9]))


@pytest.mark.parametrize(
    "ids", [PROMPT + [C, BASE + 6], PROMPT + [BASE + 50], PROMPT[:-2] + [A, B], PROMPT[:20]]
)
def test_any_other_prompt_gets_what_its_prefill_computes(tiny_gguf, ids):
    target = looked_ahead(tiny_gguf)
    assert not target.ahead.looked_ahead(ids)
    logits, reused, computed = target.prefill(ids)
    assert reused + computed == len(ids) and computed >= 1
    expected, fresh = after_prompt(tiny_gguf, ids)
    assert np.array_equal(logits, expected)
    assert np.array_equal(target.forward([BASE + 7]), fresh.forward([BASE + 7]))


def test_a_prompt_whose_prefill_would_chunk_it_is_not_looked_ahead(tiny_gguf):
    """More new ids than a padded pass holds: its prefill computes some of them in a chunk,
    whose rows round otherwise, so the look-ahead leaves it alone."""
    target = model(tiny_gguf)
    logits, _, _ = target.prefill(PROMPT)
    far = PROMPT + [A, B, C, D, E]
    assert target.ahead.look_ahead([far], known={tuple(PROMPT): logits}) == 0
    assert not target.ahead.looked_ahead(far) and target.ahead.looked_ahead(PROMPT)


def test_an_interrupted_look_ahead_leaves_a_usable_cache(tiny_gguf):
    target = model(tiny_gguf)
    logits, _, _ = target.prefill(PROMPT)
    with pytest.raises(Cancelled):
        target.ahead.look_ahead(NEXT, {tuple(PROMPT): logits}, PreemptAfter(0))
    assert target.ahead.looked_ahead(PROMPT) and not target.ahead.looked_ahead(NEXT[0])
    logits, reused, computed = target.prefill(NEXT[0])
    assert (reused, computed) == (len(PROMPT), 1)
    assert np.array_equal(logits, after_prompt(tiny_gguf, NEXT[0])[0])


def test_parked_look_ahead_cells_are_given_back_and_the_text_stays(tiny_gguf):
    """Look-aheads one after another, each ending on one of its branches: the others' cells
    are parked, compaction gives them back, and every prompt's logits stay those of prefills
    without a look-ahead."""
    target, plain = model(tiny_gguf, n_ctx=256), model(tiny_gguf, n_ctx=256)
    text = list(PROMPT)
    logits, _, _ = target.prefill(text)
    plain.prefill(text)
    parked = []
    for step in range(80):
        nexts = [text + [BASE + (step + k) % 6] for k in range(3)]
        target.ahead.look_ahead(nexts, known={tuple(text): logits})
        text = nexts[step % 3]
        logits, _, computed = target.prefill(text)
        assert computed == 0 and target.ids == text
        assert np.array_equal(logits, plain.prefill(text)[0])
        parked.append(target.cells.parked)
    assert max(parked) > parked[-1]  # compacted on the way
    assert np.array_equal(target.forward([BASE]), plain.forward([BASE]))


def engine_for(target: GgmlModel) -> Engine:
    engine = Engine(target, policy=SpeculationPolicy())
    engine.calibration.pad_single_row = False  # ggml's padded rows are exact (``rows_are_exact``)
    return engine


def next_of(logits: np.ndarray) -> list[list[int]]:
    """The look-ahead's choice: the prompt extended by each of the 5 likeliest tokens."""
    return [PROMPT + [t] for t in np.argsort(logits)[::-1][:5].tolist()]


@pytest.mark.parametrize("speculate", [False, True])
def test_completions_are_the_same_with_and_without_look_ahead(tiny_gguf, speculate):
    params = GenerationParams(max_tokens=12, speculate=speculate)
    reference = engine_for(model(tiny_gguf))
    first = reference.generate(PROMPT, params).run()
    candidates = next_of(reference.warm_ups.prompt_logits[1])
    for ids in [*candidates, PROMPT[:30]]:
        plain = engine_for(model(tiny_gguf))
        plain.generate(PROMPT, params).run()
        expected = plain.generate(ids, params).run()

        engine = engine_for(model(tiny_gguf))
        assert engine.generate(PROMPT, params).run() == first
        rows = engine.look_ahead(PROMPT, next_of, StopSignal())
        # the 5 branches, and after each the target's choice there (unless that ends the text)
        assert 5 < rows <= 10
        assert engine.look_ahead(PROMPT, next_of, StopSignal()) == 0  # done already
        generation = engine.generate(list(ids), params)
        assert generation.run() == expected
        assert generation.stats.ahead == (ids in candidates)


def test_a_cancelled_look_ahead_keeps_no_branch_and_changes_no_completion(tiny_gguf):
    params = GenerationParams(max_tokens=8)
    reference = engine_for(model(tiny_gguf))
    reference.generate(PROMPT, params).run()
    ids = next_of(reference.warm_ups.prompt_logits[1])[0]
    expected = reference.generate(ids, params).run()
    engine = engine_for(model(tiny_gguf))
    engine.generate(PROMPT, params).run()
    assert engine.look_ahead(PROMPT, next_of, PreemptAfter(0)) == 0
    assert not any(
        engine.target.ahead.looked_ahead(c) for c in next_of(engine.warm_ups.prompt_logits[1])
    )
    generation = engine.generate(ids, params)
    assert generation.run() == expected and not generation.stats.ahead


def test_the_fast_configuration_looks_ahead_in_unpadded_passes(tiny_gguf):
    """Without exact rows (the default): the look-ahead runs, its passes are not padded to
    whole groups, a prompt computed ahead is served without a pass, and the completion from it
    is the target's own choice after those logits, with the cache it leaves usable."""
    target = GgmlModel(
        str(tiny_gguf),
        padded=False,
        settings=Settings(n_ctx=1024, n_seq_max=19, library=GGML_LIBRARY),
    )
    engine = Engine(target, policy=SpeculationPolicy(), exact=False)
    engine.calibrate()
    assert not engine.calibration.pad_single_row
    params = GenerationParams(max_tokens=8)
    engine.generate(PROMPT, params).run()
    widths: list[int] = []
    decode = target.llama.decode
    target.llama.decode = lambda nodes, abort=None: (
        widths.append(len(nodes)) or decode(nodes, abort)
    )
    assert engine.look_ahead(PROMPT, next_of, StopSignal()) > 5
    assert any(w % 4 for w in widths)  # (padded passes are whole groups of four rows)
    ids = next_of(engine.warm_ups.prompt_logits[1])[0]
    logits = target.ahead.ahead_logits(ids)
    assert logits is not None
    generation = engine.generate(ids, params)
    tokens = generation.run()
    assert generation.stats.ahead and tokens[0] == int(np.argmax(logits))
    assert len(engine.generate(ids + tokens, params).run()) > 0
