"""Speculative edits (``engine/rewrite.py``): a rewrite's source text, aligned with the output
so far, is its draft. On the scripted backend the output must stay the script's own greedy
tokens, in far fewer passes where the source is mostly what the model writes."""

from __future__ import annotations

from fake_backend import FakeBackend, greedy

from codespec.engine import Engine, GenerationParams, SpeculationPolicy
from codespec.engine.proposers import REWRITE
from codespec.engine.rewrite import START_EVIDENCE, RewriteProposer

SOURCE = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]


def aligned(output: list[int]) -> tuple[int, int] | None:
    proposer = RewriteProposer()
    proposer.begin(GenerationParams(rewrite_of=tuple(SOURCE)))
    return proposer.align(output)


def test_the_output_is_aligned_with_the_source_after_an_edit():
    assert aligned([]) == (0, START_EVIDENCE)  # a rewrite begins where its source does
    assert aligned([10, 11, 12]) == (3, 3)
    assert aligned([10, 11, 99, 13, 14]) == (5, 2)  # a token replaced, then copying again
    assert aligned([10, 11, 99, 13]) == (4, 1)  # copying again where predicted: one token will do
    assert aligned([10, 11, 12, 77, 78, 79, 13, 14]) == (5, 2)  # text inserted
    assert aligned([10, 11, 12, 13, 99, 98]) is None  # writing new text: nothing to propose


def test_of_two_places_the_one_the_last_alignment_predicts_wins():
    proposer = RewriteProposer()
    source = [1, 2, 3, 4, 1, 2, 3, 5]
    proposer.begin(GenerationParams(rewrite_of=tuple(source)))
    assert proposer.align([1, 2, 3, 4, 1]) == (5, 5)
    assert proposer.align([1, 2, 3, 4, 1, 2]) == (6, 6)  # (the second "1 2", not the first)


def engine() -> Engine:
    e = Engine(FakeBackend(), policy=SpeculationPolicy(draft_mode="off"), free_threads=lambda: 1)
    e.calibrate()
    return e


def run(e: Engine, prompt: list[int], **params):
    generation = e.generate(prompt, GenerationParams(use_ngram=False, **params))
    for _ in generation:
        pass
    return generation.tokens, generation.stats


def test_a_rewrite_is_the_targets_own_tokens_in_far_fewer_passes():
    prompt = [3, 7]
    truth = greedy(prompt, 48)
    source = list(truth)
    source[10], source[30] = 0, 0  # where the "model" will not copy its source
    source.insert(20, 5)  # a token the model drops
    e = engine()
    plain_tokens, plain = run(e, prompt, max_tokens=48)
    tokens, stats = run(e, prompt, max_tokens=48, rewrite_of=tuple(source))
    assert plain_tokens == tokens == truth
    assert plain.target_passes == 47  # (the first token comes from the prefill)
    assert stats.target_passes <= 14, stats.pass_log
    # every pass keeps its proposal's copied tokens and adds a bonus token of its own
    assert stats.accepted[REWRITE] == 48 - 1 - stats.target_passes
    assert stats.proposed[REWRITE] > stats.accepted[REWRITE]  # (the edits were proposed too)


def test_the_probabilities_kept_are_those_of_each_emitted_token_in_its_own_row():
    """Asked for, each emitted token comes with the target's probability of it in the row that
    chose it: the same list whether the tokens came one a pass or many (a row read off by one
    would give the wrong token's probability)."""
    from fake_backend import logits_after

    from codespec.engine.verify import logits_to_probs

    prompt = [3, 7]
    truth = greedy(prompt, 40)
    source = list(truth)
    source[12] = 0
    e = engine()
    plain_tokens, plain = run(e, prompt, max_tokens=40, keep_probabilities=True)
    tokens, spec = run(e, prompt, max_tokens=40, rewrite_of=tuple(source), keep_probabilities=True)
    assert plain_tokens == tokens == truth and spec.target_passes < plain.target_passes
    naive = [
        float(logits_to_probs(logits_after(prompt + truth[:i]), 1.0)[token])
        for i, token in enumerate(truth)
    ]
    assert plain.chosen_p[:40] == spec.chosen_p[:40]
    assert all(abs(a - b) < 1e-6 for a, b in zip(spec.chosen_p, naive, strict=False))
    assert len(spec.chosen_p) >= 40 and not run(e, prompt, max_tokens=8)[1].chosen_p
