"""``codespec prepare``: join, verify and convert a pair's weights once."""

from __future__ import annotations

import argparse

from .common import Subparsers, add_model_options, note, pair_of


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("prepare", help="join, verify and convert a pair's weights (once)")
    add_model_options(p)


def run(args: argparse.Namespace) -> int:
    """Prepare the form the chosen backend runs: the GGUF files, the tokenizer, the kernel
    library measured for this machine and the draft's trimmed head for ggml, quantized tensors
    for torch on the CPU, bf16 on a GPU."""
    from ..library_choice import choose_library
    from ..models import (
        choose_device,
        gguf_file,
        load_manifest,
        prepared_form,
        quantize_mode,
        resolve_source,
        tokenizer_folder,
    )
    from ..models.sources import source_key
    from ..runtime import choose_backend, trimmed_draft_of

    manifest = pair_of(args)
    manifest = load_manifest(manifest) if isinstance(manifest, str) else manifest
    device = choose_device(args.device)
    if choose_backend(manifest, device, args.backend, args.quantize, note, args.exact) == "ggml":
        tokenizer_folder(manifest.target, manifest.install_hint, progress=note)
        for src in (manifest.target, manifest.draft):
            if src is not None:
                print(f"{src.label}: {gguf_file(src, manifest.install_hint)}")
        target = gguf_file(manifest.target, manifest.install_hint)
        key = source_key(manifest.target, target)
        library = choose_library(args.kernels, target, key, args.exact, note)
        print(f"kernels: {library}")
        if manifest.draft is not None:  # (its head trimmed to code's tokens: ggml/trimmed_vocab.py)
            trimmed = trimmed_draft_of(
                manifest.draft, gguf_file(manifest.draft, manifest.install_hint), note
            )
            if trimmed is not None:
                print(f"{manifest.draft.label}, trimmed head: {trimmed[0]}")
        return 0
    mode = quantize_mode(manifest, device, args.quantize)
    for src in (manifest.target, manifest.draft):
        if src is not None:
            form = prepared_form(src, mode)
            folder = resolve_source(src, manifest.install_hint, progress=note, form=form)
            print(f"{src.label}: {folder}")
    return 0
