"""The ggml backend (``codespec/ggml``) on a tiny random GGUF in 4-bit blocks: a row is the same
bits alone and in any pass, a token tree's nodes equal plain decoding of their branch, and the
engine over it gives speculative greedy output token-identical to plain greedy ("fast ==
naive" on the same backend), across cache edits, places, cancels and compaction.

The control (that unpadded lone rows differ) needs the real model's Q4_K kernels: on this
tiny model's Q4_0 blocks llama.cpp's lone-row and grouped kernels happened to agree, so the
control is ``benchmarks/ggml_invariance.py`` on the embedded GGUF (``docs/benchmarks.md``)."""

import json

import numpy as np
import pytest
from helpers import GGML_LIBRARY, GGML_MODULE, CancelAfter, write_tiny_gguf

from codespec.engine import Cancelled, Engine, GenerationParams, NgramProposer, StopSignal
from codespec.engine.policy import SpeculationPolicy

pytest.importorskip(GGML_MODULE)

from codespec.ggml.backend import PARKED, TEXT, GgmlModel, rows_are_exact  # noqa: E402
from codespec.ggml.llama import Settings  # noqa: E402

BASE = 1000  # token ids of ordinary text in the real vocabulary


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("ggml") / "tiny-q4.gguf"
    return write_tiny_gguf(path, hidden=128, quantized=True, live_tokens=range(BASE, BASE + 6))


def model(path, **kw) -> GgmlModel:
    return GgmlModel(
        str(path), settings=Settings(n_ctx=1024, n_seq_max=19, library=GGML_LIBRARY), **kw
    )


def prompt(n: int, seed: int = 0) -> list[int]:
    """Repetitive text (n-gram lookup finds spans in it)."""
    motif = [BASE + (seed * 31 + 7 * i) % 97 for i in range(12)]
    return [motif[i % len(motif)] if i % 17 else BASE + i % 89 for i in range(n)]


def test_a_row_is_the_same_bits_alone_and_in_a_wider_pass(tiny_gguf):
    target = model(tiny_gguf)
    assert rows_are_exact(target)
    assert target.ids == []  # the check leaves nothing cached


def test_tree_nodes_equal_plain_decoding_of_their_branch_and_the_kept_path_continues(tiny_gguf):
    target = model(tiny_gguf)
    ids = prompt(80)
    target.prefill(ids)
    base = len(target.ids)
    a, b, c = BASE + 1, BASE + 2, BASE + 3
    # root -> a -> c, root -> b: three rows over the cache (plus a padding row)
    mask = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=np.bool_)
    rows = target.forward([BASE, a, b, c], tree_mask=mask, depths=[0, 1, 1, 2])
    target.keep(base + 1, [base + 1, base + 3])  # accept a, c; b is parked
    assert target.ids == ids + [BASE, a, c] and target.cells.parked == 1
    after_tree = target.forward([BASE + 4])[0]

    target.crop(base)
    plain_a = [target.forward([t])[0] for t in (BASE, a, c, BASE + 4)]
    target.crop(base + 1)
    plain_b = target.forward([b])[0]
    assert np.array_equal(rows[0], plain_a[0]) and np.array_equal(rows[1], plain_a[1])
    assert np.array_equal(rows[3], plain_a[2]) and np.array_equal(rows[2], plain_b)
    assert np.array_equal(after_tree, plain_a[3])


PROMPTS = [prompt(70, 0), prompt(90, 1), prompt(40, 2)]


def make_engine(target: GgmlModel, draft: GgmlModel | None = None) -> Engine:
    """An engine whose policy prices every width alike, so that it verifies what the n-gram
    proposer offers on any CPU."""
    mode = "on" if draft else "off"
    policy = SpeculationPolicy(draft_mode=mode)  # (the engine caps trees at the backend's rows)
    for width in (1, 2, 4, 8):
        policy.costs.observe_pass(width, 0.1)
    return Engine(target, draft, policy=policy, ngram=NgramProposer(min_ngram=1, branches=3))


def test_speculative_greedy_equals_plain_greedy_on_the_same_backend(tiny_gguf):
    engine = make_engine(model(tiny_gguf))
    proposed = widest = 0
    for ids in PROMPTS:
        plain = engine.generate(ids, GenerationParams(max_tokens=40, speculate=False))
        expected = plain.run()
        assert plain.stats.target_passes == 39  # one token a pass
        fast = engine.generate(ids, GenerationParams(max_tokens=40, use_draft=False))
        assert fast.run() == expected
        proposed += fast.stats.proposed["ngram"]
        widest = max(widest, max(rows for rows, _, _ in fast.stats.pass_log))
    assert proposed > 0  # speculation ran (this random model's text is seldom predictable)
    assert widest <= engine.target.max_pass_rows  # no pass wider than the backend allows


def test_the_target_drafting_for_itself_is_always_right(tiny_gguf):
    """A draft with the target's own numbers (padded too) proposes what the target chooses:
    every drafted token is accepted, in fewer passes, and the output is plain greedy's."""
    engine = make_engine(model(tiny_gguf), draft=model(tiny_gguf))
    for ids in PROMPTS[:2]:
        expected = engine.generate(ids, GenerationParams(max_tokens=40, speculate=False)).run()
        fast = engine.generate(ids, GenerationParams(max_tokens=40, use_ngram=False))
        assert fast.run() == expected
        stats = fast.stats
        assert stats.accepted["draft"] == stats.proposed["draft"] > 0
        assert stats.target_passes < 39


def test_places_are_parked_and_restored_exactly(tiny_gguf):
    target = model(tiny_gguf, slots=3)
    one, two = prompt(300, 3), prompt(300, 4)
    first, _, _ = target.prefill(one)
    target.prefill(two)  # another place: the first is parked as bytes
    assert len(target.pool.parked) == 1
    again, reused, computed = target.prefill(one)
    assert (reused, computed) == (len(one) - 1, 1)
    assert np.array_equal(first, again)


def test_a_stopped_prefill_leaves_the_cache_as_it_was(tiny_gguf):
    target = model(tiny_gguf)
    ids = prompt(400, 5)
    target.prefill(ids[:100])
    stop = StopSignal()
    stop.cancel()  # preempts: the chunk stops between graph nodes
    with pytest.raises(Cancelled):
        target.prefill(ids, stop=stop)
    assert target.ids == ids[:100]
    _, reused, computed = target.prefill(ids)  # what was computed before stays
    assert (reused, computed) == (100, 300) and target.ids == ids


def test_a_cancelled_request_leaves_a_plain_sequence(tiny_gguf):
    engine = make_engine(model(tiny_gguf))
    ids = PROMPTS[0]
    expected = engine.generate(ids, GenerationParams(max_tokens=30, speculate=False)).run()
    stop = CancelAfter(3)
    engine.generate(ids, GenerationParams(max_tokens=30, use_draft=False), stop).run()
    assert engine.target.tree is None
    assert engine.generate(ids, GenerationParams(max_tokens=30, use_draft=False)).run() == expected


def test_compaction_gives_parked_cells_back_and_keeps_the_text(tiny_gguf):
    target = model(tiny_gguf)
    ids = prompt(120, 6)
    target.prefill(ids)
    mask = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=np.bool_)
    for step in range(5):  # each pass keeps one branch and parks the other
        base = len(target.ids)
        target.forward([BASE + step, BASE + 50, BASE + 60], tree_mask=mask, depths=[0, 1, 1])
        target.keep(base + 1, [base + 1])
    assert target.cells.parked == 5
    before = target.forward([BASE])[0]
    target.crop(len(target.ids) - 1)
    target.compact()
    assert target.cells.parked == 0
    assert np.array_equal(target.forward([BASE])[0], before)
    saved = target.llama.save(PARKED)
    assert len(saved) < len(target.llama.save(TEXT))  # nothing parked any more


def test_the_backend_choice_times_each_backend_once_and_reads_it_back(
    tiny_gguf, tmp_path, monkeypatch
):
    """``--backend auto``: both targets timed one after the other (the first closed before
    the second loads), the figures kept per machine and read back at the next start; a
    damaged file is measured again rather than trusted."""
    from helpers import tiny_qwen2

    from codespec import backend_choice
    from codespec.models import FimTokens, ModelSource, PairManifest
    from codespec.torch_backend.kvcache import CachedModel

    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    src = ModelSource(source="pypi-parts", label="tiny", sha256="ab" * 32)
    manifest = PairManifest("tiny", "", src, None, FimTokens("<p>", "<s>", "<m>"))
    events: list[str] = []

    def on_ggml():
        events.append("ggml")
        target = model(tiny_gguf)
        real_close = target.close

        def close():
            events.append("ggml closed")
            real_close()

        target.close = close
        return target

    def on_torch():
        events.append("torch")
        return CachedModel(tiny_qwen2(0, vocab=2048))

    assert backend_choice.cached(manifest, exact=False) is None
    loaders = {"ggml": on_ggml, "torch": on_torch}
    prices = backend_choice.measure(manifest, lambda m: None, loaders, exact=False)
    assert events == ["ggml", "ggml closed", "torch"]
    assert set(prices) == {"ggml", "torch"} and all(p > 0 for p in prices.values())
    assert backend_choice.cached(manifest, exact=False) == pytest.approx(prices, abs=1e-4)
    assert backend_choice.faster(prices) == min(prices, key=prices.get)
    assert backend_choice.cached(manifest, exact=True) is None  # measured apart: other passes

    backend_choice.verdict_file(manifest, exact=False).write_text('{"not": "figures"')
    assert backend_choice.cached(manifest, exact=False) is None


def test_auto_runs_ggml_untimed_and_times_the_backends_only_for_exact_rows(tmp_path, monkeypatch):
    """Without ``--exact``, ``auto`` on a CPU picks ggml (fastest on every CPU measured) with
    no timing, so no torch and no torch conversion at set-up; with it, the backends are timed
    (here: read back from figures kept as a timing leaves them)."""
    from codespec import backend_choice
    from codespec.machine import machine_fingerprint
    from codespec.models import FimTokens, ModelSource, PairManifest
    from codespec.runtime import choose_backend

    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    src = ModelSource(source="pypi-parts", label="tiny", sha256="cd" * 32)
    manifest = PairManifest("tiny", "", src, None, FimTokens("<p>", "<s>", "<m>"))

    def no_timing(*args):
        raise AssertionError("timed")

    monkeypatch.setattr(backend_choice, "measure", no_timing)
    monkeypatch.setattr(backend_choice, "target_loaders", lambda *args: {})
    assert choose_backend(manifest, "cpu", "auto", exact=False) == "ggml"
    assert not (tmp_path / "cache").exists()
    with pytest.raises(AssertionError, match="timed"):
        choose_backend(manifest, "cpu", "auto", exact=True)
    verdict = backend_choice.verdict_file(manifest, exact=True)
    verdict.parent.mkdir(parents=True)
    verdict.write_text(json.dumps({machine_fingerprint(): {"ggml": 2.0, "torch": 1.0}}))
    assert choose_backend(manifest, "cpu", "auto", exact=True) == "torch"
    assert choose_backend(manifest, "cpu", "auto", exact=False) == "ggml"


def test_the_engine_runs_on_the_free_cores_and_a_row_does_not_depend_on_them(tiny_gguf):
    """Threads follow the cores other processes leave free (``machine.FreeCores``), request by
    request; a cached prefix written on two threads and read on one gives plain greedy's
    tokens all the same."""
    free = [2]
    engine = make_engine(model(tiny_gguf))
    engine.free_threads = lambda: free[0]
    expected = engine.generate(PROMPTS[0], GenerationParams(max_tokens=30, speculate=False)).run()
    assert engine.target.llama.threads == 2
    free[0] = 1
    fast = engine.generate(PROMPTS[0], GenerationParams(max_tokens=30, use_draft=False))
    assert fast.run() == expected and fast.stats.cached_tokens > 0
    assert engine.target.llama.threads == 1
    engine.target.reset()  # all of it computed on one thread
    assert engine.generate(PROMPTS[0], GenerationParams(max_tokens=30, speculate=False)).run() == (
        expected
    )


def test_a_keystrokes_new_ids_are_one_padded_pass_with_decodings_bits(tiny_gguf):
    """The few ids a keystroke adds to a cached prompt are computed in one padded pass, and
    give what decoding them one at a time gives."""
    target = model(tiny_gguf)
    ids = prompt(200, 7)
    typed = [BASE + 11, BASE + 12, BASE + 13]
    target.prefill(ids)
    calls = target.forward_calls
    logits, reused, computed = target.prefill(ids + typed)
    assert (reused, computed, target.forward_calls - calls) == (len(ids), 3, 1)
    target.crop(len(ids))
    one_at_a_time = [target.forward([t])[0] for t in typed][-1]
    assert np.array_equal(logits, one_at_a_time)


def test_settings_reach_llama_cpp_and_the_file_is_read_not_mapped(tiny_gguf):
    """A field the parameter structs lack is an error, not a Python attribute ctypes adds
    silently; by default the weights are read into llama.cpp's buffers (the file is not kept
    mapped beside the repacked copies), and mapping it is still a choice."""
    import ctypes

    from codespec.ggml.libraries import LibraryError, _set

    class Params(ctypes.Structure):
        _fields_ = [("use_mmap", ctypes.c_bool)]

    with pytest.raises(LibraryError, match="load_mode"):
        _set(Params(), "load_mode", 0)

    def mapped() -> bool:
        with open("/proc/self/maps") as maps:
            return str(tiny_gguf) in maps.read()

    target = model(tiny_gguf)
    assert not mapped()
    target.close()
    # (ik_llama.cpp always reads a file it repacks at load: mapping is a choice without it)
    repack = GGML_LIBRARY == "llama.cpp"
    settings = Settings(n_ctx=1024, n_seq_max=19, mmap=True, repack=repack, library=GGML_LIBRARY)
    target = GgmlModel(str(tiny_gguf), settings=settings)
    assert mapped()
    target.close()
