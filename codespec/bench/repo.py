"""`codespec bench --repo`: holes that need the repository, with and without workspace context.

A hole here is cut as CrossCodeEval cuts its holes: in a file of a multi-file package, at a
use of a name that another file of the same package defines (and this file does not), the rest
of that line is removed. The package's files are the workspace (the hole's own file as the
editor would hold it: its text without the removed part), indexed by the daemon's own
``workspace`` code. Each hole is completed three ways on the same pair, greedy, at the same
time budget: in-file context only; with the definitions ``workspace.context`` chooses; and with
those definitions and the workspace drafter (``engine/corpus.py``) searching the package's
token ids. A fourth run, plain decoding of the third's prompt, is the baseline of the
speculative runs' speedups (and their output must be the same tokens).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import machine
from ..completion import complete, definition_chars, with_definitions
from ..languages import LANGUAGES, has_syntax_error, parse
from ..settings import Settings
from ..stops import Mode
from ..workspace.context import as_files, choose_chunks
from ..workspace.index import WorkspaceIndex
from ..workspace.reading import ReadLimits, language_of
from ..workspace.symbols import KEYWORDS
from . import sources
from .corpus import Hole, make_hole
from .inputs import command_line, load_pair, settings_for
from .runner import cursor_of, options_for, quality
from .sources import Package, source_files

MAX_REPO_FILES = 300  # a "repository" is the largest folder around the file with at most these
MIN_REST_CHARS = 6  # a hole's removed text is at least this long
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODES = ("in-file", "workspace", "drafter")
SPECULATIVE = ("workspace", "drafter")  # the modes whose decoding is compared with "plain"


@dataclass
class RepoHole:
    hole: Hole
    root: Path  # the repository: the folder whose files are the workspace
    relative: str  # the hole's file below ``root``
    name: str  # the name defined in another file that the removed text starts with


def repo_root(path: Path, base: Path) -> Path:
    """The largest folder from ``path``'s own up to ``base`` holding at most
    ``MAX_REPO_FILES`` source files of its language (a Go or Java package is one folder; a
    Python or npm package a tree)."""
    root = path.parent
    while root != base and base in root.parents:
        parent = root.parent
        if sum(1 for p in parent.rglob("*") if language_of(p.name)) > MAX_REPO_FILES:
            break
        root = parent
    return root


def cut_repo_holes(
    packages: list[Package], language: str, count: int, seed: int, lines: int = 1
) -> list[RepoHole]:
    """Up to ``count`` holes in ``language``, one per file, each at a use of a name that only
    other files of its repository define: the rest of that line, and ``lines - 1`` lines
    after it."""
    rng = random.Random(f"{seed}/repo/{language}")
    lang = LANGUAGES[language]
    files = [(p, f) for p in packages if p.spec.language == language for f in source_files(p)]
    rng.shuffle(files)
    indexes: dict[Path, WorkspaceIndex] = {}
    holes: list[RepoHole] = []
    for package, path in files:
        if len(holes) >= count:
            break
        base = package.root / package.spec.under if package.spec.under else package.root
        root = repo_root(path, base)
        if root not in indexes:
            indexes[root] = index = WorkspaceIndex(root, ReadLimits(max_files=MAX_REPO_FILES))
            index.build()
        index = indexes[root]
        relative = path.relative_to(root).as_posix()
        if len(index.files) < 2 or relative not in index.files:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "\r" in text or has_syntax_error(lang, text) is not False:
            continue
        own = {d.name for d in index.files[relative].definitions}
        tree = parse(lang, text)
        if tree is None:
            continue
        source = text.encode("utf-8")
        uses = []
        for match in NAME.finditer(text):
            name = match.group()
            found = index.by_name.get(name, ())
            elsewhere = [p for p, _ in found if p != relative]
            if name in own or not elsewhere or len(elsewhere) > 3 or len(name) < 3:
                continue
            if name.lower() in KEYWORDS:
                continue
            at = len(text[: match.start()].encode("utf-8"))
            node = tree.root_node.descendant_for_byte_range(at, at + len(name.encode("utf-8")))
            if node is None or not node.type.endswith("identifier") or source[at - 1 : at] == b"@":
                continue  # in a string or a comment, or a decorator: not code that uses it
            end = text.find("\n", match.start())
            end = len(text) if end < 0 else end
            rest = text[match.start() : end]
            for _ in range(lines - 1):  # (the lines after it: a block's worth of completion)
                after = text.find("\n", end + 1)
                end = len(text) if after < 0 else after
            line_start = text.rfind("\n", 0, match.start()) + 1
            before = text[line_start : match.start()]
            if len(rest.strip()) < MIN_REST_CHARS or lang.line_comment in before:
                continue
            if before.lstrip().startswith(("import ", "from ", "use ", "package ", "#include")):
                continue  # an import names the file it comes from: not the case to measure
            uses.append((match.start(), end, name))
        if not uses:
            continue
        start, end, name = rng.choice(uses)
        kind = "repo" if lines == 1 else f"repo-{lines}"
        hole = make_hole(text, (start, end), language, kind, package, path)
        holes.append(RepoHole(hole, root, relative, name))
    return holes


def run_repo_hole(
    pair, repo: RepoHole, settings: Settings, index: WorkspaceIndex, first: int = 0
) -> dict:
    """The hole completed in each mode, mode ``first`` first (rotate it: a later run reuses
    the cache an earlier one left where their prompts agree), then plainly; the index (and
    its drafter's corpus) holds the hole's file as the editor would."""
    hole = repo.hole
    language = hole.language
    original = index.files.get(repo.relative)
    index.put(repo.relative, language, hole.prefix + hole.suffix)
    index.corpus.refresh()
    lines = hole.truth.count("\n") + 1
    in_file = options_for(  # the rest of a line, or a block of lines
        hole, settings, mode=Mode.LINE if lines == 1 else Mode.BLOCK, max_lines=lines
    )
    with_context = with_definitions(in_file)
    budget = definition_chars(in_file, pair.engine.prefill_rate)
    try:
        chunks = choose_chunks(index, repo.relative, language, hole.prefix, hole.suffix, budget)
        row: dict = {"hole": hole.describe(), "name": repo.name, "chunks": len(chunks)}
        extra = as_files(chunks)
        options = with_context if extra else in_file
        for mode in MODES[first:] + MODES[:first]:
            if mode == "in-file":
                row[mode] = _run(pair, repo, in_file)
            else:
                corpora = (index.corpus,) if mode == "drafter" else ()
                row[mode] = _run(pair, repo, options, extra, corpora)
        row["plain"] = _run(pair, repo, replace(options, speculate=False), extra)
    finally:
        if original is not None:
            index.put(repo.relative, language, (repo.root / repo.relative).read_text("utf-8"))
    return row


def _run(pair, repo: RepoHole, options, extra=(), corpora=()) -> dict:
    hole = repo.hole
    started = time.perf_counter()
    result = complete(
        pair, cursor_of(hole), options, path=repo.relative, extra_files=extra, corpora=corpora
    )
    stats = result.stats
    return dict(
        completion=result.text,
        prompt_tokens=result.prompt_tokens,
        prefill_tokens=stats.prefill_tokens if stats else 0,
        ms=1000 * (time.perf_counter() - started),
        tokens=stats.tokens if stats else 0,
        passes=stats.target_passes + 1 if stats else 0,  # the first token's prefill is one
        decode_s=stats.total_s - stats.ttft_s if stats else 0.0,  # after the first token
        workspace_proposed=stats.proposed.get("workspace", 0) if stats else 0,
        workspace_accepted=stats.accepted.get("workspace", 0) if stats else 0,
        **quality(hole, result.text),
    )


def summarize(rows: list[dict]) -> dict:
    """Per language and overall: each mode's exact match, edit similarity, parse rate and
    prompt tokens, its time over the holes that got context; holes the context helped and
    hurt."""
    out: dict = {}
    for key in sorted({r["hole"]["language"] for r in rows}) + ["all"]:
        group = [r for r in rows if key in ("all", r["hole"]["language"])]
        figures: dict = {"holes": len(group)}
        timed = [r for r in group if r["chunks"]] or group  # (the same prompt twice otherwise)
        for mode in MODES:
            ms = [r[mode] for r in group]
            figures[mode] = dict(
                exact_match=sum(m["exact_match"] for m in ms) / len(ms),
                edit_similarity=sum(m["edit_similarity"] for m in ms) / len(ms),
                parse_rate=sum(m["parse_ok"] for m in ms) / len(ms),
                prompt_tokens=sum(m["prompt_tokens"] for m in ms) / len(ms),
                ms=sum(r[mode]["ms"] for r in timed) / len(timed),
            )
        for mode in MODES:
            figures[mode]["tokens_per_pass"] = sum(r[mode]["tokens"] for r in group) / max(
                1, sum(r[mode]["passes"] for r in group)
            )
        plain_s = sum(r["plain"]["decode_s"] for r in group)
        for mode in SPECULATIVE:
            # greedy: the same tokens as the plain run, so decode times compare directly
            figures[mode]["speedup"] = plain_s / max(1e-9, sum(r[mode]["decode_s"] for r in group))
            figures[mode]["exact"] = sum(
                r[mode]["completion"] == r["plain"]["completion"] for r in group
            ) / len(group)
        figures["drafter"]["workspace_proposed"] = sum(
            r["drafter"]["workspace_proposed"] for r in group
        )
        figures["drafter"]["workspace_accepted"] = sum(
            r["drafter"]["workspace_accepted"] for r in group
        )
        figures["with_context"] = sum(1 for r in group if r["chunks"]) / len(group)
        similarity = [
            (r["workspace"]["edit_similarity"], r["in-file"]["edit_similarity"]) for r in group
        ]
        figures["helped"] = sum(1 for w, i in similarity if w > i)
        figures["hurt"] = sum(1 for w, i in similarity if w < i)
        out[key] = figures
    return out


def table(summary: dict) -> str:
    """Quality in-file against workspace context; then speed: tokens per pass in each mode and
    the speculative modes' decoding speedup over plain decoding of the same prompt."""
    head = ["language", "holes", "ctx", "EM in-file", "EM ws", "ES in-file", "ES ws", "parse in/ws"]
    head += ["prompt in/ws", "ms in/ws", "helped", "hurt"]
    head += ["tok/pass in/ws/drafter", "speedup ws/drafter", "exact"]
    lines = ["  ".join(head)]
    for key, f in summary.items():
        a, b, c = f["in-file"], f["workspace"], f["drafter"]
        cells = [
            key,
            str(f["holes"]),
            f"{100 * f['with_context']:.0f}%",
            f"{100 * a['exact_match']:.1f}%",
            f"{100 * b['exact_match']:.1f}%",
            f"{a['edit_similarity']:.3f}",
            f"{b['edit_similarity']:.3f}",
            f"{100 * a['parse_rate']:.0f}/{100 * b['parse_rate']:.0f}%",
            f"{a['prompt_tokens']:.0f}/{b['prompt_tokens']:.0f}",
            f"{a['ms']:.0f}/{b['ms']:.0f}",
            str(f["helped"]),
            str(f["hurt"]),
            f"{a['tokens_per_pass']:.2f}/{b['tokens_per_pass']:.2f}/{c['tokens_per_pass']:.2f}",
            f"{b['speedup']:.2f}x/{c['speedup']:.2f}x",
            f"{min(b['exact'], c['exact']):.2f}",
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run_repo(
    pair,
    packages: list[Package],
    languages: list[str],
    count: int,
    seed: int,
    settings: Settings,
    log=print,
    lines: int = 1,
) -> dict:
    """Cut the repository holes, run each in every mode, return rows and summary."""
    holes = [
        h
        for language in languages
        for h in cut_repo_holes(packages, language, count, seed, lines=lines)
    ]
    log(f"{len(holes)} repository holes in {len({h.hole.language for h in holes})} languages")
    indexes: dict[Path, WorkspaceIndex] = {}
    tokenizer = pair.tokenizer

    def tokenize(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    rows = []
    for i, repo in enumerate(holes):
        if repo.root not in indexes:
            indexes[repo.root] = index = WorkspaceIndex(
                repo.root, ReadLimits(max_files=MAX_REPO_FILES), tokenize=tokenize
            )
            index.build()
        row = run_repo_hole(pair, repo, settings, indexes[repo.root], first=i % len(MODES))
        rows.append(row)
        a, b = row["in-file"], row["workspace"]
        log(
            f"[{i + 1}/{len(holes)}] {repo.hole.language} {repo.relative}:{repo.hole.line} "
            f"{repo.name}: chunks {row['chunks']}, "
            f"exact {a['exact_match']:d}/{b['exact_match']:d}, "
            f"ES {a['edit_similarity']:.2f}/{b['edit_similarity']:.2f}, "
            f"tok/pass {b['tokens'] / max(1, b['passes']):.2f}/"
            f"{row['drafter']['tokens'] / max(1, row['drafter']['passes']):.2f}"
        )
    return dict(
        holes=[dict(r, root=str(h.root)) for r, h in zip(rows, holes, strict=True)],
        summary=summarize(rows),
    )


def run_repo_mode(args, corpus_dir: Path, languages, per_kind: int, max_tokens: int, log) -> dict:
    """``--repo``: repository holes, in-file context against workspace context (``repo.py``)."""
    present = sources.packages(corpus_dir, set(languages))
    pair = load_pair(args, log)
    settings = settings_for(args, max_tokens)
    log(f"{machine.cpu_kind()}: prefill {pair.engine.prefill_rate:.0f} tokens/s")
    lines = args.repo_lines
    result = run_repo(pair, present, languages, per_kind, args.seed, settings, log=log, lines=lines)
    return dict(
        command=command_line(),
        machine=dict(cpu=machine.cpu_model(), cpu_kind=machine.cpu_kind()),
        model=pair.model_label,
        settings=dict(
            seed=args.seed,
            languages=languages,
            per_language=per_kind,
            lines=lines,
            max_tokens=max_tokens,
            prompt_seconds=settings.prompt_seconds,
            prefill_tokens_per_s=pair.engine.prefill_rate,
        ),
        **result,
    )
