"""Count which tokens code uses most: the list a draft's trimmed vocabulary keeps.

Writes ``codespec/ggml/code_tokens.json.gz``: the embedded pair's token strings in the order a
trimmed draft head keeps them (``codespec/ggml/trimmed_vocab.py``). Each language's source files
found on this machine are tokenized up to the same number of bytes, and a token's score is the
sum over languages of its share of that language's tokens, so no one language's habits decide.
Tokens no file used come after, in the tokenizer's own id order: a byte-level BPE numbers its
tokens in the order it merged them, most frequent in its (code-heavy) training text first, which
covers the languages this machine has little of.

    .venv/bin/python scripts/count_code_tokens.py [--bytes-per-language 6000000] [--keep 32768]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections import Counter
from pathlib import Path

from tokenizers import Tokenizer

from codespec.models import load_manifest, tokenizer_folder

OUT = Path(__file__).resolve().parents[1] / "codespec" / "ggml" / "code_tokens.json.gz"
LANGUAGES = {
    "python": (".py",),
    "javascript": (".js", ".mjs"),
    "typescript": (".ts",),
    "c": (".c", ".h"),
    "cpp": (".cpp", ".cc", ".hpp"),
    "lua": (".lua",),
    "shell": (".sh", ".bash"),
    "go": (".go",),
    "rust": (".rs",),
    "java": (".java",),
}
# Places whose code is the same on every machine set up as the README says (the Python in the
# virtual environment, Debian's headers and scripts, code-server's JavaScript), so the list can
# be counted again; the bench corpus (``codespec bench --fetch``) is left out: it measures it.
ROOTS = (
    "/usr/lib/python3",
    "/usr/lib/python3.11",
    "/usr/include",
    "/usr/share",
    str(Path(__file__).resolve().parents[1] / ".venv" / "lib"),
    str(Path.home() / ".cache" / "codespec" / "e2e"),
)
SKIP_PARTS = {"test", "tests", "__pycache__", "dist", "min"}
# A language with less code than this here counts as none: a few files' counts would be noise
# weighed like a whole language's (the id order fills in for it).
MIN_BYTES = 200_000


def source_files(extensions: tuple[str, ...]) -> list[Path]:
    """Source files under ``ROOTS`` with these endings, minified and test files left out, in a
    stable order (sorted paths)."""
    found: set[Path] = set()
    for root in ROOTS:
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_PARTS and not d.startswith("."))
            for name in files:
                if name.endswith(extensions) and ".min." not in name:
                    found.add(Path(folder) / name)
    return sorted(found)


def count_language(tokenizer: Tokenizer, files: list[Path], budget: int) -> tuple[Counter, int]:
    """Token counts over ``files`` until ``budget`` bytes are read; also the bytes read."""
    counts: Counter = Counter()
    read = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip() or max(map(len, text.splitlines()), default=0) > 1000:
            continue  # generated or minified: not how people write code
        counts.update(tokenizer.encode(text, add_special_tokens=False).ids)
        read += len(text.encode())
        if read >= budget:
            break
    return counts, read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes-per-language", type=int, default=6_000_000)
    parser.add_argument("--keep", type=int, default=32768, help="how many tokens to list")
    args = parser.parse_args()
    manifest = load_manifest()
    tokenizer = Tokenizer.from_file(
        str(tokenizer_folder(manifest.target, manifest.install_hint) / "tokenizer.json")
    )
    scores: Counter = Counter()
    corpus = {}
    for language, extensions in LANGUAGES.items():
        counts, read = count_language(tokenizer, source_files(extensions), args.bytes_per_language)
        total = sum(counts.values())
        print(
            f"{language}: {read / 1e6:.1f} MB, {total} tokens, {len(counts)} distinct",
            file=sys.stderr,
        )
        if read < MIN_BYTES:
            continue
        corpus[language] = read
        for token, n in counts.items():
            scores[token] += n / total
    vocabulary = tokenizer.get_vocab(with_added_tokens=False)
    by_id = {i: s for s, i in vocabulary.items()}
    counted = [t for t, _ in scores.most_common() if t in by_id]
    rest = [i for i in sorted(by_id) if i not in scores]
    kept = (counted + rest)[: args.keep]
    print(
        f"{len(counted)} tokens counted; {max(0, args.keep - len(counted))} filled in id order",
        file=sys.stderr,
    )
    document = {
        "tokenizer": f"{manifest.name} target ({len(by_id)} normal tokens)",
        "corpus_bytes": corpus,
        "counted": min(len(counted), args.keep),
        "tokens": [by_id[i] for i in kept],
    }
    data = json.dumps(document, ensure_ascii=False).encode()
    with open(OUT, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        out.write(data)  # (no time stamp: the same counts give the same file)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
