"""The benchmark corpus: fill-in-the-middle holes cut from source packages nobody here wrote.

Sources are the running Python's standard library and two installed pure-Python dependencies,
plus pinned npm packages and Debian packages fetched into a corpus folder (``codespec bench
--fetch``). Holes are cut deterministically from
a seed, one per file, in four kinds:

* ``line``      the rest of a code line, from a token boundary inside it;
* ``block``     a statement that spans 2-8 lines (tree-sitter decides where it starts and ends);
* ``function``  the whole body of a function or method;
* ``copy``      lines that repeat, in order, lines earlier in the same file (copy-heavy edits).

A hole is ``text[start:end]`` of one file: the prompt is built from ``text[:start]`` and
``text[end:]`` only, so nothing of the removed text reaches the model (``check_no_leak``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import random
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

from ..languages import LANGUAGES, Language, has_syntax_error
from ..models import cache_root

KINDS = ("line", "block", "function", "copy")
MIN_FILE_BYTES, MAX_FILE_BYTES = 1500, 120_000


@dataclass(frozen=True)
class SourceSpec:
    """One package of sources for one language."""

    origin: str  # stdlib | site-packages | npm | debian
    name: str  # npm spec with its pinned version, or a Debian package name
    language: str
    under: str = ""  # only files below this folder of the package
    any_name: bool = False  # every file under ``under`` is ``language`` source, whatever its name
    zip_member: str = ""  # the package ships a zip of sources: unpack the members under this

    @property
    def folder(self) -> str:
        return self.name.replace("/", "_").replace("@", "") if self.origin == "npm" else self.name


SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec("stdlib", "python", "python"),
    # installed with codespec itself, so present wherever it runs
    SourceSpec("site-packages", "pygls", "python", "pygls"),
    SourceSpec("site-packages", "tqdm", "python", "tqdm"),
    SourceSpec("npm", "express@4.21.2", "javascript", "package/lib"),
    SourceSpec("npm", "axios@1.7.9", "javascript", "package/lib"),
    SourceSpec("npm", "commander@12.1.0", "javascript", "package/lib"),
    SourceSpec("npm", "@tanstack/query-core@5.59.0", "typescript", "package/src"),
    SourceSpec("npm", "react-day-picker@8.10.1", "typescript", "package/src"),
    SourceSpec("npm", "react-day-picker@8.10.1", "typescriptreact", "package/src"),
    SourceSpec("npm", "react-hot-toast@2.6.1", "typescriptreact", "package/src"),
    SourceSpec("debian", "golang-1.19-src", "go", "usr/share/go-1.19/src"),
    SourceSpec("debian", "librust-serde-json-dev", "rust"),
    SourceSpec("debian", "librust-regex-syntax-dev", "rust"),
    SourceSpec("debian", "openjdk-17-source", "java", zip_member="java.base/java/util/"),
    SourceSpec("debian", "libstb-dev", "c"),
    SourceSpec("debian", "nlohmann-json3-dev", "cpp"),
    SourceSpec("debian", "lua-penlight", "lua"),
    SourceSpec(
        "debian",
        "bash-completion",
        "shellscript",
        "usr/share/bash-completion/completions",
        any_name=True,
    ),
    SourceSpec("debian", "bash-doc", "shellscript"),
)


@dataclass
class Package:
    """A source package present on this machine."""

    spec: SourceSpec
    version: str
    root: Path

    @property
    def label(self) -> str:
        """``origin:name@version``, e.g. ``npm:axios@1.7.9`` or ``debian:lua-penlight@1.13.1-3``."""
        name = self.spec.name.rsplit("@", 1)[0] if self.spec.origin == "npm" else self.spec.name
        return f"{self.spec.origin}:{name}@{self.version}"


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


def default_corpus_dir() -> Path:
    return cache_root().parent / "corpus"


# -- fetching ---------------------------------------------------------------------------------


def fetch(corpus_dir: Path, log=print) -> None:
    """Download the npm and Debian packages of ``SOURCES`` into ``corpus_dir`` (skips those
    already there). A package that cannot be fetched is reported and skipped."""
    corpus_dir.mkdir(parents=True, exist_ok=True)
    done: set[tuple[str, str]] = set()
    for spec in SOURCES:
        if spec.origin in ("stdlib", "site-packages") or (spec.origin, spec.name) in done:
            continue
        done.add((spec.origin, spec.name))
        target = corpus_dir / spec.origin / spec.folder
        if (target / "source.json").exists():
            continue
        try:
            with tempfile.TemporaryDirectory(dir=corpus_dir) as tmp:
                work = Path(tmp)
                version = _fetch_npm(spec, work) if spec.origin == "npm" else _fetch_deb(spec, work)
                (work / "tree" / "source.json").write_text(
                    json.dumps({"origin": spec.origin, "name": spec.name, "version": version})
                )
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(target, ignore_errors=True)
                (work / "tree").rename(target)
            log(f"fetched {spec.origin} {spec.name} {version}")
        except (OSError, subprocess.CalledProcessError, tarfile.TarError) as exc:
            log(f"could not fetch {spec.origin} {spec.name}: {exc}")


def _fetch_npm(spec: SourceSpec, work: Path) -> str:
    subprocess.run(
        ["npm", "pack", spec.name, "--silent", "--pack-destination", str(work)],
        check=True,
        capture_output=True,
    )
    (archive,) = work.glob("*.tgz")
    with tarfile.open(archive) as tar:
        tar.extractall(work / "tree", filter="data")
    return spec.name.rsplit("@", 1)[1]


def _fetch_deb(spec: SourceSpec, work: Path) -> str:
    download = ["apt-get", "download", "-q", spec.name]
    subprocess.run(download, cwd=work, check=True, capture_output=True)
    (deb,) = work.glob("*.deb")
    version = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "deb")], check=True)
    tree = work / "tree"
    if spec.zip_member:
        (archive,) = (work / "deb").rglob("*.zip")
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if member.startswith(spec.zip_member) and not member.endswith("/"):
                    zf.extract(member, tree)
    else:
        (work / "deb").rename(tree)
    return version


# -- finding packages and files ---------------------------------------------------------------


def packages(corpus_dir: Path, languages: set[str] | None = None) -> list[Package]:
    """The packages of ``SOURCES`` present on this machine, for ``languages`` (all if None)."""
    found = []
    for spec in SOURCES:
        if languages is not None and spec.language not in languages:
            continue
        if spec.origin == "stdlib":
            root = Path(sysconfig.get_paths()["stdlib"])
            found.append(Package(spec, platform.python_version(), root))
            continue
        if spec.origin == "site-packages":
            try:
                dist = importlib.metadata.distribution(spec.name)
            except importlib.metadata.PackageNotFoundError:
                continue
            found.append(Package(spec, dist.version, Path(str(dist.locate_file("")))))
            continue
        root = corpus_dir / spec.origin / spec.folder
        if (root / "source.json").exists():
            version = json.loads((root / "source.json").read_text())["version"]
            found.append(Package(spec, version, root))
    return found


def source_files(package: Package) -> list[Path]:
    """Candidate files of ``package``, sorted (the stdlib without its tests and site-packages)."""
    language = LANGUAGES[package.spec.language]
    base = package.root / package.spec.under
    files = []
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(package.root).parts
        if package.spec.origin == "stdlib" and rel[0] in ("site-packages", "test", "idlelib"):
            continue
        if not (package.spec.any_name or path.suffix in language.extensions):
            continue
        if path.is_file() and MIN_FILE_BYTES <= path.stat().st_size <= MAX_FILE_BYTES:
            files.append(path)
    return files


# -- cutting holes ------------------------------------------------------------------------------


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


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts


def _is_code(line: str, lang: Language) -> bool:
    s = line.strip()
    return len(s) >= 12 and not s.startswith((lang.line_comment, "/*", "*", "#", "--"))


def cut_line(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """The rest of a code line, from just after a space, bracket, dot, comma, '=' or ':'."""
    lines = text.split("\n")
    starts = _line_starts(text)
    spots = [i for i in range(10, len(lines) - 3) if _is_code(lines[i], lang)]
    if not spots:
        return None
    i = rng.choice(spots)
    line = lines[i]
    indent = len(line) - len(line.lstrip())
    cuts = [
        p
        for p in range(indent + 1, len(line) - 4)
        if line[p - 1] in " (=.,[:{" and not line[p].isspace()
    ]
    p = rng.choice(cuts) if cuts else indent
    return starts[i] + p, starts[i] + len(line)


FUNCTION_TYPES = {
    "function_definition",
    "function_declaration",
    "method_definition",
    "method_declaration",
    "constructor_declaration",
    "function_item",
    "local_function",
}


def _nodes(text: str, lang: Language) -> Iterator:
    tree = lang.parser.parse(text.encode("utf-8"))
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.named_children))


def _pick_lines(text: str, spots: list[tuple[int, int]], rng: random.Random):
    """One of the (first, last) line ranges, as the span from the first line's indentation to
    the end of the last line."""
    if not spots:
        return None
    first, last = rng.choice(sorted(set(spots)))
    lines, starts = text.split("\n"), _line_starts(text)
    indent = len(lines[first]) - len(lines[first].lstrip())
    return starts[first] + indent, starts[last] + len(lines[last])


def cut_block(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """A statement spanning 2-8 lines that starts its line and ends at a line end."""
    if lang.parser is None:
        return None
    lines = text.split("\n")
    spots = []
    for node in _nodes(text, lang):
        first, last = node.start_point.row, node.end_point.row
        if not (1 <= last - first <= 7) or node.type in FUNCTION_TYPES or first < 5:
            continue
        if "comment" in node.type or "string" in node.type or node.parent is None:
            continue
        line = lines[first]  # tree-sitter columns count bytes
        if line.encode("utf-8")[: node.start_point.column].strip() or not _is_code(line, lang):
            continue
        if lines[last].encode("utf-8")[node.end_point.column :].strip() not in (b"", b";", b","):
            continue
        spots.append((first, last))
    return _pick_lines(text, spots, rng)


def cut_function(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """The body of a function: from the indentation of its first body line to the end of its
    last body line (a closing line such as ``}`` or ``end`` stays in the suffix)."""
    if lang.parser is None:
        return None
    lines = text.split("\n")
    spots = []
    for node in _nodes(text, lang):
        body = node.child_by_field_name("body")
        if node.type not in FUNCTION_TYPES or body is None:
            continue
        first = body.start_point.row
        if first == node.start_point.row or lines[first].strip() == "{":
            first += 1  # the body's opening brace ends a line; the body proper starts below
        last = node.end_point.row
        if not any(ch.isalnum() for ch in lines[last].strip().replace("end", "")):
            last -= 1  # the closing line
        if not (0 <= last - first <= 29) or first < 3:
            continue
        if sum(len(s.strip()) for s in lines[first : last + 1]) < 16:
            continue
        spots.append((first, last))
    return _pick_lines(text, spots, rng)


def cut_copy(text: str, lang: Language, rng: random.Random) -> tuple[int, int] | None:
    """Lines i.. that repeat (stripped, in order) lines j.. earlier in the file: at least two
    lines, at most six."""
    lines = text.split("\n")
    starts = _line_starts(text)
    first_seen: dict[tuple[str, str], int] = {}
    spots = []
    for i in range(len(lines) - 2):
        key = (lines[i].strip(), lines[i + 1].strip())
        if len(key[0]) >= 12 and len(key[1]) >= 8:
            j = first_seen.setdefault(key, i)
            if i - j > 2:
                spots.append((i, j))
    if not spots:
        return None
    i, j = rng.choice(spots)
    n = 2
    while n < 6 and j + n < i and lines[i + n].strip() == lines[j + n].strip() != "":
        n += 1
    if i + n >= len(lines) - 1:
        return None
    indent = len(lines[i]) - len(lines[i].lstrip())
    return starts[i] + indent, starts[i + n - 1] + len(lines[i + n - 1])


CUTTERS = {"line": cut_line, "block": cut_block, "function": cut_function, "copy": cut_copy}


def check_no_leak(hole: Hole, prompt_prefix: str, prompt_suffix: str) -> None:
    """The prompt's text must be the end of the hole's prefix and the start of its suffix."""
    if not hole.prefix.endswith(prompt_prefix) or not hole.suffix.startswith(prompt_suffix):
        raise AssertionError(f"prompt text of {hole.file}:{hole.line} is not prefix + suffix")
