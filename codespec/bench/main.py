"""`codespec bench`: choose what to run, run one mode, print its table, write JSON and docs.

The modes: the holes (``holes_mode.py``, the default), ``--repo`` (``repo.py``), ``--edits``
(``edits.py``) and ``--engine`` (``concurrency.py``); what they are asked is read in
``inputs.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from . import corpus, report, sources
from .concurrency import run_concurrency
from .docs import bets_text, write_docs
from .edits import run_edits_mode
from .holes_mode import run_holes
from .inputs import BenchError, check_writable, choose, cut_corpus, holes_from, read_bench_json
from .peer import peer_lines
from .repo import run_repo_mode


def run(args: argparse.Namespace, log=print) -> dict:
    """The whole benchmark in the mode the flags ask; returns the report written to ``--json``."""
    languages, kinds, per_kind, max_tokens = choose(args)
    server = None
    if args.peer:
        from .peer import require

        require()
    if getattr(args, "peer_server", None):
        if not args.peer:
            raise BenchError("--peer-server needs --peer llama.cpp")
        from .peer_server import check_binary

        server = check_binary(args.peer_server)
    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else sources.default_corpus_dir()
    if args.fetch:
        sources.fetch(corpus_dir, log=log)
    if args.holes_from:
        holes, present, missing = holes_from(Path(args.holes_from), corpus_dir)
        languages = sorted({h.language for h in holes})
        kinds = [k for k in corpus.KINDS if any(h.kind == k for h in holes)]
    elif getattr(args, "repo", False):
        return run_repo_mode(args, corpus_dir, languages, per_kind, max_tokens, log)
    elif getattr(args, "edits", False):
        return run_edits_mode(args, corpus_dir, per_kind, log)
    else:
        holes, present, missing = cut_corpus(corpus_dir, languages, kinds, per_kind, args.seed)
    for line in missing:
        log(f"skipped {line}")
    if not holes:
        raise BenchError("no holes: no sources for the chosen languages")
    if getattr(args, "engine", None):
        return run_concurrency(args, holes, max_tokens, missing, log)
    chosen = (languages, kinds, per_kind, max_tokens)
    return run_holes(args, holes, present, missing, chosen, server, log)


def main(args: argparse.Namespace) -> int:
    try:
        if args.json:
            check_writable(Path(args.json), "--json")
        if args.write_docs or args.docs_from:
            check_writable(Path(args.docs), "--docs")
        if args.docs_from:
            docs_from(Path(args.docs_from), Path(args.docs))
            print(f"wrote {args.docs}")
            return 0
        with background_load(getattr(args, "background_load", 0)):
            result = run(args, log=lambda m: print(m, file=sys.stderr, flush=True))
    except BenchError as exc:
        print(f"codespec: error: {exc}", file=sys.stderr)
        return 2
    if "rows" in result and "summary" in result:  # --edits
        from .edits import table as edits_table

        print(edits_table(result["summary"]))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        return 0
    if "concurrency" in result or "summary" in result:  # --engine, --repo
        if "summary" in result:
            from .repo import table
        else:
            from .concurrency import table

        print(table(result.get("summary") or result["concurrency"]))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
            print(f"wrote {args.json}")
        return 0
    print(report.table(result))
    print(bets_text(result).removeprefix("- "))
    if result.get("threads"):
        print(report.threads_text(result["threads"]))
    if "peer" in result:
        print(peer_table(result["peer"], result["machine"].get("quantization", "")))
    if result["missing"]:
        print("skipped: " + "; ".join(result["missing"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    if args.write_docs:
        write_docs(result, Path(args.docs))
        print(f"wrote {args.docs}")
    return 0


@contextlib.contextmanager
def background_load(processes: int) -> Iterator[None]:
    """While inside: ``processes`` CPU-bound processes run beside the measurement (a user's
    build or language server), each keeping one core busy."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def docs_from(saved: Path, docs: Path) -> None:
    result = read_bench_json(saved)
    try:
        write_docs(result, docs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise BenchError(f"{saved}: not a complete codespec bench JSON ({exc!r})") from None


def peer_table(peer: dict, weights: str = "") -> str:
    return "\n".join(peer_lines(peer, weights))
