"""The tokenizer a pair runs with: Hugging Face's ``tokenizers`` over the model's
``tokenizer.json``, without transformers.

transformers' tokenizer classes wrap this same Rust tokenizer, but importing transformers
imports torch, which a CPU daemon on llama.cpp's kernels never needs and which costs it memory
and start-up time (``docs/benchmarks.md``, "No torch in a CPU daemon"). So the daemon reads
the tokenizer with ``tokenizers`` alone;
transformers writes the folder once (``models/sources.py``: from a GGUF's vocabulary, in a
process of its own). ``Tokenizer`` is the part of transformers' tokenizer interface codespec
calls, so a transformers tokenizer (the tests compare the two) fits wherever this one does.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from tokenizers import Tokenizer as RustTokenizer

from .files import FileError, parse_json, read_owned_text

# what a tokenizer folder's tokenizer_config.json may weigh
CONFIG_LIMIT = 4 << 20
# in a folder written from a GGUF (``models/gguf_tokenizer.py``): its tokenizer.json is the
# tokenizer as transformers built it, so this module reads it alone
LIVE_MARKER = "codespec-tokenizer"


class Tokenizer(Protocol):
    """What codespec asks of a tokenizer (transformers' names, so either kind fits)."""

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def unk_token_id(self) -> int | None: ...

    @property
    def all_special_ids(self) -> list[int]: ...

    @property
    def vocab_size(self) -> int:
        """The base vocabulary (added tokens, such as the FIM markers, come after it)."""
        ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def __call__(
        self,
        text: str,
        add_special_tokens: bool = ...,
        return_offsets_mapping: bool = ...,
        split_special_tokens: bool = ...,
    ) -> Any: ...

    def convert_tokens_to_ids(self, token: str) -> int | None: ...

    def convert_ids_to_tokens(self, token_id: int) -> str | None: ...

    def get_added_vocab(self) -> dict[str, int]: ...

    @property
    def chat_template(self) -> str | None:
        """The chat template its folder names (``tokenizer_config.json``), if any."""
        ...


def plain_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text``'s token ids with any special token it spells read as plain characters: text
    from a user, a workspace or a client is never a control token (llama-server tokenizes its
    ``input_prefix`` and ``input_extra`` the same way); only a prompt's own layout is special."""
    return plain_encoding(tokenizer, text, offsets=False)["input_ids"]


def plain_encoding(tokenizer: Tokenizer, text: str, offsets: bool = True) -> dict[str, list]:
    """``plain_ids`` with each token's character ``offset_mapping``."""
    return tokenizer(
        text, add_special_tokens=False, return_offsets_mapping=offsets, split_special_tokens=True
    )


def break_specials(tokenizer: Tokenizer, text: str) -> str:
    """``text`` with each spelling of a special token broken by a zero-width space after its
    first character: for text that a prompt holds as *text* (a server, or a chat template's
    output, parses every special token's spelling in it as the token)."""
    return _spelled(tuple(sorted(tokenizer.get_added_vocab()))).sub(_broken, text)


def _broken(match: re.Match[str]) -> str:
    return match.group(0)[0] + "\u200b" + match.group(0)[1:]


@lru_cache(maxsize=8)
def _spelled(added: tuple[str, ...]) -> re.Pattern[str]:
    longest_first = sorted(added, key=len, reverse=True)  # (one spelling may hold another)
    return re.compile("|".join(re.escape(text) for text in longest_first) or "(?!)")


class TokenizerError(Exception):
    """A tokenizer folder that cannot be read (one line: what and where)."""


class FastTokenizer:
    """A ``tokenizer.json`` and the special tokens its ``tokenizer_config.json`` names."""

    def __init__(self, folder: Path) -> None:
        try:
            self.rust = RustTokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # (the Rust side raises plain Exceptions)
            raise TokenizerError(f"{folder}: no readable tokenizer.json ({exc})") from None
        try:
            config = parse_json(read_owned_text(folder / "tokenizer_config.json", CONFIG_LIMIT))
        except (OSError, FileError, ValueError):
            config = {}
        config = config if isinstance(config, dict) else {}
        self.eos_token_id = self._named_id(config.get("eos_token"))
        self.unk_token_id = self._named_id(config.get("unk_token"))
        added = self.rust.get_added_tokens_decoder()
        self.all_special_ids = sorted(i for i, token in added.items() if token.special)
        self.vocab_size = self.rust.get_vocab_size(with_added_tokens=False)
        self.clean_up_spaces = config.get("clean_up_tokenization_spaces") is True
        template = config.get("chat_template")
        self.chat_template: str | None = template if isinstance(template, str) else None
        # special tokens spelled in the text read as plain text (``split_special_tokens``): a
        # second tokenizer, so no caller ever sees the first one's setting change
        self._splitting: RustTokenizer | None = None
        self._lock = threading.Lock()

    def _named_id(self, token: object) -> int | None:
        """The id of a special token as tokenizer_config.json names it (a string, or
        transformers' ``{"content": ...}`` form)."""
        if isinstance(token, dict):
            token = token.get("content")
        return self.rust.token_to_id(token) if isinstance(token, str) else None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.rust.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        text = self.rust.decode(list(ids), skip_special_tokens=False)
        return _clean_up_spaces(text) if self.clean_up_spaces else text

    def __call__(
        self,
        text: str,
        add_special_tokens: bool = False,
        return_offsets_mapping: bool = False,
        split_special_tokens: bool = False,
    ) -> dict[str, list]:
        """transformers' call: ``{"input_ids": [...]}``, with character ``offset_mapping``
        when asked."""
        rust = self._splitter() if split_special_tokens else self.rust
        encoding = rust.encode(text, add_special_tokens=add_special_tokens)
        out: dict[str, list] = {"input_ids": encoding.ids}
        if return_offsets_mapping:
            out["offset_mapping"] = encoding.offsets
        return out

    def _splitter(self) -> RustTokenizer:
        with self._lock:
            if self._splitting is None:
                self._splitting = RustTokenizer.from_str(self.rust.to_str())
                self._splitting.encode_special_tokens = True
            return self._splitting

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.rust.token_to_id(token)

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        return self.rust.id_to_token(token_id)

    def get_added_vocab(self) -> dict[str, int]:
        return {t.content: i for i, t in self.rust.get_added_tokens_decoder().items()}


def _clean_up_spaces(text: str) -> str:
    """transformers' ``clean_up_tokenization`` (for the tokenizers whose config asks it)."""
    for spaced, joined in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(spaced, joined)
    return text
