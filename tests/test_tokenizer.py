"""The daemon's tokenizer (``codespec/tokenizer.py``: ``tokenizers`` alone, no transformers and
so no torch) gives the ids, text, offsets and special tokens transformers' own tokenizer gives,
for the vocabularies GGUFs carry: Qwen2.5-Coder's real one and two other families', each
written out from its GGUF as the daemon does it (in a process of its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_tiny_gguf
from remote_helpers import needs_server
from test_user_models import write_family_gguf

from codespec.models import ModelError
from codespec.models.loading import load_tokenizer
from codespec.models.sources import tokenizer_folder
from codespec.models.user_models import manifest_for_model
from codespec.tokenizer import LIVE_MARKER, FastTokenizer

pytestmark = needs_server  # (the GGUF metadata is read by llama-cpp-python)

# what editors send: code in several languages, the FIM and repository markers spelled in the
# text, odd Unicode (combining marks, right-to-left, a ZWJ emoji, a BOM, NUL, private use),
# CRLF and tabs, long runs of one character
CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1)",
    "fn main() {\r\n\tlet v: Vec<u8> = vec![0xff; 16];\r\n}\r\n",
    "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n<|fim_middle|>    return a + b",
    "<|repo_name|>acme/tools\n<|file_sep|>src/app.ts\nexport const x = 1;<|endoftext|>",
    "a<|endoftext|>b<|im_start|>c<|fim_pad|>",
    "café naïve e\u0301 \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 日本語のテキスト",
    "👩\u200d💻 \ufeffBOM \x00 nul \ue000 private \u2028 line \u00a0 nbsp",
    " " * 37 + "x" + "\t" * 9 + "=" * 80,
    "<s> </s> <unk> ▁<PRE> ▁<SUF> ▁<MID> ▁<EOT> <0x0A>",
    "",
]


def family_folder(path: Path) -> Path:
    """``path``'s tokenizer folder, made as the daemon makes it."""
    return tokenizer_folder(manifest_for_model(str(path)).target, "", progress=lambda _: None)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tokenizers")
    specials = ["<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"]
    spm = ["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"]
    return {
        "qwen2.5-coder": family_folder(write_tiny_gguf(base / "qwen.gguf")),
        "byte-level bpe": family_folder(
            write_family_gguf(base / "bpe.gguf", "bpe", specials, "<|endoftext|>")
        ),
        "sentencepiece": family_folder(write_family_gguf(base / "spm.gguf", "spm", spm, "</s>")),
    }


@pytest.mark.parametrize("family", ["qwen2.5-coder", "byte-level bpe", "sentencepiece"])
def test_the_tokenizer_without_transformers_gives_what_transformers_gives(folders, family):
    from transformers import AutoTokenizer

    folder = folders[family]
    ours, theirs = load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert isinstance(ours, FastTokenizer)
    assert ours.eos_token_id == theirs.eos_token_id is not None
    assert ours.unk_token_id == theirs.unk_token_id
    assert ours.vocab_size == theirs.vocab_size
    assert ours.get_added_vocab() == theirs.get_added_vocab()
    assert set(theirs.all_special_ids) <= set(ours.all_special_ids)
    for text in CORPUS:
        ids = theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text, add_special_tokens=False) == ids, text
        assert ours.decode(ids) == theirs.decode(ids), text
        want = theirs(text, add_special_tokens=False, return_offsets_mapping=True)
        got = ours(text, add_special_tokens=False, return_offsets_mapping=True)
        assert got["input_ids"] == want["input_ids"]
        assert [tuple(span) for span in got["offset_mapping"]] == [
            tuple(span) for span in want["offset_mapping"]
        ]
        split = theirs(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert ours(text, split_special_tokens=True)["input_ids"] == split, text
        for token_id in ids:
            assert ours.convert_ids_to_tokens(token_id) == theirs.convert_ids_to_tokens(token_id)
    for token in ("<|fim_middle|>", "<fim_middle>", "▁<MID>", "<|endoftext|>", "</s>"):
        if token in theirs.get_added_vocab():
            assert ours.convert_tokens_to_ids(token) == theirs.convert_tokens_to_ids(token)
    assert ours.convert_tokens_to_ids("no such token, surely") is None


def test_splitting_special_tokens_leaves_the_tokenizer_as_it_was(folders):
    """``split_special_tokens`` reads markers as text on a copy: a marker in the next plain
    call is still one token."""
    tokenizer = load_tokenizer(folders["qwen2.5-coder"])
    marker = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert marker not in tokenizer("a<|endoftext|>b", split_special_tokens=True)["input_ids"]
    assert marker in tokenizer.encode("a<|endoftext|>b")


def test_a_broken_tokenizer_folder_is_one_line(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": ')
    (tmp_path / LIVE_MARKER).write_text("")
    with pytest.raises(ModelError, match="no readable tokenizer.json"):
        load_tokenizer(tmp_path)


def test_the_tokenizer_export_runs_alone_and_fails_in_one_line(tmp_path):
    """What the daemon runs as a child process: a folder on success; for a file that is not a
    model, exit 1 with one line."""
    gguf = write_tiny_gguf(tmp_path / "m.gguf")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "codespec.models.gguf_tokenizer"]
    done = subprocess.run([*command, str(gguf), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (out / "tokenizer.json").is_file()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 60)
    done = subprocess.run([*command, str(bad), str(tmp_path / "x")], capture_output=True, text=True)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1


def test_text_that_spells_special_tokens_never_becomes_them_in_a_prompt(folders):
    """codespec's own sources spell the FIM and repository markers: as the current file, as
    another file and as the text typed at an anchored cursor, they are plain text in the
    prompt, whose only special tokens are its layout's (with either kind of tokenizer)."""
    from transformers import AutoTokenizer

    from codespec.models import load_manifest
    from codespec.prompt import Anchor, FimRequest, build_fim_prompt, extend_anchor

    root = Path(__file__).resolve().parents[1]
    source = (root / "codespec" / "prompt.py").read_text()
    other = (root / "codespec" / "remote" / "engine.py").read_text()
    assert "<|fim_middle|>" in source and "<|fim_prefix|>" in source  # (the premise)
    cut = source.index("<|fim_middle|>") + 20
    tokens = load_manifest().tokens
    folder = folders["qwen2.5-coder"]
    for tokenizer in (load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))):
        request = FimRequest(
            source[:cut],
            source[cut:] + "<|endoftext|><|im_start|>",
            path="codespec/<|file_sep|>prompt.py",
            repo="<|repo_name|>",
            extra_files=(("codespec/remote/engine.py", other + "<|fim_suffix|>"),),
        )
        ids, _ = build_fim_prompt(tokenizer, tokens, request)
        special = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
        layout = [tokenizer.convert_ids_to_tokens(i) for i in ids if i in special]
        assert layout == [
            tokens.repo_name,
            tokens.file_sep,
            tokens.file_sep,
            tokens.fim_prefix,
            tokens.fim_suffix,
            tokens.fim_middle,
        ], layout
        anchor = Anchor(request.prefix, request.suffix, ids)
        typed = extend_anchor(tokenizer, anchor, request.prefix + "<|endoftext|>", request.suffix)
        assert typed is not None and not set(typed[len(ids) :]) & special
