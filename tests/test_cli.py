"""`codespec complete` input errors: one line on stderr, exit status 2, no traceback, no model."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codespec.files import MAX_DOCUMENT_BYTES
from codespec.prompt import split_at


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "codespec", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "sample.py"
    path.write_text("def f(x):\n    return x\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "location, message",
    [
        ("{dir}/missing.py:1:1", "no such file"),
        ("{sample}:9:1", "line 9 is past the end of the file (3 lines)"),
        ("{sample}:1:30", "column 30 is past the end of line 1 (9 characters)"),
        ("{sample}:0:1", "1-based"),
        ("{sample}:x:1", "expected PATH:LINE:COL"),
        ("/dev/zero:1:1", "not a regular file"),  # read without limit before: 13.6 GB
        ("{dir}:1:1", "is a directory"),
        ("{fifo}:1:1", "not a regular file"),  # would block forever waiting for a writer
        ("{binary}:1:1", "not UTF-8 text"),
        ("{huge}:1:1", "too large"),
    ],
)
def test_bad_locations(sample, location, message):
    fifo, binary, huge = (sample.parent / name for name in ("fifo", "binary.py", "huge.py"))
    os.mkfifo(fifo)
    binary.write_bytes(b"x = '\xff\xfe'\n")
    with huge.open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: no disk used
    spec = location.format(dir=sample.parent, sample=sample, fifo=fifo, binary=binary, huge=huge)
    result = run_cli("complete", spec)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("codespec: error:") and message in lines[0]


def test_missing_default_model_says_how_to_install(sample, tmp_path):
    manifest = tmp_path / "models" / "absent.toml"
    manifest.parent.mkdir()
    manifest.write_text(
        'name = "absent"\ninstall_hint = "pip install absent-model"\n'
        '[target]\nsource = "pypi-parts"\npackage_prefix = "codespec_absent_part"\nparts = 2\n'
        'gguf_name = "x.gguf"\nsha256 = "00"\n'
        '[tokens]\nfim_prefix = "a"\nfim_suffix = "b"\nfim_middle = "c"\n',
        encoding="utf-8",
    )
    result = run_cli("complete", f"{sample}:1:1", "--pair", str(manifest))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "codespec_absent_part1 is not installed" in line and "pip install absent-model" in line


@pytest.mark.parametrize("manifest", ["/bin/ls", "/dev/zero", "{dir}"])
def test_a_pair_manifest_that_is_no_text_file_is_a_usage_error(sample, manifest):
    result = run_cli("complete", f"{sample}:1:1", "--pair", manifest.format(dir=sample.parent))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("codespec: error:") and "Traceback" not in result.stderr


def test_unknown_pair_is_a_usage_error(sample):
    result = run_cli("complete", f"{sample}:1:1", "--pair", "no-such-pair")
    assert result.returncode == 2 and "unknown model pair 'no-such-pair'" in result.stderr


def test_split_at_counts_characters_and_allows_end_of_line():
    text = "a𐐀b\r\nxyz\n"
    assert split_at(text, 0, 2) == ("a𐐀", "b\r\nxyz\n")
    assert split_at(text, 0, 3) == ("a𐐀b", "\r\nxyz\n")
    assert split_at(text, 2, 0) == ("a𐐀b\r\nxyz\n", "")
    with pytest.raises(ValueError):
        split_at(text, 0, 4)


def test_lines_end_where_editors_end_them():
    """A form feed or U+2028 is inside a line for LSP and editors, as for the daemon."""
    text = "a\x0cb\nc\u2028d\n"
    assert split_at(text, 1, 3) == ("a\x0cb\nc\u2028d", "\n")
    assert split_at("x\ry", 1, 1) == ("x\ry", "")
    with pytest.raises(ValueError, match="3 lines"):
        split_at(text, 3, 0)


@pytest.mark.parametrize("line", ["١", " 1", "+1", "1_0", "0x1"])
def test_a_line_number_is_ascii_digits(sample, line):
    result = run_cli("complete", f"{sample}:{line}:1")
    assert result.returncode == 2 and "expected PATH:LINE:COL" in result.stderr


@pytest.mark.parametrize(
    "args, flag",
    [
        (["complete", "{sample}:1:1", "--temperature", "nan"], "--temperature"),
        (["complete", "{sample}:1:1", "--temperature", "-1"], "--temperature"),
        (["complete", "{sample}:1:1", "--prefix-tokens", "-1"], "--prefix-tokens"),
        (["complete", "{sample}:1:1", "--suffix-tokens", "-7"], "--suffix-tokens"),
        (["complete", "{sample}:1:1", "--max-tokens", "0"], "--max-tokens"),
        (["complete", "{sample}:1:1", "--device", "tpu"], "--device"),
        (["serve", "--max-tokens", "-5"], "--max-tokens"),
        (["serve", "--max-tokens", "1000000000"], "--max-tokens"),
        (["serve", "--stats-retention-days", "nan"], "--stats-retention-days"),
        (["serve", "--tcp", "70000"], "--tcp"),
        (["serve", "--tcp", "-1"], "--tcp"),
        (["lsp", "--tcp", "0"], "--tcp"),
        (["bench", "--languages", ""], "--languages"),
        (["bench", "--languages", ","], "--languages"),
        (["bench", "--per-kind", "0"], "--per-kind"),
        (["bench", "--json", "{dir}"], "--json"),
        (["bench", "--docs-from", "{empty_json}"], "not a codespec bench JSON"),
        (["bench", "--docs-from", "{list_json}"], "not a codespec bench JSON"),
        (["bench", "--docs-from", "{deep_json}"], "not a bench JSON"),
    ],
)
def test_every_flag_is_checked_before_anything_loads(sample, tmp_path, args, flag):
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    names = dict(sample=sample, dir=tmp_path, empty_json=tmp_path / "empty.json")
    names |= dict(list_json=tmp_path / "list.json", deep_json=tmp_path / "deep.json")
    docs = ["--docs", str(tmp_path / "docs.md")] if args[0] == "bench" else []
    result = run_cli(*[a.format(**names) for a in args], *docs)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("codespec: error:") and flag in line
    assert not (tmp_path / "docs.md").exists()  # nothing written from a bad JSON


PATH_FLAGS = [
    ["complete", "{sample}:1:1", "--model"],
    ["complete", "{sample}:1:1", "--draft-model"],
    ["complete", "{sample}:1:1", "--pair"],
    ["serve", "--config"],
    ["serve", "--socket"],
    ["serve", "--stats-db"],
    ["serve", "--api-key-file"],
    ["serve", "--engine-token-file"],
    ["serve", "--next-edit-model"],
    ["lsp", "--socket"],
    ["stats", "--db"],
    ["stats", "--html"],
    ["forget", "--db"],
    ["models", "--folder"],
    ["bench", "--json"],
    ["bench", "--corpus-dir"],
]


@pytest.mark.parametrize("value", ["", "x" * 5000, "x" * 100_000, "a/" + "b" * 300, "two\nlines"])
@pytest.mark.parametrize("args", PATH_FLAGS, ids=lambda a: a[-1])
def test_every_path_or_name_is_checked_once_in_one_line(sample, tmp_path, args, value):
    """An empty name (which would silently mean the default), one no file system holds, or one
    with a line break: one line naming the flag, exit 2, before anything loads."""
    result = run_cli(*[a.format(sample=sample) for a in args], value)
    assert result.returncode == 2, result.stderr[-300:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("codespec: error:") and args[-1] in line, line[:300]
    assert "Traceback" not in result.stderr


def test_a_location_whose_path_no_file_system_holds_is_one_line(tmp_path):
    result = run_cli("complete", "x" * 5000 + ":1:1")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("codespec: error:") and "PATH:LINE:COL" in line


def test_without_a_runtime_dir_commands_say_nothing_of_it(tmp_path):
    """A container or a root shell has no XDG_RUNTIME_DIR: the fallback folder is chosen quietly
    (platformdirs' warning with its source line used to come before the output)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "CODESPEC_RUNTIME_DIR")
    }
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "codespec", "stats"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "platformdirs" not in done.stderr, done.stderr
    assert done.stderr.count("\n") <= 1  # (the one line it does say: no stats yet)


class Loaded(Exception):
    """Raised by a stand-in for ``load_pair``: what it was asked to load, and how."""

    def __init__(self, kwargs: dict) -> None:
        super().__init__("loaded")
        self.kwargs = kwargs


@pytest.mark.parametrize(
    "command",
    [
        ["complete", "{sample}:1:1"],
        ["serve"],
        ["bench"],
        ["bench", "--repo"],
        ["bench", "--edits"],
    ],
)
def test_every_command_reads_the_model_flags_the_same_way(sample, command):
    """The model flags are read once into ``LoadOptions`` (a copy that forgot one flag made
    ``bench --repo`` ignore ``--draft-vocab``)."""
    from codespec.cli import build_parser
    from codespec.runtime import LoadOptions

    flags = ["--draft-vocab", "full", "--exact", "--backend", "torch", "--device", "cpu"]
    args = build_parser().parse_args([a.format(sample=sample) for a in command] + flags)
    options = LoadOptions.from_args(args)
    assert options == LoadOptions(device="cpu", backend="torch", exact=True, draft_vocab="full")


def test_bench_repo_loads_with_the_draft_vocabulary_asked_for(tmp_path, monkeypatch):
    from codespec import runtime
    from codespec.bench.main import run
    from codespec.cli import build_parser

    def stand_in(pair, **kwargs):
        raise Loaded(kwargs)

    monkeypatch.setattr(runtime, "load_pair", stand_in)
    args = build_parser().parse_args(
        ["bench", "--repo", "--draft-vocab", "full", "--corpus-dir", str(tmp_path),
         "--docs", str(tmp_path / "docs.md")]
    )  # fmt: skip
    with pytest.raises(Loaded) as loaded:
        run(args, log=lambda _: None)
    assert loaded.value.kwargs["draft_vocab"] == "full"
