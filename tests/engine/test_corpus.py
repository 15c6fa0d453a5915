"""The workspace drafter: corpus lookup against a brute-force search, its bounds, and the
keystone again: with a corpus proposing, greedy output is what plain decoding gives."""

import random

import numpy as np
import pytest
from helpers import naive_greedy
from test_engine import PROMPTS, make_engine

from codespec.engine import GenerationParams
from codespec.engine.corpus import GRAM, CorpusProposer, TokenCorpus


def brute_force(segments: list[list[int]], context: list[int], span: int) -> tuple[int, set]:
    """The longest match (>= GRAM) of the context's end in any segment, and the continuations
    that follow its occurrences (each cut at ``span`` and at its segment's end)."""
    best, found = 0, set()
    for segment in segments:
        for end in range(GRAM, len(segment)):  # a match ending before position ``end``
            n = 0
            while n < min(end, len(context)) and segment[end - 1 - n] == context[-1 - n]:
                n += 1
            if n < GRAM:
                continue
            follow = tuple(segment[end : end + span])
            if n > best:
                best, found = n, {follow}
            elif n == best:
                found.add(follow)
    return best, found


def test_lookup_finds_the_longest_matches_as_a_brute_force_search_does():
    rng = random.Random(7)
    for trial in range(200):
        segments = [[rng.randrange(6) for _ in range(rng.randrange(0, 60))] for _ in range(4)]
        corpus = TokenCorpus()
        for i, segment in enumerate(segments):
            corpus.put(f"f{i}", segment)
        corpus.refresh()
        context = [rng.randrange(6) for _ in range(rng.randrange(1, 20))]
        best, expected = brute_force(segments, context, span=5)
        found = corpus.lookup(context, span=5, branches=100, max_match=100)
        if best == 0 or expected == {()}:
            assert found == [], trial
            continue
        assert {c.evidence for c in found} == {best}, trial
        # distinct continuations, none a prefix of an earlier one
        assert {tuple(c.tokens) for c in found} <= expected, trial
        assert any(e[: len(c.tokens)] == tuple(c.tokens) for c in found for e in expected)
        longest_expected = max(expected, key=len)
        assert any(longest_expected[: len(c.tokens)] == tuple(c.tokens) for c in found)


def test_a_continuation_stops_at_its_segment_end_and_never_spans_two():
    corpus = TokenCorpus()
    corpus.put("a", [1, 2, 3, 4])
    corpus.put("b", [9, 9, 9, 9])
    corpus.refresh()
    assert [c.tokens for c in corpus.lookup([7, 1, 2, 3], span=8, branches=3)] == [[4]]
    assert corpus.lookup([2, 3, 4], span=8, branches=3) == []  # nothing follows in its file


def test_segments_are_replaced_and_removed_and_the_lookup_sees_it_after_a_refresh():
    corpus = TokenCorpus()
    corpus.put("a", [1, 2, 3, 4, 5])
    corpus.refresh()
    corpus.put("a", [1, 2, 3, 8, 9])
    assert corpus.lookup([1, 2, 3], 4, 3)[0].tokens == [4, 5]  # the last snapshot until...
    corpus.refresh()
    assert corpus.lookup([1, 2, 3], 4, 3)[0].tokens == [8, 9]
    corpus.remove("a")
    corpus.refresh()
    assert corpus.lookup([1, 2, 3], 4, 3) == [] and corpus.total == 0


def test_the_corpus_stays_within_its_token_bound():
    corpus = TokenCorpus(max_tokens=100)
    assert corpus.put("a", list(range(60)))
    assert not corpus.put("b", list(range(50)))  # would pass the bound: not added
    assert corpus.put("a", list(range(90)))  # replacing counts the new size only
    assert corpus.total == 90 and set(corpus.segments) == {"a"}
    corpus.refresh()
    assert corpus.memory_bytes() <= 100 * 20 + 64


def test_rebuilds_are_throttled():
    corpus = TokenCorpus(min_refresh_s=60.0)
    corpus.put("a", [1, 2, 3, 4])
    assert corpus.refresh_if_due()  # never built: due
    corpus.put("a", [1, 2, 3, 5])
    assert not corpus.refresh_if_due()  # changed, but built a moment ago
    assert not TokenCorpus().refresh_if_due()  # nothing changed


def test_ids_past_the_key_width_and_a_huge_vocabulary_are_exact():
    corpus = TokenCorpus()
    big = [151_000, 2_000_000, 151_000, 7]
    corpus.put("a", big + [42])
    corpus.refresh()
    assert corpus.lookup(big, 3, 3)[0].tokens == [42]
    assert corpus.lookup([151_000, 2_000_000, 151_001, 7], 3, 3) == []


def test_a_bigger_corpus_is_searched_fast_enough_for_every_pass():
    """Not a timing assertion: the lookup reads at most MAX_HITS hits however common the
    3-gram is, so a corpus of one repeated phrase answers like any other."""
    corpus = TokenCorpus()
    corpus.put("a", [1, 2, 3] * 100_000)
    corpus.refresh()
    found = corpus.lookup([1, 2, 3, 1, 2, 3], span=6, branches=3)
    assert found and found[0].tokens == [1, 2, 3, 1, 2, 3] and found[0].evidence == 6


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("corpus_kind", ["right", "wrong", "mixed"])
@pytest.mark.parametrize("draft", [False, True])
def test_speculation_with_a_corpus_equals_naive_greedy(
    target_model, other_model, prompt, corpus_kind, draft
):
    reference = naive_greedy(target_model, prompt, 40)
    rng = np.random.default_rng(3)
    corpus = TokenCorpus()
    right = prompt[-4:] + reference  # what the target will write, after the prompt's end
    wrong = prompt[-4:] + [int(t) for t in rng.integers(0, 100, 40)]
    if corpus_kind in ("right", "mixed"):
        corpus.put("right", right)
    if corpus_kind in ("wrong", "mixed"):
        corpus.put("wrong", wrong)
        corpus.put("noise", [int(t) for t in rng.integers(0, 100, 2000)])
    corpus.refresh()
    engine = make_engine(target_model, other_model if draft else None, draft_mode="on")
    params = GenerationParams(max_tokens=40, use_draft=draft, corpora=(corpus,))
    generation = engine.generate(prompt, params)
    assert generation.run() == reference
    stats = generation.stats
    if corpus_kind != "wrong":  # (wrong spans may be priced out: nothing to assert there)
        assert stats.proposed["workspace"] > 0
    if corpus_kind == "right":
        assert stats.accepted["workspace"] > 0
        assert stats.target_passes < 39
    if corpus_kind == "wrong":
        assert stats.accepted["workspace"] <= stats.proposed["workspace"]


def test_the_proposer_takes_the_corpus_with_the_longer_match():
    near, far = TokenCorpus(), TokenCorpus()
    near.put("a", [5, 6, 7, 1])
    far.put("b", [4, 5, 6, 7, 2])
    near.refresh()
    far.refresh()
    proposer = CorpusProposer()
    assert proposer.begin(GenerationParams(corpora=(near, far)))
    assert proposer.propose([4, 5, 6, 7], 4).candidates[0].tokens == [2]
    assert proposer.begin(GenerationParams(corpora=(near,)))
    assert proposer.propose([4, 5, 6, 7], 4).candidates[0].tokens == [1]
    assert not proposer.begin(GenerationParams())  # no corpora: it proposes nothing
