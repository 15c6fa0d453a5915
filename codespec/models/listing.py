"""The models codespec can run here, as rows: the embedded pair first, then the GGUF files other
tools keep (``discovery.py``), each with what its metadata says and the draft that pairs with it.
``codespec models`` prints them; the daemon answers ``codespec/models`` with them."""

from __future__ import annotations

from dataclasses import asdict

from ..printable import printable
from . import DEFAULT_PAIR, ModelError, load_manifest
from .discovery import find_models
from .gguf_info import read_gguf_info
from .user_models import embedded_drafts, paired_draft

EMBEDDED = "embedded"  # the store of the embedded pair's row


def model_rows(folders: tuple[str, ...] = ()) -> list[dict]:
    """One row per model: ``name`` (what ``--model`` takes; the pair's name for the embedded
    row) and ``store``, then the metadata, or ``error`` for a file that cannot be read."""
    rows: list[dict] = []
    drafts = embedded_drafts()
    default = load_manifest(DEFAULT_PAIR)
    rows.append(
        {
            "name": DEFAULT_PAIR,
            "store": EMBEDDED,
            "label": default.target.label,
            "description": default.description,
        }
    )
    for found in find_models(folders):
        try:
            info = read_gguf_info(found.path)
        except ModelError as exc:
            rows.append({"name": found.name, "store": found.store, "error": str(exc)})
            continue
        rows.append(
            {
                "name": found.name,
                "store": found.store,
                "label": info.name,
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
    return [{key: _shown(value) for key, value in row.items()} for row in rows]


def _shown(value: object) -> object:
    """A row's text as a terminal or an editor may show it: a store's file names and a model's
    metadata are anyone's words (``printable.py``)."""
    return printable(value) if isinstance(value, str) else value
