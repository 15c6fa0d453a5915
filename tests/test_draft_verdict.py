"""A draft that cannot pay on this machine is not loaded again at the next start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codespec import runtime
from codespec.engine.policy import SpeculationPolicy


@pytest.fixture
def pair_with_draft(tiny_manifest: Path, tmp_path: Path, monkeypatch) -> tuple[Path, list]:
    """The tiny pair with itself as draft, a fresh cache, and a log of the models loaded."""
    text = tiny_manifest.read_text()
    target = text[text.index("[target]") : text.index("[dtype]")]
    manifest = tmp_path / "pair.toml"
    manifest.write_text(text + target.replace("[target]", "[draft]"))
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    loaded: list[str] = []
    real_load = runtime.load_model

    def logged(src, *args):
        loaded.append(src.label)
        return real_load(src, *args)

    monkeypatch.setattr(runtime, "load_model", logged)
    return manifest, loaded


def load(manifest: Path, **kwargs) -> runtime.LoadedPair:
    return runtime.load_pair(str(manifest), progress=lambda m: None, **kwargs)


def test_a_released_draft_is_not_loaded_at_the_next_start(pair_with_draft, monkeypatch):
    manifest, loaded = pair_with_draft
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", lambda self: False)
    first = load(manifest)
    assert len(loaded) == 2 and first.engine.drafter is None
    assert "draft released" in first.quantization
    # what is kept is the measured ratio, as a number (the note is made from it)
    path = runtime.draft_verdict.verdict_file(first.manifest, first.device, "auto")
    ratio = json.loads(path.read_text())[runtime.draft_verdict.machine_fingerprint()]
    assert ratio == round(first.engine.draft_life.step_ratio, 3) and ratio > 0
    loaded.clear()
    second = load(manifest)
    assert len(loaded) == 1 and second.engine.drafter is None
    assert "draft not loaded: an earlier start measured that a step costs" in second.quantization
    assert second.engine.policy.draft_mode == "off"
    loaded.clear()
    forced = load(manifest, draft_mode="on")  # asked for: loaded whatever was measured
    assert len(loaded) == 2 and forced.engine.drafter is not None


def test_the_verdict_is_per_machine_and_not_taken_when_forced(pair_with_draft, monkeypatch):
    manifest, loaded = pair_with_draft
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", lambda self: False)
    load(manifest)
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", lambda self: True)
    load(manifest, draft_mode="on")  # measured while forced: no verdict either way
    loaded.clear()
    assert load(manifest).engine.drafter is None and len(loaded) == 1
    # the verdict is per machine: another fingerprint measures again, and this time it pays
    monkeypatch.setattr(runtime.draft_verdict, "machine_fingerprint", lambda: "another")
    loaded.clear()
    kept = load(manifest)
    assert len(loaded) == 2 and kept.engine.drafter is not None
    loaded.clear()
    assert load(manifest).engine.drafter is not None and len(loaded) == 2


def test_a_damaged_verdict_file_means_measuring_again(pair_with_draft):
    manifest, loaded = pair_with_draft
    pair = load(manifest, use_draft=False)
    path = runtime.draft_verdict.verdict_file(pair.manifest, pair.device, "auto")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[not json")
    loaded.clear()
    load(manifest)
    assert len(loaded) == 2
    # a value that is not a measured ratio (text, as files before the ratio was kept held)
    fingerprint = runtime.draft_verdict.machine_fingerprint()
    for value in ("a step costs 0.61 of a target pass", True, -1, None):
        path.write_text(json.dumps({fingerprint: value}))
        loaded.clear()
        load(manifest)
        assert len(loaded) == 2, value


def test_a_draft_kept_at_load_goes_once_real_passes_show_it_cannot_pay(
    pair_with_draft, monkeypatch
):
    """Calibration takes one look; the running costs of real requests decide again, and that
    verdict is kept for the next start too."""
    from codespec.engine import GenerationParams
    from codespec.engine.calibration import DRAFT_RECHECK_PASSES

    manifest, loaded = pair_with_draft
    judge = SpeculationPolicy.draft_can_pay
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", lambda self: True)
    pair = load(manifest)
    engine = pair.engine
    assert engine.drafter is not None
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", judge)
    # the real passes show a draft step costing as much as ten target passes
    engine.policy.costs.draft_step_s.value = 10 * engine.policy.costs.price(1)
    prompt = pair.tokenizer.encode("def add(a, b):\n    return")
    while engine.policy.costs.passes < DRAFT_RECHECK_PASSES:
        assert engine.drafter is not None  # too few passes yet to judge again
        list(engine.generate(prompt, GenerationParams(max_tokens=4, use_ngram=False)))
        prompt = prompt + [prompt[-1]]
    assert engine.drafter is None and engine.policy.draft_mode == "off"
    assert engine.draft_life.note.startswith("draft released: a step costs")
    assert engine.draft_life.step_ratio > 1  # the running costs' ratio (passes moved it from 10)
    # still generates, without it
    assert list(engine.generate(prompt, GenerationParams(max_tokens=4)))
    loaded.clear()
    assert load(manifest).engine.drafter is None and len(loaded) == 1


def test_a_draft_that_can_pay_stays_after_the_recheck(pair_with_draft, monkeypatch):
    from codespec.engine import GenerationParams
    from codespec.engine.calibration import DRAFT_RECHECK_PASSES

    manifest, _ = pair_with_draft
    monkeypatch.setattr(SpeculationPolicy, "draft_can_pay", lambda self: True)
    engine = load(manifest).engine
    prompt = list(range(5, 25))
    while engine.policy.costs.passes < DRAFT_RECHECK_PASSES + 8:
        list(engine.generate(prompt, GenerationParams(max_tokens=8)))
        prompt = prompt + [7]
    assert engine.drafter is not None and engine.policy.draft_mode == "auto"
