"""``codespec models``: the models codespec can run here, the embedded pair first, then the GGUF
files other tools keep (``models/discovery.py``), with what each file's metadata says."""

from __future__ import annotations

import argparse
import json

from .common import Subparsers, model_choice, path_text


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("models", help="the models found on this machine (Ollama, LM Studio, ...)")
    p.add_argument("--json", action="store_true", help="every field as JSON")
    p.add_argument(
        "--folder",
        action="append",
        type=path_text,
        default=[],
        metavar="DIR",
        help="also look in DIR (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from ..models.listing import model_rows

    rows = model_rows(tuple(args.folder) + model_choice(args).folders)
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
