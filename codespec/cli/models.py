"""``codespec models``: the models codespec can run here, the embedded pair first, then the GGUF
files other tools keep (``models/discovery.py``), with what each file's metadata says."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from .common import Subparsers, model_choice


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("models", help="the models found on this machine (Ollama, LM Studio, ...)")
    p.add_argument("--json", action="store_true", help="every field as JSON")
    p.add_argument(
        "--folder", action="append", default=[], metavar="DIR", help="also look in DIR (repeatable)"
    )


def run(args: argparse.Namespace) -> int:
    from ..models import DEFAULT_PAIR, ModelError, load_manifest
    from ..models.discovery import find_models
    from ..models.gguf_info import read_gguf_info
    from ..models.user_models import embedded_drafts, paired_draft

    rows: list[dict] = []
    drafts = embedded_drafts()
    default = load_manifest(DEFAULT_PAIR)
    rows.append({"name": DEFAULT_PAIR, "store": "embedded", "description": default.description})
    for found in find_models(tuple(args.folder) + model_choice(args).folders):
        try:
            info = read_gguf_info(found.path)
        except ModelError as exc:
            rows.append({"name": found.name, "store": found.store, "error": str(exc)})
            continue
        rows.append(
            {
                "name": found.name,
                "store": found.store,
                "path": str(found.path),
                "architecture": info.architecture,
                "parameters": info.parameters,
                "quantization": info.quantization,
                "context_length": info.context_length,
                "bytes": info.bytes,
                "fim": info.has_fim,
                "tokens": asdict(info.tokens),
                "draft": draft.label if (draft := paired_draft(info, drafts)) else None,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':44} {'arch':10} {'params':>7} {'quant':8} {'context':>7}  fim  draft")
    for row in rows:
        if "description" in row:
            print(f"{row['name']:44} {row['description']}")
        elif "error" in row:
            print(f"{row['name']:44} unreadable: {row['error']}")
        else:
            params = f"{row['parameters'] / 1e9:.1f}B"
            fim = "yes" if row["fim"] else "no (prefix only)"
            print(
                f"{row['name']:44} {row['architecture']:10} {params:>7} {row['quantization']:8} "
                f"{row['context_length']:>7}  {fim:3}  {row['draft'] or '-'}"
            )
    return 0
