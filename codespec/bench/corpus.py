"""The benchmark corpus: fill-in-the-middle holes cut from source packages nobody here wrote.

The packages and their files come from ``sources``; where a hole goes in a file is decided in
``cutting``; this module samples files and cuts holes deterministically from a seed, one per
file, in four kinds, and cuts a recorded run's holes again:

* ``line``      the rest of a code line, from a token boundary inside it;
* ``block``     a statement that spans 2-8 lines (tree-sitter decides where it starts and ends);
* ``function``  the whole body of a function or method;
* ``copy``      lines that repeat, in order, lines earlier in the same file (copy-heavy edits).

A hole is ``text[start:end]`` of one file: the prompt is built from ``text[:start]`` and
``text[end:]`` only, so nothing of the removed text reaches the model (``check_no_leak``).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

from ..languages import LANGUAGES, has_syntax_error
from .cutting import CUTTERS, KINDS
from .sources import Package, source_files

__all__ = ["KINDS", "Hole", "check_no_leak", "recut", "recut_available", "sample_holes"]


@dataclass
class Hole:
    language: str
    kind: str
    package: str  # "origin:name@version"
    file: str  # path inside the package
    file_sha256: str
    start: int  # character offsets of the removed text in the file
    end: int
    line: int  # 1-based line and 0-based column of the cursor
    column: int
    prefix: str
    truth: str  # the removed text
    suffix: str

    def describe(self) -> dict:
        """Where the hole is, without the file's text: enough to cut it again."""
        record = asdict(self)
        for key in ("prefix", "suffix"):
            del record[key]
        return record


def sample_holes(
    packages_: list[Package], language: str, kind: str, count: int, seed: int
) -> list[Hole]:
    """``count`` holes of ``kind`` in ``language``, one per file, from files that parse, the
    packages taking turns.

    The random stream depends only on (seed, language, kind), so adding a language or a kind
    does not move the holes of the others."""
    rng = random.Random(f"{seed}/{language}/{kind}")
    lang = LANGUAGES[language]
    pool = spread([p for p in packages_ if p.spec.language == language], rng)
    holes: list[Hole] = []
    for package, path in pool:
        if len(holes) >= count:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if "\r" in text or has_syntax_error(lang, text) is not False:
            continue
        span = CUTTERS[kind](text, lang, rng)
        if span is not None:
            holes.append(make_hole(text, span, language, kind, package, path))
    return holes


def recut(packages_: list[Package], described: list[dict]) -> list[Hole]:
    """The holes of a recorded run (``corpus.holes`` of its JSON), cut again from the same
    files; raises ValueError when a package or file is missing or its content changed."""
    by_label = {p.label: p for p in packages_}
    holes = []
    for d in described:
        package = by_label.get(d["package"])
        if package is None:
            raise ValueError(f"{d['package']} is not in the corpus (codespec bench --fetch)")
        path = package.root / d["file"]
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != d["file_sha256"]:
            raise ValueError(f"{d['package']} {d['file']} is missing or differs from the record")
        span = (d["start"], d["end"])
        holes.append(make_hole(text, span, d["language"], d["kind"], package, path))
    return holes


def recut_available(
    packages_: list[Package], described: list[dict]
) -> tuple[list[Hole], list[str]]:
    """Like ``recut``, but holes whose package version or file cannot be had here (a Debian
    mirror that moved on, say) are skipped and named instead of failing the whole run."""
    holes, skipped = [], {}
    for d in described:
        try:
            holes += recut(packages_, [d])
        except ValueError as exc:
            skipped[str(exc)] = skipped.get(str(exc), 0) + 1
    return holes, [f"{why}: {n} hole(s) skipped" for why, n in skipped.items()]


def spread(packages_: list[Package], rng: random.Random) -> list[tuple[Package, Path]]:
    """Every file of the packages in a random order that takes turns between packages, so a
    small package is sampled as often as a large one."""
    queues = []
    for package in packages_:
        files = source_files(package)
        rng.shuffle(files)
        queues.append([(package, f) for f in files])
    rng.shuffle(queues)
    return [item for turn in zip_longest(*queues) for item in turn if item is not None]


def make_hole(
    text: str, span: tuple[int, int], language: str, kind: str, package: Package, path: Path
) -> Hole:
    start, end = span
    line = text.count("\n", 0, start)
    column = start - (text.rfind("\n", 0, start) + 1)
    return Hole(
        language=language,
        kind=kind,
        package=package.label,
        file=str(path.relative_to(package.root)),
        file_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        start=start,
        end=end,
        line=line + 1,
        column=column,
        prefix=text[:start],
        truth=text[start:end],
        suffix=text[end:],
    )


def check_no_leak(hole: Hole, prompt_prefix: str, prompt_suffix: str) -> None:
    """The prompt's text must be the end of the hole's prefix and the start of its suffix."""
    if not hole.prefix.endswith(prompt_prefix) or not hole.suffix.startswith(prompt_suffix):
        raise AssertionError(f"prompt text of {hole.file}:{hole.line} is not prefix + suffix")
