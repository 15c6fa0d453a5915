"""Model store: manifests, part checks, atomic preparation, damaged-cache detection."""

import hashlib
import json
import sys

import pytest
from helpers import tiny_qwen2

from codespec import models
from codespec.models import ModelError, ModelSource, load_manifest


def test_default_manifest_is_complete():
    m = load_manifest()
    assert m.target.parts == 22 and m.target.size == 1117320768
    assert m.draft is not None and m.draft.parts == 6 and m.draft.size == 491400064
    assert m.tokens.fim_prefix == "<|fim_prefix|>" and "<|endoftext|>" in m.tokens.stop


def test_manifest_with_unknown_keys_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        '[target]\nsource = "hf-dir"\npth = "x"\n[tokens]\nfim_prefix="a"\n'
        'fim_suffix="b"\nfim_middle="c"\n'
    )
    with pytest.raises(ModelError, match="unknown keys"):
        load_manifest(str(path))


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Two installed 'data packages' holding the halves of a (bogus) GGUF file."""
    payload = b"GGUF" + bytes(range(256)) * 64
    halves = [payload[: len(payload) // 2], payload[len(payload) // 2 :]]
    for i, half in enumerate(halves, 1):
        pkg = tmp_path / "site" / f"codespec_testparts_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(half)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("CODESPEC_CACHE_DIR", str(tmp_path / "cache"))
    return ModelSource(
        source="pypi-parts",
        label="test model",
        package_prefix="codespec_testparts_part",
        parts=2,
        gguf_name="test.gguf",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )


def test_checksum_mismatch_is_reported(fake_parts):
    bad = ModelSource(**{**fake_parts.__dict__, "sha256": "0" * 64})
    with pytest.raises(ModelError, match="sha256 .* does not match"):
        models.prepare_pypi_parts(bad, "reinstall it")
    assert not any(models.cache_root().iterdir())  # nothing half-written is left


def test_size_mismatch_is_reported(fake_parts):
    bad = ModelSource(**{**fake_parts.__dict__, "size": 12})
    with pytest.raises(ModelError, match="expected 12"):
        models.prepare_pypi_parts(bad, "reinstall it")


def test_failed_conversion_leaves_no_cache(fake_parts):
    """The bytes verify but are no real GGUF: conversion fails, and no cache dir appears."""
    with pytest.raises(ModelError, match="cannot convert test.gguf"):
        models.prepare_pypi_parts(fake_parts, "reinstall it", progress=lambda m: None)
    assert list(models.cache_root().iterdir()) == []


def test_damaged_cache_is_detected(tmp_path):
    folder = tmp_path / "prepared"
    tiny_qwen2(seed=0).save_pretrained(str(folder), safe_serialization=True)
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    (folder / "prepared.json").write_text(json.dumps({"files": sizes}))
    assert models._cache_is_valid(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated by a crash or a full disk
    assert not models._cache_is_valid(folder)
    (folder / "prepared.json").unlink()
    assert not models._cache_is_valid(folder)


def test_pickle_only_folder_is_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    src = ModelSource(source="hf-dir", label="local", path=str(tmp_path))
    with pytest.raises(ModelError, match="does not load pickle"):
        models.resolve_source(src, "")


AVX2_CPUINFO = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
BF16_CPUINFO = "model name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n"


def test_cpu_dtype_policy(monkeypatch):
    from codespec import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: AVX2_CPUINFO)
    import torch

    assert models.choose_device_dtype({"cpu": "auto"}, "cpu") == ("cpu", torch.float32)
    monkeypatch.setattr(machine, "_cpuinfo", lambda: BF16_CPUINFO)
    assert models.choose_device_dtype({"cpu": "auto"}, "cpu") == ("cpu", torch.bfloat16)
    assert sys.modules["codespec.models"] is models


@pytest.mark.parametrize(
    "cpuinfo, kind, model",
    [
        (AVX2_CPUINFO, "AVX2 (no AVX-512)", "AMD EPYC"),
        (BF16_CPUINFO, "AVX-512 with bf16", "Intel Xeon"),
        ("model name\t: Xeon\nflags\t\t: avx2 avx512f avx512bw\n", "AVX-512 (no bf16)", "Xeon"),
    ],
)
def test_the_machine_is_told_by_its_flags(monkeypatch, cpuinfo, kind, model):
    from codespec import machine

    monkeypatch.setattr(machine, "_cpuinfo", lambda: cpuinfo)
    assert machine.cpu_kind() == kind and machine.cpu_model() == model
    assert set(machine.kernel_flags()) <= machine.cpu_flags()
    assert "sse2" not in machine.kernel_flags() and "avx2" in machine.kernel_flags()
