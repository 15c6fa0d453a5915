"""A draft with a trimmed vocabulary (``codespec/ggml/trimmed_vocab.py``): the map keeps control
tokens and the listed ones, stands in for the rest by their longest kept prefix; the rewritten
GGUF gives the kept rows' logits of the full one (a real llama.cpp load of a tiny random GGUF);
the engine over it emits exactly the target's plain greedy output, with the draft's guesses
accepted; and the shipped code-token list fits the embedded pair's vocabulary."""

from pathlib import Path

import numpy as np
import pytest
from helpers import GGML_LIBRARY, GGML_MODULE, write_tiny_gguf

from codespec.engine import Engine, GenerationParams
from codespec.engine.policy import SpeculationPolicy
from codespec.ggml.trimmed_vocab import (
    DEFAULT_SIZE,
    code_tokens,
    read_vocabulary,
    vocabulary_map,
)

BASE = 1000  # token ids of ordinary text in the real vocabulary (as test_ggml_backend's)


def test_the_map_keeps_control_tokens_then_the_listed_and_stands_in_by_prefix():
    tokens = ["<end>", "a", "ab", "abc", "b", "x", "<fim>", "zz"]
    types = [3, 1, 1, 1, 1, 1, 3, 1]
    vocab = vocabulary_map(tokens, types, ("ab", "b", "a", "x", "zz", "abc"), size=5)
    assert vocab is not None
    # control tokens first, then the list in its order, cut at the size
    assert [tokens[i] for i in vocab.kept] == ["<end>", "<fim>", "ab", "b", "a"]
    full_of = {tokens[i]: int(vocab.kept[vocab.to_trimmed[i]]) for i in range(len(tokens))}
    assert tokens[full_of["abc"]] == "ab"  # its longest kept prefix
    assert tokens[full_of["x"]] == "<end>"  # no kept prefix: the first kept token
    assert all(tokens[full_of[t]] == t for t in ("<end>", "<fim>", "ab", "b", "a"))


def test_another_tokenizers_vocabulary_keeps_its_full_head():
    tokens = [f"t{i}" for i in range(100)]
    assert vocabulary_map(tokens, [1] * 100, ("t1", "other", "t2"), size=10) is None
    assert vocabulary_map(tokens, [1] * 100, ("t1", "t2"), size=100) is None  # nothing to cut


def test_the_shipped_list_fits_the_embedded_pair_and_keeps_its_special_tokens():
    from codespec.models import gguf_file, load_manifest

    listed = code_tokens()
    assert len(listed) >= DEFAULT_SIZE and len(set(listed)) == len(listed)
    manifest = load_manifest()
    assert manifest.draft is not None
    try:
        path = gguf_file(manifest.draft, manifest.install_hint)
    except Exception as exc:  # (the data packages are not installed)
        pytest.skip(f"the embedded draft is not here: {exc}")
    from gguf import GGUFReader

    tokens, types = read_vocabulary(GGUFReader(str(path)))
    vocab = vocabulary_map(tokens, types, listed, DEFAULT_SIZE)
    assert vocab is not None and vocab.size == DEFAULT_SIZE
    kept = {tokens[i] for i in vocab.kept}
    for special in ("<|endoftext|>", "<|fim_middle|>", "<|file_sep|>", "<|im_end|>"):
        assert special in kept
    for common in ("Ġreturn", "Ġself", "(", "ĠĠĠĠ", "):Ċ", "Ġconst", "Ġfunc", "Ġfn"):
        assert common in kept, common


# -- on llama.cpp ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    pytest.importorskip(GGML_MODULE)
    path = tmp_path_factory.mktemp("trim") / "tiny-q4.gguf"
    return write_tiny_gguf(path, hidden=128, quantized=True, live_tokens=range(BASE, BASE + 6))


@pytest.fixture(scope="module")
def trimmed(tiny: Path, tmp_path_factory):
    """The tiny model trimmed to its control tokens and the ids its prompts and output use."""
    from gguf import GGUFReader

    from codespec.ggml.trimmed_vocab import write_trimmed_gguf

    reader = GGUFReader(str(tiny))
    tokens, types = read_vocabulary(reader)
    listed = tuple(tokens[i] for i in [0, *range(BASE, BASE + 100)])
    vocab = vocabulary_map(tokens, types, listed, size=200)
    assert vocab is not None
    out = tmp_path_factory.mktemp("trim") / "trimmed.gguf"
    write_trimmed_gguf(reader, vocab.kept, out)
    return out, vocab, len(tokens)


def model(path: Path):
    from codespec.ggml.backend import GgmlModel
    from codespec.ggml.llama import Settings

    return GgmlModel(
        str(path), settings=Settings(n_ctx=1024, n_seq_max=19, library=GGML_LIBRARY), padded=False
    )


def prompt(n: int) -> list[int]:
    motif = [BASE + 7 * i % 97 for i in range(12)]
    return [motif[i % len(motif)] if i % 17 else BASE + i % 89 for i in range(n)]


def test_the_trimmed_gguf_gives_the_kept_rows_of_the_full_logits(tiny, trimmed, capfd):
    from codespec.ggml.trimmed_vocab import TrimmedDraft

    path, vocab, full_size = trimmed
    capfd.readouterr()
    full, small = model(tiny), model(path)
    # llama.cpp's notes on loading (its dummy tokens, say) stay in its silent logger
    assert capfd.readouterr().err == ""
    assert small.vocab_size == vocab.size < full.vocab_size
    draft = TrimmedDraft(small, vocab, full_size)
    ids = prompt(60)
    want, _, _ = full.prefill(ids)
    got, _, _ = draft.prefill(ids)
    assert draft.ids == ids and draft.vocab_size == full_size
    np.testing.assert_allclose(got[vocab.kept], want[vocab.kept], rtol=1e-5, atol=1e-5)
    outside = np.ones(full_size, dtype=bool)
    outside[vocab.kept] = False
    assert np.all(np.isneginf(got[outside]))
    # a target vocabulary that runs past the draft's (its padding ids) gets stand-ins too
    wider = TrimmedDraft(small, vocab, full_size + 128)
    assert wider.prefill(ids + [full_size + 100])[0].shape == (full_size + 128,)
    wider.reset()
    draft.prefill(ids)
    step = draft.forward([BASE + 3], all_logits=False)
    plain = full.forward([BASE + 3], all_logits=False)
    np.testing.assert_allclose(step[-1][vocab.kept], plain[-1][vocab.kept], rtol=1e-5, atol=1e-5)
    draft.crop(len(ids))
    assert draft.ids == ids


def test_the_engine_over_a_trimmed_draft_emits_the_targets_plain_greedy_output(tiny, trimmed):
    from codespec.ggml.trimmed_vocab import TrimmedDraft

    path, vocab, full_size = trimmed
    policy = SpeculationPolicy(draft_mode="on")
    for width in (1, 2, 4, 8):
        policy.costs.observe_pass(width, 0.1)
    engine = Engine(model(tiny), TrimmedDraft(model(path), vocab, full_size), policy=policy)
    for n in (50, 80):
        ids = prompt(n)
        expected = engine.generate(ids, GenerationParams(max_tokens=30, speculate=False)).run()
        fast = engine.generate(ids, GenerationParams(max_tokens=30, use_ngram=False))
        assert fast.run() == expected
        assert fast.stats.proposed["draft"] > 0 and fast.stats.accepted["draft"] > 0


def test_a_pairs_draft_is_trimmed_once_and_full_when_asked(tiny, tmp_path, monkeypatch):
    """``load_ggml_draft``: the trimmed file is written into the cache once (a later load
    reads it as it is) and the draft maps ids; ``full`` loads the draft's own file."""
    from codespec.ggml.trimmed_vocab import TrimmedDraft
    from codespec.models.manifests import ModelSource
    from codespec.runtime import load_ggml_draft

    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    source = ModelSource(source="gguf", label="tiny draft", path=str(tiny))
    said: list[str] = []
    model, draft = load_ggml_draft(source, tiny, "code", 151936, said.append, GGML_LIBRARY)
    assert isinstance(draft, TrimmedDraft) and draft.model is model
    assert model.vocab_size == DEFAULT_SIZE and draft.vocab_size == 151936
    written = next((tmp_path / "cache" / "draft-vocab").glob("*/draft.gguf"))
    stamp = written.stat().st_mtime_ns
    assert len(said) == 1 and "trimming" in said[0]
    _, again = load_ggml_draft(source, tiny, "code", 151936, said.append, GGML_LIBRARY)
    assert isinstance(again, TrimmedDraft) and written.stat().st_mtime_ns == stamp
    assert len(said) == 1  # read, not written again
    full, drafter = load_ggml_draft(source, tiny, "full", 151936, said.append, GGML_LIBRARY)
    assert drafter is full and full.vocab_size == 151936  # no map: the draft drafts itself


def test_a_damaged_or_unwritable_cache_never_stops_the_draft(tiny, tmp_path, monkeypatch):
    """A truncated trimmed file or map is written again; where nothing can be written the
    draft runs with its full head; each said in one line."""
    from codespec.ggml.trimmed_vocab import TrimmedDraft
    from codespec.models.manifests import ModelSource
    from codespec.runtime import load_ggml_draft

    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    source = ModelSource(source="gguf", label="tiny draft", path=str(tiny))
    said: list[str] = []
    load_ggml_draft(source, tiny, "code", 151936, said.append, GGML_LIBRARY)
    folder = next((tmp_path / "cache" / "draft-vocab").iterdir())
    ids = prompt(40)
    for damaged in ("draft.gguf", "map.npz"):
        data = (folder / damaged).read_bytes()
        (folder / damaged).write_bytes(data[: len(data) // 3])
        said.clear()
        _, draft = load_ggml_draft(source, tiny, "code", 151936, said.append, GGML_LIBRARY)
        assert isinstance(draft, TrimmedDraft), said
        assert any("trimming" in line for line in said), said  # written again
        logits, _, _ = draft.prefill(ids)
        assert np.isfinite(logits[draft.vocab.kept]).all()
    # a cache that cannot be written: the full head, in one line
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    said.clear()
    model, drafter = load_ggml_draft(source, tiny, "code", 151936, said.append, GGML_LIBRARY)
    assert drafter is model and model.vocab_size == 151936
    assert said and all("\n" not in line for line in said), said
