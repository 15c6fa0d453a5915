"""A GGUF's tokenizer written out as a tokenizer folder (``tokenizer.json`` and its config),
by transformers' own converter for the vocabularies llama.cpp stores.

transformers imports torch, so a process that has not loaded it (a CPU daemon on llama.cpp's
kernels) runs this module as a child process: ``python -m codespec.models.gguf_tokenizer GGUF
OUT``. It prints nothing on success; on failure, one line on stderr and exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..tokenizer import LIVE_MARKER


def export(gguf: Path, out: Path) -> None:
    """Write ``gguf``'s tokenizer into the folder ``out``."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # (its notes on GGUF conversion are not the user's)
    tokenizer: Any = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))
    # The tokenizer as its class sets it up when it loads the folder, which the files it saved
    # may not say (Qwen2's adds NFC normalization then): ``tokenizers`` alone then reads the
    # very tokenizer transformers would use.
    reloaded: Any = AutoTokenizer.from_pretrained(str(out))
    reloaded.backend_tokenizer.save(str(out / "tokenizer.json"))
    (out / LIVE_MARKER).write_text("tokenizer.json is the tokenizer as transformers built it\n")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m codespec.models.gguf_tokenizer GGUF OUT", file=sys.stderr)
        return 2
    try:
        export(Path(argv[0]), Path(argv[1]))
    except Exception as exc:  # any converter failure becomes the caller's one line
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
