"""Acceptance maths on tiny vocabularies: greedy choice and rejection sampling."""

import numpy as np

from codespec.engine.tree import Candidate, TokenTree
from codespec.engine.verify import (
    greedy_choice,
    logits_to_probs,
    sample,
    speculative_choice,
    walk_tree,
)


def chi_squared(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    mask = expected > 0
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


# 99.9th percentile of chi-squared with 4 degrees of freedom (vocab 5): 18.47
CHI2_999_DF4 = 18.47


def f32(values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_greedy_choice_accepts_only_the_argmax():
    logits = f32([0.1, 3.0, 0.2, 0.0])
    assert greedy_choice(logits, [0, 1]) == (1, 1)
    assert greedy_choice(logits, [2, 3]) == (None, 1)


def output_distribution(p, children, qs, trials=20000, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(p))
    for _ in range(trials):
        _, token = speculative_choice(p, children, qs, rng)
        counts[token] += 1
    return counts


def test_rejection_sampling_keeps_the_target_distribution_for_a_draft_sample():
    p = f32([0.5, 0.2, 0.15, 0.1, 0.05])
    q = f32([0.1, 0.6, 0.1, 0.1, 0.1])
    rng = np.random.default_rng(1)
    counts = np.zeros(5)
    for _ in range(20000):
        x = sample(q, rng)  # the draft samples from q
        _, token = speculative_choice(p, [x], [q], rng)
        counts[token] += 1
    assert chi_squared(counts, p) < CHI2_999_DF4, counts / counts.sum()


def test_rejection_sampling_with_several_deterministic_children():
    p = f32([0.05, 0.4, 0.3, 0.2, 0.05])
    counts = output_distribution(p, [3, 1, 0], [None, None, None])
    assert chi_squared(counts, p) < CHI2_999_DF4, counts / counts.sum()


def test_a_wrong_distribution_is_detected():
    """The statistic above can fail: sampling from q instead of p is caught."""
    p = f32([0.5, 0.2, 0.15, 0.1, 0.05])
    q = f32([0.1, 0.6, 0.1, 0.1, 0.1])
    rng = np.random.default_rng(2)
    counts = np.bincount([sample(q, rng) for _ in range(20000)], minlength=5)
    assert chi_squared(counts.astype(np.float64), p) > CHI2_999_DF4


def test_sampling_draws_each_token_in_proportion_even_from_an_unnormalised_total():
    """A float32 softmax over a large vocabulary sums to 1 only roughly: the draw scales by
    the total it has, never picks a token of probability 0, and never runs off the end."""
    probs = logits_to_probs(f32([2.0, 1.0, -np.inf, 0.5, 1.5]), 1.0) * np.float32(1.001)
    rng = np.random.default_rng(3)
    counts = np.bincount([sample(probs, rng) for _ in range(20000)], minlength=5)
    assert counts[2] == 0
    assert chi_squared(counts.astype(np.float64), probs / probs.sum()) < CHI2_999_DF4


def test_walk_tree_follows_the_argmax_path():
    tree = TokenTree()
    tree.add(Candidate([1, 2, 3], "ngram"), 10)
    tree.add(Candidate([1, 4], "ngram"), 10)  # shares node "1"
    assert tree.tokens == [1, 2, 3, 4] and tree.parents == [-1, 0, 1, 0]
    vocab = 6
    logits = np.zeros((1 + len(tree), vocab), dtype=np.float32)
    logits[0, 1] = 5  # root -> 1 (accept node 0)
    logits[1, 4] = 5  # after 1 -> 4 (accept node 3, the second branch)
    logits[4, 5] = 5  # after 1,4 -> 5 (bonus)
    accepted, bonus = walk_tree(tree, logits, temperature=0.0)
    assert accepted == [0, 3] and bonus == 5
