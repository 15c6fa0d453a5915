"""What a GGUF file says about its model, read without its weights.

llama.cpp reads it (llama-cpp-python's low-level API, ``vocab_only``: the metadata and the
vocabulary, never the tensors), so the fill-in-the-middle tokens are the ones llama.cpp itself
would use: the file's ``tokenizer.ggml.fim_*_token_id`` keys, else its own rules for the known
families (Qwen2.5/Qwen3-Coder, CodeLlama, StarCoder2, DeepSeek-Coder, Codestral, CodeGemma).

Before llama.cpp sees a file, its first bytes must say GGUF and its size must hold a header: a
file that is not a model gets one line (``ModelError``), not whatever llama.cpp makes of it.

A model split into parts (``NAME-00001-of-00003.gguf``, as ``llama-gguf-split`` writes and the
Hugging Face repositories of large models ship) is named by its first part: llama.cpp loads the
others from beside it. Every part must be there, and its size is theirs together.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..printable import printable
from .manifests import FimTokens, ModelError

MAGIC = b"GGUF"
# What llama.cpp does not look for, by family: StarCoder2's repository tokens, CodeLlama's end
# of infill.
REPO_NAMES = ("<|repo_name|>", "<repo_name>", "<reponame>")
FILE_SEPARATORS = ("<|file_sep|>", "<file_sep>", "<filename>")
ENDS = ("<|endoftext|>", "▁<EOT>", "<EOT>", "<|fim_pad|>", "<fim_pad>")
MIN_BYTES = 24  # magic, version, tensor count, key count
META_BYTES = 512  # the longest metadata value read back (names, numbers)
SPECIAL_ATTRIBUTES = 1 << 3 | 1 << 4  # llama.cpp's CONTROL | USER_DEFINED token attributes
# a part of a split model, as llama.cpp names them (``llama_split_path``)
SPLIT_PART = re.compile(r"(?P<stem>.+)-(?P<part>[0-9]{5})-of-(?P<parts>[0-9]{5})\.gguf", re.I)
MAX_PARTS = 256
CHILD_TIMEOUT_S = 120  # reading a file's metadata in a child process (``_read_in_child``)


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    architecture: str
    name: str  # general.name, else the file's name
    parameters: int
    quantization: str  # e.g. Q4_K_M
    context_length: int
    bytes: int
    tokens: FimTokens  # its FIM tokens ("" when it has none: completions from the prefix)
    vocabulary: str  # a digest of the token list: equal digests, the same vocabulary
    layers: int = 0
    kv_width: int = 0  # numbers one token's K (or V) holds per layer: K/V heads x head size

    def cache_bytes(self, cells: int, bytes_per_number: float = 2.0) -> int:
        """The K/V cache of ``cells`` tokens (f16 numbers unless told)."""
        return int(2 * self.layers * self.kv_width * cells * bytes_per_number)

    @property
    def has_fim(self) -> bool:
        return bool(self.tokens.fim_prefix)


def check_gguf_file(path: Path) -> os.stat_result:
    """The file's status if it can be a GGUF model (a regular file with GGUF's magic); else a
    one-line ``ModelError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ModelError(f"{path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelError(f"{path}: not a regular file")
        head = os.read(fd, MIN_BYTES)
    finally:
        os.close(fd)
    if len(head) < MIN_BYTES or not head.startswith(MAGIC):
        raise ModelError(f"{path}: not a GGUF model file")
    return info


def split_parts(path: Path) -> list[Path]:
    """The files of the model ``path`` names: itself, or for the first part of a split model
    every part, in order. A later part, or a split model with a part missing, is one line."""
    match = SPLIT_PART.fullmatch(path.name)
    if match is None or int(match["parts"]) == 1:
        return [path]
    part, parts = int(match["part"]), int(match["parts"])
    if not 1 <= part <= parts <= MAX_PARTS:
        raise ModelError(f"{path}: not a part of a split model llama.cpp would load")
    if part != 1:
        first = path.with_name(f"{match['stem']}-00001-of-{match['parts']}.gguf")
        raise ModelError(f"{path}: part {part} of a split model; name its first part, {first}")
    names = [
        path.with_name(f"{match['stem']}-{i:05d}-of-{match['parts']}.gguf")
        for i in range(1, parts + 1)
    ]
    for i, name in enumerate(names[1:], start=2):
        if not name.exists():
            raise ModelError(f"{path}: part {i} of {parts} of this split model is missing")
    return names


def read_gguf_info(path: str | os.PathLike) -> GgufInfo:
    """What ``path`` holds (the module's docstring); ``ModelError`` in one line otherwise.
    Read once per file as it is now: choosing a model, pairing its draft and checking memory
    before loading all ask about the same files."""
    path = Path(path)
    stats = [check_gguf_file(part) for part in split_parts(path)]
    size = sum(s.st_size for s in stats)
    return _read(path, size, max(s.st_mtime_ns for s in stats))


@lru_cache(maxsize=64)
def _read(path: Path, size: int, _mtime_ns: int) -> GgufInfo:
    """``read_gguf_info`` for a checked file (its size and time key the cache)."""
    if sys.modules.get("ik_llama_cpp") is not None:  # (mainline cannot join a process running
        return _read_in_child(path)  # ik_llama.cpp: ``ggml/libraries.py``)
    try:
        import llama_cpp as llama
    except ImportError as exc:  # (an OSError inside: the shared library did not load)
        raise ModelError(
            f"reading a GGUF needs llama-cpp-python ({exc}): run scripts/setup.sh"
        ) from None
    params = llama.llama_model_default_params()
    params.vocab_only = True
    params.use_mmap = True
    quiet = logging.getLogger("llama-cpp-python")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL + 1)  # (llama.cpp's notes on a vocabulary, some at level 0)
    try:
        model = llama.llama_model_load_from_file(str(path).encode(), params)
    finally:
        quiet.setLevel(level)
    if not model:
        raise ModelError(f"{path}: llama.cpp cannot read it (truncated, or not a model)")
    try:
        vocab = llama.llama_model_get_vocab(model)
        buffer = ctypes.create_string_buffer(META_BYTES)

        def meta(key: str) -> str:
            found = llama.llama_model_meta_val_str(
                model,
                key.encode(),
                buffer,  # pyright: ignore[reportArgumentType]  (declared bytes; C writes into it)
                META_BYTES,
            )
            return buffer.value.decode("utf-8", "replace") if found >= 0 else ""

        # (the file's own words: shown in terminals, logs and editors, so made printable)
        architecture = printable(meta("general.architecture")) or "unknown"
        heads = _int(meta(f"{architecture}.attention.head_count")) or 1
        kv_heads = _int(meta(f"{architecture}.attention.head_count_kv")) or heads
        head_size = _int(meta(f"{architecture}.attention.key_length")) or (
            _int(meta(f"{architecture}.embedding_length")) // heads
        )
        return GgufInfo(
            path=path,
            architecture=architecture,
            name=printable(meta("general.name") or path.name),
            parameters=int(llama.llama_model_n_params(model)),
            quantization=quantization_name(meta("general.file_type")),
            context_length=_int(meta(f"{architecture}.context_length")),
            bytes=size,
            tokens=_fim_tokens(llama, vocab),
            vocabulary=_vocabulary_digest(llama, vocab),
            layers=_int(meta(f"{architecture}.block_count")),
            kv_width=kv_heads * head_size,
        )
    finally:
        llama.llama_model_free(model)


def _read_in_child(path: Path) -> GgufInfo:
    """``read_gguf_info`` in a child process, for a process that runs ik_llama.cpp."""
    code = (
        "import dataclasses, json, sys\n"
        "from codespec.models.gguf_info import read_gguf_info\n"
        "from codespec.models.manifests import ModelError\n"
        "try:\n"
        "    info = dataclasses.asdict(read_gguf_info(sys.argv[1]))\n"
        "except ModelError as exc:\n"
        "    sys.exit(str(exc))\n"
        "print(json.dumps({**info, 'path': str(info['path'])}))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(f"{path}: could not be read ({exc})") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise ModelError(lines[-1] if lines else f"{path}: could not be read")
    fields = json.loads(done.stdout)
    tokens = fields.pop("tokens")
    return GgufInfo(
        **{**fields, "path": Path(fields["path"])},
        tokens=FimTokens(**{**tokens, "stop": tuple(tokens["stop"])}),
    )


def quantization_name(file_type: str) -> str:
    """``general.file_type`` as llama.cpp names it (``15`` is ``Q4_K_M``)."""
    import gguf

    try:
        return gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
    except ValueError:
        return "unknown"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _fim_tokens(llama, vocab) -> FimTokens:
    """The fill-in-the-middle tokens llama.cpp found, as text ("" for a vocabulary without
    them), and the tokens that end text."""

    def text(token: int) -> str:
        return (
            llama.llama_vocab_get_text(vocab, token).decode("utf-8", "replace")
            if token >= 0
            else ""
        )

    prefix, suffix, middle = (
        text(llama.llama_vocab_fim_pre(vocab)),
        text(llama.llama_vocab_fim_suf(vocab)),
        text(llama.llama_vocab_fim_mid(vocab)),
    )
    if not (prefix and suffix and middle):
        prefix = suffix = middle = ""
    # what ends text: llama.cpp's end-of-generation set (EOS, EOT, the FIM pad and file
    # separator, its families' others), the ends it does not know, the repository tokens and
    # the FIM markers, none of which belong in code
    count = llama.llama_vocab_n_tokens(vocab)
    ends = [text(t) for t in range(count) if llama.llama_vocab_is_eog(vocab, t)]
    repo_name = text(llama.llama_vocab_fim_rep(vocab)) or _first_special(llama, vocab, REPO_NAMES)
    file_sep = text(llama.llama_vocab_fim_sep(vocab)) or _first_special(
        llama, vocab, FILE_SEPARATORS
    )
    ends += [end for end in ENDS if _first_special(llama, vocab, (end,))]
    stop = ends + [repo_name, file_sep, prefix, suffix, middle]
    return FimTokens(
        prefix,
        suffix,
        middle,
        repo_name=repo_name,
        file_sep=file_sep,
        stop=tuple(dict.fromkeys(t for t in stop if t)),
    )


def _first_special(llama, vocab, texts: tuple[str, ...]) -> str:
    """The first of ``texts`` that is one special token of the vocabulary ("" if none is)."""
    out = (ctypes.c_int32 * 4)()
    for candidate in texts:
        data = candidate.encode()
        n = llama.llama_tokenize(vocab, data, len(data), out, 4, False, True)
        if n == 1 and llama.llama_vocab_get_attr(vocab, out[0]) & SPECIAL_ATTRIBUTES:
            return candidate
    return ""


def _vocabulary_digest(llama, vocab) -> str:
    digest = hashlib.sha256()
    for token in range(llama.llama_vocab_n_tokens(vocab)):
        digest.update(llama.llama_vocab_get_text(vocab, token))
        digest.update(b"\0")
    return digest.hexdigest()[:32]


MAX_CHAT_TEMPLATE_CHARS = 256 << 10  # a template is a few kilobytes; a larger one is refused


@lru_cache(maxsize=8)
def chat_template(path: Path) -> str | None:
    """The chat template a GGUF carries (``tokenizer.chat_template``), or None: a base model
    has none, and a template past ``MAX_CHAT_TEMPLATE_CHARS`` is taken for none."""
    from gguf import GGUFReader, GGUFValueType

    try:
        field = GGUFReader(path).fields.get("tokenizer.chat_template")
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read its metadata ({exc})") from None
    if field is None or field.types[:1] != [GGUFValueType.STRING]:
        return None
    value = field.parts[field.data[0]]
    if len(value) > MAX_CHAT_TEMPLATE_CHARS:
        return None
    return bytes(value).decode("utf-8", "replace")
