"""A draft whose head predicts only the tokens code uses most (a trimmed draft vocabulary).

A small draft's output matrix is a large share of what each of its steps reads, and most of its
rows are tokens code never uses (``docs/benchmarks.md``, "A trimmed draft vocabulary").
FR-Spec and VocabTrim restrict a draft's head to the most frequent tokens with no retraining. The
target keeps its full head, so verification, and every token codespec emits, are unchanged: only
the draft's guesses lose the rare tokens.

The draft's GGUF is rewritten once (cached beside the prepared models) with the kept rows of its
output and embedding matrices and no tokenizer (llama.cpp's ``none`` vocabulary, that many
tokens): an id in it is a position in the kept list. ``TrimmedDraft`` maps ids both ways. A
context token outside the list reaches the draft as a stand-in, the longest kept token its text
begins with: the draft reads that token's embedding, so its guesses there are a little worse,
never the output.

The kept list is counted once on code (``scripts/count_code_tokens.py`` wrote
``code_tokens.json.gz``); a draft whose vocabulary lacks the listed tokens (another tokenizer)
runs with its full head.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..engine.stop import StopSignal
from ..engine.tree import Logits
from .backend import GgmlModel

if TYPE_CHECKING:
    from gguf import GGUFReader

CODE_TOKENS = Path(__file__).with_name("code_tokens.json.gz")
# Of the 151,936 tokens, the 65,536 code uses most: a smaller head guesses code's rarer tokens
# too seldom for its cheaper step to pay (``docs/benchmarks.md``, "A trimmed draft vocabulary").
DEFAULT_SIZE = 65536
FORMAT = 1  # of the cached files: a change re-writes them
# The listed tokens a vocabulary must hold to be the one the list was counted with.
SAME_TOKENIZER = 0.99
# GGUF token types kept whatever the counts: control tokens (end of text, FIM, file separators)
# and the ones a tokenizer adds, which mark where generation ends
ALWAYS_KEPT_TYPES = (3, 4)


@cache
def code_tokens() -> tuple[str, ...]:
    """The listed token strings, the most used in code first (none where the list is missing
    or damaged: every draft then keeps its full head)."""
    try:
        with gzip.open(CODE_TOKENS, "rt", encoding="utf-8") as f:
            return tuple(str(t) for t in json.load(f)["tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()


@dataclass(frozen=True)
class VocabularyMap:
    """Ids both ways between a full vocabulary (the target's) and a trimmed one."""

    kept: np.ndarray  # trimmed id -> full id
    to_trimmed: np.ndarray  # full id -> trimmed id (a stand-in for tokens not kept)

    @property
    def size(self) -> int:
        return len(self.kept)


def vocabulary_map(
    tokens: list[str], types: list[int], listed: tuple[str, ...], size: int
) -> VocabularyMap | None:
    """The map that keeps ``tokens``' control tokens and then ``listed`` ones, ``size`` in all
    (None: ``tokens`` is not the vocabulary the list was counted with, or no smaller)."""
    index = {text: i for i, text in enumerate(tokens)}
    present = [index[t] for t in listed if t in index]
    if not listed or len(present) < SAME_TOKENIZER * len(listed) or size >= len(tokens):
        return None
    always = [i for i, kind in enumerate(types) if kind in ALWAYS_KEPT_TYPES]
    chosen = dict.fromkeys(always + present)  # (ordered, without repeats)
    kept = np.array(list(chosen)[:size], dtype=np.int32)
    position = {int(full): trimmed for trimmed, full in enumerate(kept)}
    to_trimmed = np.zeros(len(tokens), dtype=np.int32)
    for full, text in enumerate(tokens):
        if full in position:
            to_trimmed[full] = position[full]
            continue
        # the longest kept token the text begins with; a text with none gets the first kept
        for end in range(len(text) - 1, 0, -1):
            stand_in = index.get(text[:end])
            if stand_in is not None and stand_in in position:
                to_trimmed[full] = position[stand_in]
                break
    return VocabularyMap(kept=kept, to_trimmed=to_trimmed)


# -- the trimmed GGUF --------------------------------------------------------------------------


def read_vocabulary(reader: GGUFReader) -> tuple[list[str], list[int]]:
    """A GGUF's token strings and token types (none: it has no tokenizer)."""
    tokens_field = reader.fields.get("tokenizer.ggml.tokens")
    types_field = reader.fields.get("tokenizer.ggml.token_type")
    if tokens_field is None:
        return [], []
    tokens = [bytes(tokens_field.parts[i]).decode("utf-8") for i in tokens_field.data]
    types = [int(types_field.parts[i][0]) for i in types_field.data] if types_field else []
    return tokens, types or [1] * len(tokens)


def write_trimmed_gguf(reader: GGUFReader, kept: np.ndarray, out: Path) -> None:
    """The GGUF ``reader`` reads with only the ``kept`` rows of its embedding and output
    matrices and a tokenizer-less vocabulary of that many tokens (the rest copied as it is)."""
    from gguf import GGUFValueType, GGUFWriter

    arch_field = reader.fields["general.architecture"]
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    writer = GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name.startswith(("GGUF.", "tokenizer.")) or field.name in (
            "general.architecture",
            f"{arch}.vocab_size",
        ):
            continue
        kind = field.types[0]
        sub_type = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    writer.add_tokenizer_model("none")
    writer.add_vocab_size(len(kept))
    tensors = []
    for tensor in reader.tensors:
        data = tensor.data
        if tensor.name in ("token_embd.weight", "output.weight"):
            data = np.ascontiguousarray(data[kept])  # rows are whole blocks: sliced as they are
        tensors.append(data)
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in tensors:
        writer.write_tensor_data(data)
    writer.close()


def prepared_trimmed_draft(
    source: Path,
    key: str,
    cache_dir: Path,
    progress: Callable[[str], object] = print,
    size: int = DEFAULT_SIZE,
) -> tuple[Path, VocabularyMap] | None:
    """The trimmed GGUF of the draft at ``source`` and its map, written once under
    ``cache_dir`` (``key`` names the source: its digest); None where the list does not fit
    its vocabulary (remembered too)."""
    listed = code_tokens()
    digest = hashlib.sha256("\0".join(listed).encode()).hexdigest()[:8]
    final = cache_dir / f"{key[:16]}-draft{size}-{digest}-v{FORMAT}"
    if (final / "none").is_file():
        return None
    if (final / "map.npz").is_file() and (final / "draft.gguf").is_file():
        try:
            with np.load(final / "map.npz") as saved:
                vocab = VocabularyMap(saved["kept"], saved["to_trimmed"])
            if vocab.to_trimmed.max(initial=0) < vocab.size == size:
                return final / "draft.gguf", vocab
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # (damaged: written again)
            pass
        progress("the trimmed draft in the cache is damaged")
        shutil.rmtree(final, ignore_errors=True)
    progress(f"trimming the draft's head to the {size} tokens code uses most (once)")
    work = cache_dir / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(source))  # (parsing its vocabulary is most of the time taken)
        vocab = vocabulary_map(*read_vocabulary(reader), listed, size)
        if vocab is None:
            (work / "none").write_text("the draft's vocabulary is not the listed one\n")
        else:
            write_trimmed_gguf(reader, vocab.kept, work / "draft.gguf")
            np.savez(work / "map.npz", kept=vocab.kept, to_trimmed=vocab.to_trimmed)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(work, final)  # atomic: the folder appears complete or not at all
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return (final / "draft.gguf", vocab) if vocab is not None else None


def forget_trimmed_draft(folder: Path | None) -> None:
    """Remove a trimmed draft's cached folder (llama.cpp refused its file)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# -- the draft ---------------------------------------------------------------------------------


class TrimmedDraft:
    """A draft model (``engine.draft.DraftModel``) over a trimmed GGUF: it takes and gives the
    full vocabulary's ids, and its logits are full width, the tokens it cannot predict at
    minus infinity (their probability zero, also when sampling)."""

    def __init__(self, model: GgmlModel, vocab: VocabularyMap, full_size: int) -> None:
        self.model = model
        self.full_size = full_size
        # a target's vocabulary may run past the draft's (padding ids): those too get a stand-in
        missing = max(0, full_size - len(vocab.to_trimmed))
        to_trimmed = np.concatenate([vocab.to_trimmed, np.zeros(missing, dtype=np.int32)])
        self.vocab = VocabularyMap(kept=vocab.kept, to_trimmed=to_trimmed)

    @property
    def vocab_size(self) -> int:
        return self.full_size

    @property
    def ids(self) -> list[int]:
        """The cached ids as full ids (a stand-in shows as the token it stands for)."""
        return self.vocab.kept[np.asarray(self.model.ids, dtype=np.int64)].tolist()

    @property
    def threads(self) -> int:
        return self.model.threads

    def use_threads(self, n: int) -> None:
        self.model.use_threads(n)

    def prefill(
        self, ids: list[int], stop: StopSignal | None = None, chunk: int | None = None
    ) -> tuple[Logits, int, int]:
        logits, reused, computed = self.model.prefill(self._trimmed(ids), stop, chunk)
        return self._full(logits), reused, computed

    def forward(self, tokens: list[int], all_logits: bool = True) -> Logits:
        return self._full(self.model.forward(self._trimmed(tokens), all_logits=all_logits))

    def crop(self, n: int) -> None:
        self.model.crop(n)

    def reset(self) -> None:
        self.model.reset()

    def _trimmed(self, ids: list[int]) -> list[int]:
        return self.vocab.to_trimmed[np.asarray(ids, dtype=np.int64)].tolist()

    def _full(self, logits: Logits) -> Logits:
        rows = np.asarray(logits)
        full = np.full(rows.shape[:-1] + (self.full_size,), -np.inf, dtype=np.float32)
        full[..., self.vocab.kept] = rows
        return full
