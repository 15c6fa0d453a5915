"""How often the look-ahead has the keystroke the user types: at places in real files, the true
text is typed one character at a time; at every keystroke that needs the model (the character
is not the first of the ghost text, which typing through answers), is it among the ``N``
characters ``lookahead.likely_next_chars`` lists at the prompt before it?

The ghost text's first character is approximated by the first character of the model's
likeliest next token (the stop rules are not run). Prompts are built as the daemon builds them
(windows sized by time, ``promptSeconds`` 2.5; typing extends the anchored prompt).

    .venv/bin/python benchmarks/next_keys.py [--places 6] [--keys 6]
"""

from __future__ import annotations

import argparse
import random
import sysconfig
from pathlib import Path

import numpy as np

from codespec.completion import CompletionOptions, prompt_at
from codespec.lookahead import likely_next_chars
from codespec.runtime import load_pair
from codespec.stops import Cursor

CORPUS = Path.home() / ".cache" / "codespec" / "corpus"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = [
    STDLIB / "textwrap.py",
    STDLIB / "json" / "decoder.py",
    CORPUS / "debian/librust-regex-syntax-dev/usr/share/cargo/registry/regex-syntax-0.6.27"
    "/src/hir/interval.rs",
    CORPUS / "debian/golang-1.19-src/usr/share/go-1.19/src/cmd/vendor/github.com/google/pprof"
    "/internal/driver/html/common.js",
    CORPUS / "debian/lua-penlight/usr/share/lua/5.1/pl/pretty.lua",
]
COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--places", type=int, default=6, help="per file")
    ap.add_argument("--keys", type=int, default=6, help="characters typed at each place")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    pair = load_pair(use_draft=False, progress=lambda m: None)
    tokenizer, target = pair.tokenizer, pair.local.target
    options = CompletionOptions(prompt_seconds=2.5)
    rng = random.Random(args.seed)
    ranks: dict[str, list[int]] = {}  # file suffix -> rank of each model-run keystroke's char
    through = 0
    for path in (f for f in FILES if f.exists()):
        lines = path.read_text(errors="replace").split("\n")
        spots = [
            i
            for i, line in enumerate(lines)
            if line[:1] in " \t" and len(line.strip()) > 12 and 20 < i < len(lines) - 20
        ]
        for line_no in rng.sample(spots, min(args.places, len(spots))):
            line = lines[line_no]
            indent = len(line) - len(line.lstrip())
            before = "\n".join(lines[:line_no]) + "\n" + line[:indent]
            after = "\n" + "\n".join(lines[line_no + 1 :])
            truth, anchor = line[indent:], None
            for k in range(min(args.keys, len(truth))):
                cursor = Cursor(before + truth[:k], after)
                prompt, anchor = prompt_at(pair, cursor, options, path.name, (), anchor)
                logits, _, _ = target.prefill(prompt)
                shown = tokenizer.decode([int(np.argmax(logits))])[:1]
                if truth[k] == shown:
                    through += 1
                    continue
                chars = likely_next_chars(tokenizer, logits, max(COUNTS), skip=shown)
                rank = chars.index(truth[k]) if truth[k] in chars else len(chars) + 1
                ranks.setdefault(path.suffix, []).append(rank)
                print(f"{path.name} {truth[: k + 1]!r}: listed {''.join(chars)!r}, rank {rank}")
    everything = [r for rs in ranks.values() for r in rs]
    print(f"\nkeystrokes typed through (approximately): {through}; needing the model:")
    print("file    n  " + "  ".join(f"top{n:<3}" for n in COUNTS))
    for name, rs in [*ranks.items(), ("all", everything)]:
        shares = "  ".join(f"{sum(r < n for r in rs) / len(rs):5.0%} " for n in COUNTS)
        print(f"{name:5} {len(rs):4}  {shares}")


if __name__ == "__main__":
    main()
