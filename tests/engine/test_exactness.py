"""Bit-exactness in bf16: a position's logits do not depend on the width of the pass that
computed it, so speculative greedy output equals plain greedy output in bf16 too.

A tiny random Qwen2 in bf16 is enough to show the problem: with fused SDPA attention the same
position gets different logits in a one-token pass and inside a five-token chain (the control
below); with row-wise attention and padded one-token passes they are equal bit for bit.
"""

import numpy as np
import pytest
import torch
from helpers import as_w8a8, tiny_qwen2

from codespec.engine import Engine, GenerationParams, NgramProposer
from codespec.engine.policy import SpeculationPolicy
from codespec.engine.tree import Candidate, TokenTree
from codespec.torch_backend import attention
from codespec.torch_backend.attention import use_rowwise_attention
from codespec.torch_backend.kvcache import CachedModel

CONTEXT, STEPS = 200, 30


def bf16_model():
    return tiny_qwen2(seed=3, vocab=512, hidden=256, layers=2).to(torch.bfloat16)


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def rows_in_passes_of(model, ids: list[int], width: int) -> list[torch.Tensor]:
    """Logits of positions CONTEXT.. computed in chains of ``width`` tokens (``width`` 1: the
    engine's padded one-token pass)."""
    cache = CachedModel(model, prefill_chunk=64)
    cache.prefill(ids[:CONTEXT])
    rows: list[torch.Tensor] = []
    while len(rows) < STEPS:
        at = CONTEXT + len(rows)
        if width == 1:
            rows.append(cache.forward([ids[at], ids[at]])[0])
            cache.crop(at + 1)
        else:
            rows += list(cache.forward(ids[at : at + width]))
    return rows[:STEPS]


def identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> int:
    return sum(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_fused_attention_makes_rows_depend_on_pass_width():
    """The control: without row-wise attention the test below would fail. Which widths show
    it depends on the CPU's kernels (on a Xeon with AMX, 5-token chains happened to match
    all 30 rows, 8-token ones 18), so it looks at several."""
    model, ids = bf16_model(), random_ids(CONTEXT + STEPS + 8)
    one = rows_in_passes_of(model, ids, 1)
    assert min(identical(one, rows_in_passes_of(model, ids, w)) for w in (3, 5, 8)) < STEPS


@pytest.mark.parametrize("width", [2, 3, 5, 8])
def test_rowwise_rows_are_bit_identical_whatever_the_width(width):
    model, ids = bf16_model(), random_ids(CONTEXT + STEPS + 8)
    use_rowwise_attention(model)
    one = rows_in_passes_of(model, ids, 1)
    assert identical(one, rows_in_passes_of(model, ids, width)) == STEPS


def test_tree_branch_rows_equal_chain_rows():
    """A node on the second branch of a token tree attends to gathered (non-contiguous) keys:
    its logits still equal those of the same tokens decoded as a plain chain."""
    model, ids = bf16_model(), random_ids(CONTEXT + 8, seed=1)
    use_rowwise_attention(model)
    pending, branch_a, branch_b = ids[CONTEXT], [11, 12, 13], [21, 22, 23, 24]
    tree = TokenTree()
    tree.add(Candidate(branch_a, "ngram"), 16)
    tree.add(Candidate(branch_b, "ngram"), 16)
    mask, depths = tree.attention()
    cache = CachedModel(model, prefill_chunk=64)
    cache.prefill(ids[:CONTEXT])
    tree_rows = cache.forward([pending] + tree.tokens, tree_mask=mask, depths=depths)
    cache.crop(CONTEXT)
    chain_rows = cache.forward([pending] + branch_b)
    b_nodes = [1 + i for i, t in enumerate(tree.tokens) if t in branch_b]
    assert len(b_nodes) == len(branch_b)
    for chain_row, node in zip(chain_rows[1:], b_nodes, strict=True):
        assert np.array_equal(chain_row, tree_rows[node])
    assert np.array_equal(chain_rows[0], tree_rows[0])


def test_the_cache_tells_attention_what_its_mask_is(monkeypatch):
    """A pass through ``CachedModel`` says whether it is a chain or a tree, so no layer
    inspects the mask (the inspection is ~30 µs a layer at decode); a call without the
    keyword still has its mask inspected."""
    model, ids = bf16_model(), random_ids(CONTEXT + 8, seed=2)
    use_rowwise_attention(model)
    inspected = []
    real = attention._is_causal
    monkeypatch.setattr(attention, "_is_causal", lambda *a: inspected.append(1) or real(*a))
    cache = CachedModel(model, prefill_chunk=64)
    cache.prefill(ids[:CONTEXT])
    cache.forward(ids[CONTEXT : CONTEXT + 3])
    tree = TokenTree()
    tree.add(Candidate([11, 12], "ngram"), 16)
    tree.add(Candidate([21, 22], "ngram"), 16)
    mask, depths = tree.attention()
    cache.forward([ids[CONTEXT + 3]] + tree.tokens, tree_mask=mask, depths=depths)
    assert inspected == []
    query, keys = torch.randn(1, 4, 2, 8), torch.randn(1, 2, 5, 8)
    chain_mask = torch.ones(2, 5, dtype=torch.bool).tril(diagonal=3)[None, None]
    attention.rowwise_attention(model, query, keys, keys, chain_mask)
    assert inspected == [1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_speculative_equals_plain_greedy_in_bf16(seed):
    """The engine's promise where rounding could break it: bf16, n-gram proposals accepted.

    The tiny model's logits rarely come close to a tie, so the row-level tests above are the
    sensitive ones; this one checks the engine runs its target that way and stays exact."""
    model = bf16_model()
    motif = random_ids(12, seed=seed + 10)
    prompt = random_ids(150, seed=seed) + motif + random_ids(20, seed=seed + 20) + motif[:4]

    def run(speculate: bool):
        engine = Engine(
            CachedModel(model, prefill_chunk=64),
            policy=SpeculationPolicy(draft_mode="off"),
            ngram=NgramProposer(min_ngram=1, branches=3),
        )
        generation = engine.generate(prompt, GenerationParams(max_tokens=60, speculate=speculate))
        return generation.run(), generation.stats

    plain, _ = run(False)
    assert model.config._attn_implementation == attention.NAME
    spec, stats = run(True)
    assert spec == plain
    assert stats.proposed["ngram"] > 0


@pytest.mark.parametrize("chunk", [8, 100, 256])
def test_rowwise_engine_matches_the_reference_model(chunk):
    """fp32: row-wise attention gives the model's own logits, prefilled in any chunks."""
    reference = tiny_qwen2(seed=4, vocab=512, hidden=64)
    model = tiny_qwen2(seed=4, vocab=512, hidden=64)
    use_rowwise_attention(model)
    ids = random_ids(330, seed=5)
    cache = CachedModel(model, prefill_chunk=chunk)
    last = cache.prefill(ids[:300])[0]
    rows = cache.forward(ids[300:330])
    with torch.no_grad():
        want = reference(torch.tensor([ids])).logits[0]
    np.testing.assert_allclose(last, want[299], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(rows, want[300:330], atol=1e-4, rtol=1e-4)


def prefill_then_decode(model, ids: list[int], chunk: int) -> list[torch.Tensor]:
    """The logits after a 300-token prompt prefilled in chunks of ``chunk``, then of 5 chain
    rows decoded after it."""
    cache = CachedModel(model, prefill_chunk=chunk)
    last = cache.prefill(ids[:300])[0]
    return [last, *cache.forward(ids[300:305])]


def test_fused_prefill_depends_on_the_chunking():
    """The control for the test below: transformers' own SDPA path sums differently in
    differently sized chunks (in fp32 here; this tiny bf16 model happens not to show it)."""
    model, ids = bf16_model().float(), random_ids(305, seed=6)
    model.set_attn_implementation("sdpa")
    runs = [prefill_then_decode(model, ids, chunk) for chunk in (8, 60, 65, 256)]
    assert not all(identical(runs[0], run) == len(run) for run in runs[1:])


CHUNKS = (8, 60, 65, 256)


def gemm_rows_depend_on_block_size(model: torch.nn.Module, rows: int = 300) -> bool:
    """Whether this machine's dense GEMMs give a row other bits in a block of another size (the
    prefill chunks of the test below): a choice of the BLAS kernel by row count, which some
    CPUs make for float32 (~1e-7 apart) and codespec cannot change."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in (m for m in model.modules() if type(m) is torch.nn.Linear):
            x = torch.randn(rows, layer.in_features, generator=generator).to(layer.weight.dtype)
            blocks = [torch.cat([layer(x[i : i + c]) for i in range(0, rows, c)]) for c in CHUNKS]
            if not all(np.array_equal(blocks[0], b) for b in blocks[1:]):
                return True
    return False


@pytest.mark.parametrize("weights", ["bfloat16", "float32", "w8a8"])
def test_prefill_logits_are_a_function_of_the_prompt_alone(weights):
    """Row-wise prefill: the chunk size (chosen from the machine's measured speed, and shifted
    by whatever the cache held) changes nothing, bit for bit. With w8a8, the CPU default, that
    holds on every machine (the sums are integers). With dense weights it holds wherever the
    machine's GEMM computes a row the same in blocks of every size; where it does not (float32
    on some CPUs), the chunkings agree to float32 rounding, and the attention is still
    row-wise: the control above shows what the fused path does."""
    model, ids = bf16_model(), random_ids(305, seed=6)
    model = as_w8a8(model) if weights == "w8a8" else model.to(getattr(torch, weights))
    use_rowwise_attention(model)
    runs = [prefill_then_decode(model, ids, chunk) for chunk in CHUNKS]
    if weights != "w8a8" and gemm_rows_depend_on_block_size(model):
        for run in runs[1:]:
            for got, want in zip(run, runs[0], strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
        return
    for run in runs[1:]:
        assert identical(runs[0], run) == len(run)
