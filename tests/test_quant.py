"""Weight-only int4/int8 on the CPU: exact GGUF codes, kernels equal to the maths, a quantized
model decoded speculatively is token-identical to plain decoding of that same model."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import as_w8a8, naive_greedy, tiny_qwen2

from codespec.engine import Engine, GenerationParams, NgramProposer
from codespec.engine.policy import SpeculationPolicy
from codespec.models import (
    ModelError,
    ModelSource,
    load_manifest,
    quantize_mode,
    uses_quantized_form,
)
from codespec.quant import kernels
from codespec.quant.from_gguf import Q4_K_BLOCK_BYTES, hf_name, q4_k_to_int4
from codespec.quant.layers import (
    SAFE_WEIGHT_LEVELS,
    WIDE_WEIGHT_LEVELS,
    Int8Weight,
    QuantEmbedding,
    QuantLinear,
    pack_int4,
    quantize_int4,
    quantize_int8,
    requantize_int8,
    sums_8bit_weights_exactly,
    unpack_stored,
    w8a8_product,
    w8a8_weight_levels,
)
from codespec.quant.load import WEIGHTS_FILE, build_quantized, quantize_dense, read_stored
from codespec.torch_backend.kvcache import CachedModel


def random_q4_k_blocks(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Valid Q4_K bytes: finite fp16 super-block scales, random 6-bit scales and 4-bit codes."""
    rng = np.random.default_rng(seed)
    count = rows * cols // 256
    blocks = rng.integers(0, 256, (count, Q4_K_BLOCK_BYTES), dtype=np.uint8)
    d = rng.uniform(0.001, 0.01, (count, 2)).astype(np.float16)
    blocks[:, 0:4] = d.view(np.uint8).reshape(count, 4)
    return blocks.reshape(rows, -1)


def test_q4_k_codes_are_exactly_the_gguf_weights():
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    rows, cols = 32, 512
    blocks = random_q4_k_blocks(rows, cols)
    ours = q4_k_to_int4(blocks, rows, cols)
    reference = dequantize(blocks, GGMLQuantizationType.Q4_K).reshape(rows, cols)
    assert ours.q.max() <= 15
    assert torch.equal(ours.dequantize(), torch.from_numpy(reference))


def test_gguf_names_map_to_hugging_face_names():
    assert hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    assert hf_name("blk.0.attn_q.bias") == "model.layers.0.self_attn.q_proj.bias"
    assert hf_name("output.weight") == "lm_head.weight"
    with pytest.raises(KeyError):
        hf_name("blk.0.unknown.weight")


@pytest.mark.parametrize("quantize", [quantize_int4, quantize_int8])
def test_stored_form_round_trips(quantize):
    weight = quantize(torch.randn(48, 64))
    again = unpack_stored(weight.pack())
    assert type(again) is type(weight)
    assert torch.equal(again.dequantize(), weight.dequantize())


def test_stored_weights_are_read_without_keeping_the_file_mapped(tmp_path):
    from safetensors.torch import save_file

    maps = Path("/proc/self/maps")
    weight = quantize_int4(torch.randn(32, 64))
    stored = {f"a.weight.{k}": v for k, v in weight.pack().items()}
    save_file({**stored, "norm.weight": torch.ones(64)}, str(tmp_path / WEIGHTS_FILE))
    weights = read_stored(tmp_path)
    assert sorted(weights) == ["a.weight", "norm.weight"]
    assert torch.equal(weights["a.weight"].dequantize(), weight.dequantize())
    assert torch.equal(weights["norm.weight"], torch.ones(64))
    if maps.exists():  # every page read would count in the process's resident size
        assert str(tmp_path / WEIGHTS_FILE) not in maps.read_text()


def test_requantizing_in_blocks_gives_what_requantizing_at_once_does():
    weight = quantize_int4(torch.randn(80, 64))
    whole = quantize_int8(weight.dequantize(), 63)
    for rows in (16, 48, 80, 1000):
        out = requantize_int8(weight, 63, rows=rows)
        assert torch.equal(out.q, whole.q) and torch.equal(out.scale, whole.scale)


def test_a_weight_already_in_the_requantized_form_is_used_as_it_is():
    once = requantize_int8(quantize_int4(torch.randn(32, 64)), 63)
    assert requantize_int8(once, 63) is once
    coarse = Int8Weight(once.q // 2, once.scale * 2)  # largest codes 31-32: not that form
    again = requantize_int8(coarse, 63)
    assert again is not coarse
    assert torch.equal(again.q, quantize_int8(coarse.dequantize(), 63).q)


def test_int4_codes_pack_in_blocks_of_rows_as_they_do_at_once():
    """Blocks of 64 rows (the kernel's own block with AVX-512; with AVX2 it is 32, and blocks
    of 32 packed differently on an AVX-512 machine) and tails of 16 and 48 rows."""
    q = torch.randint(0, 16, (2048 + 96 + 16, 64), dtype=torch.uint8)
    whole = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.int(), 1)
    for rows in (64, 128, 2048):
        assert torch.equal(pack_int4(q, rows), whole)
    with pytest.raises(ValueError, match="blocks of 64 rows, not 32"):
        pack_int4(q, 32)


def test_quantization_error_is_bounded():
    w = torch.randn(64, 128)
    for q, step in ((quantize_int4(w), 1 / 15), (quantize_int8(w), 1 / 127)):
        # at most half a step of the group's (int4) or row's (int8) range
        err = (q.dequantize() - w).abs().max()
        assert err <= 0.51 * step * 2 * w.abs().max()


@pytest.mark.parametrize("kind", ["int4", "int8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quant_linear_computes_x_w_plus_b(kind, dtype):
    weight = quantize_int4(torch.randn(96, 64))
    bias = torch.randn(96)
    layer = QuantLinear(weight, bias, kind, dtype)
    x = torch.randn(2, 3, 64)
    w = weight.dequantize() if kind == "int4" else quantize_int8(weight.dequantize()).dequantize()
    expected = x @ w.T + bias
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    assert torch.allclose(layer(x).float(), expected, atol=tolerance, rtol=0.02)


def test_w8a8_computes_x_w_plus_b_with_each_row_rounded_to_8_bits():
    weight, bias = quantize_int4(torch.randn(96, 64)), torch.randn(96)
    layer = QuantLinear(weight, bias, "w8a8", torch.float32)
    x = torch.randn(5, 64)
    x[0] *= 1000  # rows of very different sizes: each has its own scale
    w8 = quantize_int8(weight.dequantize(), levels=w8a8_weight_levels())
    step = x.abs().amax(1, keepdim=True) / 127
    rounded = torch.round(x / step) * step  # what the kernel sees of x
    expected = rounded @ w8.dequantize().T + bias
    assert torch.allclose(layer(x), expected, rtol=1e-4, atol=1e-3 * expected.abs().max())
    # and that is close to the float product: the rounding is a few percent of a row
    exact = x @ w8.dequantize().T + bias
    assert ((layer(x) - exact).norm(dim=1) / exact.norm(dim=1)).max() < 0.05


@pytest.mark.parametrize("levels", [SAFE_WEIGHT_LEVELS, "chosen"])
def test_w8a8_does_not_overflow_on_large_weights_and_inputs(levels):
    """All-extreme inputs and weights, 7-bit and the levels chosen for this machine (8-bit
    where its kernel sums in int32): where int16 pair sums saturated, the product would be off."""
    levels = w8a8_weight_levels() if levels == "chosen" else levels
    weight = Int8Weight(torch.full((32, 64), levels, dtype=torch.int8), torch.ones(32), levels)
    weight.q[1::2] = -levels
    layer = QuantLinear(weight, None, "w8a8", torch.float32)
    x = torch.ones(3, 64)
    x[1] = -1
    assert torch.equal(layer(x), x @ weight.dequantize().T)


def saturating_pairs(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    """What AVX2's u8 x s8 kernel computes (``vpmaddubsw``): inputs stored as x + 128, products
    added in pairs into int16 with saturation, then summed in int32."""
    stored = (torch.round(x) + 128).long()
    q = weight.q.long()
    products = stored[:, None, :] * q[None, :, :]
    pairs = (products[..., 0::2] + products[..., 1::2]).clamp(-(2**15), 2**15 - 1)
    return (pairs.sum(-1) - 128 * q.sum(-1)).float() * weight.scale


def exact_pairs(x: torch.Tensor, weight: Int8Weight) -> torch.Tensor:
    return (torch.round(x).long() @ weight.q.long().T).float() * weight.scale


def test_8_bit_weights_only_where_the_kernel_sums_them_exactly():
    assert not sums_8bit_weights_exactly(saturating_pairs)
    assert sums_8bit_weights_exactly(exact_pairs)
    # 7-bit codes are what make the saturating kernel exact on such inputs
    weight = quantize_int8(torch.randn(8, 64), SAFE_WEIGHT_LEVELS)
    x = torch.full((2, 64), 127.0)
    assert torch.equal(saturating_pairs(x, weight), exact_pairs(x, weight))
    # and this machine's choice is one of the two
    assert w8a8_weight_levels() in (SAFE_WEIGHT_LEVELS, WIDE_WEIGHT_LEVELS)
    if w8a8_weight_levels() == WIDE_WEIGHT_LEVELS:
        assert sums_8bit_weights_exactly(w8a8_product)


def test_w8a8_two_digit_inputs_lose_little_to_rounding():
    """A heavy-tailed input (one channel 40x the rest, as ``down_proj`` sees): one 8-bit digit
    rounds the small values coarsely; two digits are the float product to ~1e-4."""
    weight = quantize_int4(torch.randn(96, 64))
    x = torch.randn(5, 64)
    x[:, 3] *= 40
    x[1] *= 1e-3  # each row has its own scale, in both digits
    exact = x @ quantize_int8(weight.dequantize(), w8a8_weight_levels()).dequantize().T

    def error(digits: int) -> float:
        got = QuantLinear(weight, None, "w8a8", torch.float32, digits)(x)
        return ((got - exact).norm(dim=1) / exact.norm(dim=1)).max().item()

    assert error(1) > 0.005
    assert error(2) < 1e-3 and error(2) < error(1) / 50


def test_only_w8a8_takes_its_input_in_digits():
    with pytest.raises(ValueError, match="int4 takes float inputs"):
        QuantLinear(quantize_int4(torch.randn(96, 64)), None, "int4", torch.bfloat16, digits=2)
    with pytest.raises(ValueError, match="one or two 8-bit digits, not 3"):
        QuantLinear(quantize_int4(torch.randn(96, 64)), None, "w8a8", torch.float32, digits=3)


@pytest.mark.parametrize(
    ("forced", "kernels_by_proj", "two"),
    [
        ("", {"down_proj": "w8a8", "lm_head": "w8a8", "q_proj": "w8a8"}, "down_proj/lm_head"),
        ("", {"down_proj": "int4", "lm_head": "w8a8"}, "lm_head"),
        ("w8a8", {}, "down_proj/lm_head"),
        ("int8", {"down_proj": "w8a8"}, None),  # the forced kernel runs every layer
        ("", {"down_proj": "int4", "lm_head": "int8"}, None),
    ],
)
def test_the_plan_summary_names_the_two_digit_inputs_it_runs(forced, kernels_by_proj, two):
    plan = kernels.KernelPlan("float32", kernels_by_proj, reason="why", forced=forced)
    summary = plan.summary()
    bits = {WIDE_WEIGHT_LEVELS: 8, SAFE_WEIGHT_LEVELS: 7}[w8a8_weight_levels()]
    assert (f"({bits}-bit codes)" in summary) == ("w8a8" in summary)
    if two is None:
        assert "digits" not in summary
    else:
        assert f", {two} inputs in two 8-bit digits (why)" in summary


@pytest.mark.parametrize(("kind", "digits"), [("int4", 1), ("int8", 1), ("w8a8", 1), ("w8a8", 2)])
def test_quant_linear_rows_do_not_depend_on_the_pass_width(kind, digits):
    dtype = torch.float32 if kind == "w8a8" else torch.bfloat16
    layer = QuantLinear(quantize_int4(torch.randn(96, 64)), None, kind, dtype, digits)
    x = torch.randn(8, 64, dtype=dtype)
    x[3] *= 50
    alone = torch.cat([layer(x[i : i + 1]) for i in range(8)])
    assert torch.equal(alone, layer(x))


def test_int4_refuses_shapes_the_kernel_cannot_take():
    with pytest.raises(ValueError):
        QuantLinear(quantize_int4(torch.randn(40, 64)), None, "int4", torch.float32)  # N % 16
    QuantLinear(quantize_int4(torch.randn(40, 64)), None, "int8", torch.float32)  # int8 is fine


@pytest.mark.parametrize("quantize", [quantize_int4, quantize_int8])
def test_quant_embedding_dequantizes_the_looked_up_rows(quantize):
    weight = quantize(torch.randn(100, 64))
    embedding = QuantEmbedding(weight, torch.float32)
    ids = torch.tensor([[3, 99, 0, 3]])
    assert torch.allclose(embedding(ids), weight.dequantize()[ids], atol=1e-6)


@pytest.fixture(scope="module")
def tiny_quantized():
    """A tiny Qwen2 with int4 weights (int8 where the shape does not fit) and bf16 activations,
    and a dense copy holding the same (dequantized) weights."""
    dense = tiny_qwen2(seed=0, vocab=96, hidden=64)
    weights = quantize_dense(dense.state_dict(), "int4")
    model = build_quantized(dense.config, weights, torch.float32)
    dequantized = {
        k: v if isinstance(v, torch.Tensor) else v.dequantize() for k, v in weights.items()
    }
    dense.load_state_dict(dequantized)
    return model, dense


def test_quantized_model_computes_what_its_dequantized_weights_do(tiny_quantized):
    model, dense = tiny_quantized
    ids = torch.tensor([[1, 5, 9, 20, 3, 7]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, dense(ids).logits, atol=1e-4)
    assert isinstance(model.lm_head, QuantLinear) and model.lm_head.kind == "int4"
    assert isinstance(model.model.embed_tokens, QuantEmbedding)


PROMPTS = [[5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 11, 12, 13, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_equals_plain_on_a_quantized_bf16_model(prompt):
    dense = tiny_qwen2(seed=3, vocab=96, hidden=64)
    model = build_quantized(dense.config, quantize_dense(dense.state_dict()), torch.bfloat16)
    engine = Engine(
        CachedModel(model, prefill_chunk=8),
        policy=SpeculationPolicy(draft_mode="off"),
        ngram=NgramProposer(min_ngram=1, branches=3),
    )
    engine.calibrate()
    # the int4 kernel computes every row alone: no padding row is needed for exactness
    assert engine.calibration.pad_single_row is False
    engine.policy = SpeculationPolicy(draft_mode="off")  # unmeasured: verify all it is offered
    spec = engine.generate(prompt, GenerationParams(max_tokens=40)).run()
    plain = engine.generate(prompt, GenerationParams(max_tokens=40, speculate=False))
    assert spec == plain.run() == naive_greedy(model, prompt, 40)
    assert plain.stats.target_passes == 39


@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_equals_plain_with_int8_activations(prompt):
    model = as_w8a8(tiny_qwen2(seed=4, vocab=96, hidden=64))
    layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    assert {m.kind for m in layers.values()} == {"w8a8"}
    # the MLP's output projection and the LM head take two digits, the fused groups one
    assert {n.rpartition(".")[2] for n, m in layers.items() if m.digits == 2} == {
        "down_proj",
        "lm_head",
    }
    assert layers["model.layers.0.mlp.gate_proj.fused.layer"].digits == 1
    engine = Engine(
        CachedModel(model, prefill_chunk=8),
        policy=SpeculationPolicy(draft_mode="off"),
        ngram=NgramProposer(min_ngram=1, branches=3),
    )
    engine.calibrate()
    assert engine.calibration.pad_single_row is False  # integer sums: a row is the same in any pass
    engine.policy = SpeculationPolicy(draft_mode="off")
    spec = engine.generate(prompt, GenerationParams(max_tokens=40)).run()
    plain = engine.generate(prompt, GenerationParams(max_tokens=40, speculate=False)).run()
    assert spec == plain == naive_greedy(model, prompt, 40)


def test_kernel_plan_is_measured_once_per_machine_and_then_read(tmp_path, monkeypatch):
    dense = tiny_qwen2(seed=0, vocab=96, hidden=64)
    weights = quantize_dense(dense.state_dict(), "int4")
    cache = tmp_path / "plan.json"
    plan = kernels.load_or_measure(weights, cache)
    assert plan.dtype in kernels.DTYPES
    assert set(plan.kernels) >= {"q_proj", "down_proj", "lm_head"}
    for proj, kernel in plan.kernels.items():  # what was chosen was timed at every width
        assert plan.timings_ms[plan.dtype][proj][kernel].keys() == {1, 2, 4, 8}
    # one plan or the other, never a mix of w8a8 with weight-only layers
    assert set(plan.kernels.values()) == {"w8a8"} or "w8a8" not in plan.kernels.values()
    assert "w8a8" in plan.timings_ms["float32"]["q_proj"]  # timed (fbgemm is there on x86)
    assert "w8a8" in plan.reason
    saved = json.loads(cache.read_text())
    assert saved[kernels.machine_fingerprint()]["dtype"] == plan.dtype

    def measure_again(*args, **kwargs):
        raise AssertionError("measured twice on the same machine")

    monkeypatch.setattr(kernels, "measure", measure_again)
    again = kernels.load_or_measure(weights, cache)
    assert (again.dtype, again.kernels) == (plan.dtype, plan.kernels)
    forced = kernels.load_or_measure(weights, cache, force="int8")
    assert (
        forced.kernel_for(
            "model.layers.0.mlp.up_proj", weights["model.layers.0.mlp.up_proj.weight"]
        )
        == "int8"
    )
    asked = kernels.load_or_measure(weights, cache, force="w8a8")
    assert (asked.dtype, asked.kernel_for("lm_head", weights["lm_head.weight"])) == (
        "float32",
        "w8a8",
    )
    monkeypatch.setattr(kernels, "machine_fingerprint", lambda: "another machine")
    with pytest.raises(AssertionError, match="measured twice"):
        kernels.load_or_measure(weights, cache)


@pytest.mark.parametrize(
    ("w8a8_ms", "chosen"), [(3.0, ("float32", "w8a8")), (9.0, ("bfloat16", "int4"))]
)
def test_w8a8_is_chosen_only_when_it_wins_by_enough_for_its_memory(monkeypatch, w8a8_ms, chosen):
    # int4 in bf16 costs 10 ms a layer; float32 weight-only is far slower; w8a8 as given
    per_kernel = {
        ("bfloat16", "int4"): 10.0,
        ("bfloat16", "int8"): 12.0,
        ("float32", "int4"): 80.0,
        ("float32", "int8"): 60.0,
        ("float32", "w8a8"): w8a8_ms,
    }

    timed_with_two_digits = set()

    def fake_time(layers, proj, kind, dtype, widths):
        if kernels.input_digits(kind, proj) == 2:
            timed_with_two_digits.add((kind, layers[0][0].q.shape))
        return {w: per_kernel[(str(dtype).removeprefix("torch."), kind)] for w in widths}

    monkeypatch.setattr(kernels, "_time_layers", fake_time)
    monkeypatch.setattr(kernels, "w8a8_available", lambda: True)
    weights = quantize_dense(tiny_qwen2(seed=0, vocab=96, hidden=64).state_dict(), "int4")
    plan = kernels.measure(weights)
    assert (plan.dtype, *set(plan.kernels.values())) == chosen
    # float32 int4 (8x its bf16 one-row time) was not timed wider; w8a8 was
    assert plan.timings_ms["float32"]["q_proj"]["int4"].keys() == {1}
    assert plan.timings_ms["float32"]["q_proj"]["w8a8"].keys() == {1, 2, 4, 8}
    # w8a8 is timed as it would run: down_proj and the LM head with two-digit inputs
    shapes = {weights[f"{n}.weight"].q.shape for n in ("model.layers.0.mlp.down_proj", "lm_head")}
    assert timed_with_two_digits == {("w8a8", shape) for shape in shapes}


def test_a_damaged_plan_file_is_measured_again(tmp_path):
    cache = tmp_path / "plan.json"
    cache.write_text("{not json")
    weights = quantize_dense(tiny_qwen2(seed=0, vocab=96, hidden=64).state_dict(), "int4")
    assert kernels.load_or_measure(weights, cache).dtype in kernels.DTYPES
    assert json.loads(cache.read_text())["format"] == kernels.PLAN_FORMAT


def test_quantize_mode_per_device_and_source():
    default = load_manifest()
    assert quantize_mode(default, "cpu") == "auto"
    assert uses_quantized_form(default.target, "auto")
    dense = ModelSource(source="hf-dir", label="dense", path="/somewhere")
    assert not uses_quantized_form(dense, "auto")  # a dense model is not degraded unasked
    assert uses_quantized_form(dense, "int8")
    assert quantize_mode(default, "cuda") == "off"  # the kernels are CPU-only
    assert quantize_mode(default, "cpu", "off") == "off"
    with pytest.raises(ModelError):
        quantize_mode(default, "cuda:0", "int4")
    with pytest.raises(ModelError):
        quantize_mode(default, "cpu", "int3")


@pytest.mark.parametrize(
    ("kernel", "dtype"),
    [("int4", torch.bfloat16), ("int8", torch.bfloat16), ("w8a8", torch.float32)],
)
def test_fused_projections_compute_what_the_separate_ones_do(kernel, dtype):
    from codespec.quant.fusion import FusedLinear, FusedPart

    dense = tiny_qwen2(seed=5, vocab=96, hidden=64)
    weights = quantize_dense(dense.state_dict(), "int4")

    def kernel_for(name, weight):
        return kernels.KernelPlan(kernels={}, forced=kernel).kernel_for(name, weight)

    separate = build_quantized(dense.config, weights, dtype, kernel_for, fuse=False)
    fused = build_quantized(dense.config, weights, dtype, kernel_for, fuse=True)
    layer = fused.model.layers[0]
    assert isinstance(layer.self_attn.k_proj, FusedPart)
    assert isinstance(layer.mlp.up_proj, FusedPart)
    calls = []
    for module in fused.modules():
        if isinstance(module, FusedLinear):
            module.layer.register_forward_hook(lambda *args: calls.append(1))
    ids = torch.tensor([[1, 5, 9, 20, 3, 7, 1, 5]])
    with torch.inference_mode():
        got, want = fused(ids).logits, separate(ids).logits
    assert len(calls) == 2 * dense.config.num_hidden_layers  # one GEMM per group and layer
    if kernel == "w8a8":  # integer sums per output column: the same bits
        assert torch.equal(got, want)
    else:
        assert torch.allclose(got.float(), want.float(), atol=0.05)


@pytest.mark.parametrize("kernel", ["int4", "w8a8"])
def test_layers_built_side_by_side_make_the_model_built_one_by_one(monkeypatch, kernel):
    """The loader builds ``LOAD_WORKERS`` layers at a time (and the large ones alone): each
    layer comes from its own weight, so the model is the same bits as one built in order."""
    from codespec.quant import load

    dense = tiny_qwen2(seed=6, vocab=96, hidden=64)
    weights = quantize_dense(dense.state_dict(), "int4")
    plan = kernels.KernelPlan(dtype="float32", forced=kernel)
    models = {}
    for workers, large in ((1, 2**40), (2, 96 * 64)):  # (the second: the embedding built alone)
        monkeypatch.setattr(load, "LOAD_WORKERS", workers)
        monkeypatch.setattr(load, "LARGE_WEIGHT_ELEMENTS", large)
        models[workers] = build_quantized(
            dense.config, weights, torch.float32, plan.kernel_for, digits_for=plan.digits_for
        )
    ids = torch.tensor([[1, 5, 9, 20, 3, 7, 1, 5]])
    with torch.inference_mode():
        assert torch.equal(models[1](ids).logits, models[2](ids).logits)
    assert [type(m) for m in models[1].modules()] == [type(m) for m in models[2].modules()]


def test_build_results_come_in_order_and_a_failing_build_is_not_hidden():
    from codespec.quant.load import run_builds

    assert run_builds([lambda i=i: i for i in range(7)], alone=[i % 3 == 0 for i in range(7)]) == [
        *range(7)
    ]

    def broken():
        raise ValueError("weight 3 is damaged")

    with pytest.raises(ValueError, match="weight 3 is damaged"):
        run_builds([lambda: 1, broken, lambda: 2])
