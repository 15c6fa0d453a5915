"""Token trees: the tree attention mask gives each node exactly its chain's logits."""

import numpy as np

from codespec.engine import Candidate, TokenTree
from codespec.torch_backend.kvcache import CachedModel


def test_attention_mask_is_ancestors_only():
    tree = TokenTree()
    tree.add(Candidate([10, 11], "ngram"), 8)
    tree.add(Candidate([12], "draft"), 8)
    mask, depths = tree.attention()
    # rows/cols: root, 10, 11, 12
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, False, False, True],
    ]
    assert depths == [0, 1, 2, 1]


def test_max_nodes_is_respected():
    tree = TokenTree()
    tree.add(Candidate(list(range(10)), "ngram"), max_nodes=4)
    assert len(tree) == 4


def test_tree_pass_equals_separate_chain_passes(target_model):
    prompt = [3, 4, 5, 6, 7, 8]
    branches = [[9, 10, 11], [9, 12], [13, 14]]
    tree = TokenTree()
    for b in branches:
        tree.add(Candidate(b, "ngram"), 16)
    pending = 20
    cached = CachedModel(target_model)
    cached.prefill(prompt)
    mask, depths = tree.attention()
    tree_logits = cached.forward([pending] + tree.tokens, tree_mask=mask, depths=depths)
    for branch in branches:
        chain = CachedModel(target_model)
        chain.prefill(prompt)
        chain_logits = chain.forward([pending] + branch)
        node = -1
        for k, token in enumerate(branch):
            node = next(c for c in tree.children(node) if tree.tokens[c] == token)
            np.testing.assert_allclose(
                tree_logits[node + 1], chain_logits[k + 1], atol=1e-4, rtol=1e-4
            )
        np.testing.assert_allclose(tree_logits[0], chain_logits[0], atol=1e-4, rtol=1e-4)


def test_keep_compacts_the_cache_to_the_accepted_path(target_model):
    prompt = [3, 4, 5, 6, 7, 8]
    tree = TokenTree()
    tree.add(Candidate([9, 10], "ngram"), 16)
    tree.add(Candidate([11, 12], "ngram"), 16)
    cached = CachedModel(target_model)
    cached.prefill(prompt)
    base = len(cached.ids)
    mask, depths = tree.attention()
    cached.forward([20] + tree.tokens, tree_mask=mask, depths=depths)
    cached.keep(base + 1, [base + 1 + 2, base + 1 + 3])  # path 11 -> 12
    assert cached.ids == prompt + [20, 11, 12]
    after = cached.forward([13])
    fresh = CachedModel(target_model)
    fresh.prefill(prompt + [20, 11, 12])
    np.testing.assert_allclose(after[-1], fresh.forward([13])[-1], atol=1e-4, rtol=1e-4)
