"""The models users already have (issue 54): GGUF files found where Ollama, LM Studio,
llama.cpp and the Hugging Face cache keep them, their metadata read without their weights,
other families' fill-in-the-middle tokens, the draft paired by vocabulary, and files that are
not models refused in one line. Real files in a fake home; tiny GGUFs written here (the
``gguf`` package) stand in for other families; llama.cpp reads them all."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import environment_in, lay_out_stores, write_tiny_gguf
from remote_helpers import needs_server

from codespec.models import ModelError
from codespec.models.discovery import find_models
from codespec.models.gguf_info import read_gguf_info
from codespec.models.user_models import manifest_for_model

pytestmark = needs_server  # (llama-cpp-python reads the metadata)


def byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level BPE vocabulary holds)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    shown, extra = list(kept), 0
    for byte in range(256):
        if byte not in kept:
            kept.append(byte)
            shown.append(256 + extra)
            extra += 1
    return [chr(c) for c in shown]


def write_family_gguf(path: Path, kind: str, specials: list[str], eos: str) -> Path:
    """A GGUF with a vocabulary and no weights: ``bpe`` (byte-level, StarCoder2-like) or
    ``spm`` (SentencePiece with byte tokens, CodeLlama-like), plus ``specials``."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_context_length(16384)
    writer.add_embedding_length(64)
    writer.add_block_count(1)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_layer_norm_rms_eps(1e-5)
    if kind == "spm":
        tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁a", *specials]
        types = [2, 3, 3, *[6] * 256, 1, *[3] * len(specials)]
        writer.add_tokenizer_model("llama")
        writer.add_token_scores([0.0] * len(tokens))
    else:
        tokens = [specials[0], *byte_level_alphabet(), "ab", *specials[1:]]
        types = [3, *[1] * 257, *[3] * (len(specials) - 1)]
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_merges(["a b"])
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_eos_token_id(tokens.index(eos))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random Qwen2 GGUF with the real Qwen2.5-Coder vocabulary."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_each_store_is_found_with_its_own_names(tmp_path, tiny):
    home = tmp_path / "home"
    placed = lay_out_stores(home, tiny)
    outside = tmp_path / "elsewhere.gguf"
    outside.write_bytes(tiny.read_bytes())
    (home / ".lmstudio" / "models" / "Qwen" / "link-out.gguf").symlink_to(outside)
    found = {m.name: m for m in find_models(home=home, env={})}
    assert set(found) == {
        "ollama:qwen2.5-coder:tiny",
        "lmstudio:Qwen/tiny-GGUF/tiny-q8_0.gguf",
        "hf:Qwen/tiny-GGUF/tiny.gguf",
        "llamacpp:Qwen_tiny-GGUF_tiny.gguf",
    }  # (the link out of LM Studio's folder is not followed)
    for name, model in found.items():
        assert model.path == placed[model.store].resolve(), name
    env = {"OLLAMA_MODELS": str(home / ".ollama" / "models"), "HF_HOME": str(tmp_path / "none")}
    moved = {m.name for m in find_models(home=tmp_path / "nobody", env=env)}
    assert moved == {"ollama:qwen2.5-coder:tiny"}


def test_the_metadata_says_what_the_model_is_and_the_draft_pairs_by_vocabulary(tiny):
    info = read_gguf_info(tiny)
    assert info.architecture == "qwen2" and info.context_length == 4096
    assert info.has_fim and info.tokens.fim_prefix == "<|fim_prefix|>"
    assert info.tokens.repo_name == "<|repo_name|>" and "<|endoftext|>" in info.tokens.stop
    from codespec.models import gguf_file, load_manifest

    default = load_manifest()
    assert read_gguf_info(gguf_file(default.draft, "")).vocabulary == info.vocabulary


@pytest.mark.parametrize(
    ("kind", "specials", "eos", "expected"),
    [
        (  # StarCoder2: llama.cpp finds the FIM tokens; the repository ones are ours to find
            "bpe",
            ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
             "<repo_name>", "<file_sep>"],
            "<|endoftext|>",
            ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<repo_name>", "<file_sep>"),
        ),
        (  # CodeLlama: SentencePiece, its infill ends at EOT
            "spm",
            ["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"],
            "</s>",
            ("▁<PRE>", "▁<SUF>", "▁<MID>", "", ""),
        ),
    ],
)  # fmt: skip
def test_other_families_fill_in_the_middle_tokens(tmp_path, kind, specials, eos, expected):
    info = read_gguf_info(write_family_gguf(tmp_path / "m.gguf", kind, specials, eos))
    tokens = info.tokens
    assert info.has_fim
    got = (
        tokens.fim_prefix,
        tokens.fim_suffix,
        tokens.fim_middle,
        tokens.repo_name,
        tokens.file_sep,
    )
    assert got == expected
    assert eos in tokens.stop and (kind != "spm" or "▁<EOT>" in tokens.stop)


def test_a_model_without_fim_tokens_is_prompted_with_the_prefix_alone(tmp_path, tiny):
    from transformers import AutoTokenizer

    from codespec.prompt import FimRequest, build_fim_prompt

    path = write_family_gguf(tmp_path / "plain.gguf", "bpe", ["<|endoftext|>"], "<|endoftext|>")
    info = read_gguf_info(path)
    assert not info.has_fim and "<|endoftext|>" in info.tokens.stop
    manifest = manifest_for_model(str(path))
    assert manifest.tokens.fim_prefix == "" and manifest.draft is None
    tokenizer = AutoTokenizer.from_pretrained(str(tiny.parent), gguf_file=tiny.name)
    request = FimRequest("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", path="m.py")
    ids, _ = build_fim_prompt(tokenizer, manifest.tokens, request)
    assert tokenizer.decode(ids) == "def add(a, b):\n    return "


@pytest.mark.parametrize(
    "content", [b"", b"not a model at all\n" * 100, b"GGUF" + b"\xff" * 60, "truncated"]
)
def test_a_file_that_is_not_a_model_is_one_line(tmp_path, tiny, content):
    path = tmp_path / "bad.gguf"
    path.write_bytes(tiny.read_bytes()[:4096] if content == "truncated" else content)
    with pytest.raises(ModelError) as refused:
        read_gguf_info(path)
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)
    source = tmp_path / "x.py"
    source.write_text("x = 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "codespec", "complete", f"{source}:1:1", "--model", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and f"codespec: error: {path}" in result.stderr


def test_a_split_model_is_named_by_its_first_part_and_completes(tmp_path):
    """A model in parts (``-00001-of-0000N.gguf``): listed once, by its first part, with the
    size of all its parts; it completes by that name (llama.cpp loads the other parts). A later
    part named, or a part missing, is one line and exit status 2."""
    folder = tmp_path / "models"
    folder.mkdir()
    first = write_tiny_gguf(folder / "tiny-split.gguf", split_max_tensors=8)
    parts = sorted(folder.iterdir())
    assert first.name == f"tiny-split-00001-of-{len(parts):05d}.gguf" and len(parts) >= 3
    found = find_models(folders=(str(folder),), home=tmp_path / "nobody", env={})
    assert [m.name for m in found] == [str(first)]
    assert read_gguf_info(first).bytes == sum(p.stat().st_size for p in parts)
    report = complete_with(str(first), tmp_path / "home", tmp_path)
    assert report["tokens"] > 0

    source = tmp_path / "x.py"
    source.write_text("x = 1\n")

    def refused(model: Path) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "codespec", "complete", f"{source}:1:1", "--model", str(model)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        return result.stderr

    assert "name its first part" in refused(parts[1])
    parts[-1].rename(tmp_path / "away.gguf")
    assert f"part {len(parts)} of {len(parts)}" in refused(first)


def place(source: Path, target: Path) -> None:
    """``source`` at ``target`` without a copy where the file system allows (a hard link is
    a file of the store, not a link out of it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def test_codespec_models_lists_what_it_finds_and_pairs_the_draft(tmp_path, tiny):
    """The tiny model is smaller than any draft (none pairs); the embedded 1.5B laid out in
    LM Studio's folder gets the embedded 0.5B, whose vocabulary it shares."""
    from codespec.models import gguf_file, load_manifest

    default = load_manifest()
    home = tmp_path / "home"
    lay_out_stores(home, tiny)
    place(
        gguf_file(default.target, ""),
        home / ".lmstudio" / "models" / "Qwen" / "coder-GGUF" / "coder-1.5b-q4_k_m.gguf",
    )
    env = environment_in(home)
    result = subprocess.run(
        [sys.executable, "-m", "codespec", "models", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) >= {"qwen2.5-coder-1.5b", "ollama:qwen2.5-coder:tiny"} and len(rows) == 6
    tiny_row = rows["ollama:qwen2.5-coder:tiny"]
    assert tiny_row["architecture"] == "qwen2" and tiny_row["fim"] is True
    assert tiny_row["draft"] is None
    coder = rows["lmstudio:Qwen/coder-GGUF/coder-1.5b-q4_k_m.gguf"]
    assert coder["quantization"] == "Q4_K_M" and coder["context_length"] == 32768
    assert coder["draft"] == default.draft.label


HOSTILE_NAME = "\x1b]0;owned\x07\x1b[2J\rforged\nsecond line \u202eevil"


def test_a_model_files_words_reach_no_terminal_raw(tmp_path):
    """A GGUF's ``general.name`` and a store's file names are anyone's words: what ``complete
    --model`` and ``codespec models`` print holds no escape, carriage return or line break of
    theirs (they are shown, made harmless)."""
    model = write_tiny_gguf(tmp_path / "hostile.gguf", name=HOSTILE_NAME)
    home = tmp_path / "home"
    place(model, home / ".lmstudio" / "models" / "x" / "y-GGUF" / "evil\x1b[2J\rname.gguf")
    env = environment_in(home)
    source = tmp_path / "fib.py"
    source.write_text("def fibonacci(n):\n    return \n")
    results = [
        subprocess.run(
            [sys.executable, "-m", "codespec", *args],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )  # fmt: skip
        for args in (
            ["complete", f"{source}:2:12", "--model", str(model), "--max-tokens", "4"],
            ["complete", f"{source}:2:12", "--model", str(model), "--json", "--max-tokens", "4"],
            ["models"],
            ["models", "--json"],
        )
    ]
    for result in results:
        assert result.returncode == 0, result.stderr[-2000:]
        for text in (result.stdout, result.stderr):
            assert "\x1b" not in text and "\x07" not in text and "\r" not in text
            assert "\u202e" not in text and "forged\nsecond" not in text
    assert "evil?[2J?name.gguf" in results[2].stdout
    labels = {row.get("label") for row in json.loads(results[3].stdout)}
    assert "?]0;owned??[2J?forged?second line ?evil" in labels
    assert "?]0;owned??[2J?forged?second line ?evil" in results[0].stderr


def test_memory_is_said_before_loading_and_what_cannot_fit_is_refused(tiny):
    from codespec.models.user_models import check_memory

    info = read_gguf_info(tiny)
    assert info.layers == 2 and info.kv_width > 0
    line = check_memory([info], 4096, available=64 << 30)
    assert "GiB of weights" in line and "K/V cache for 4096 tokens" in line
    with pytest.raises(ModelError, match="does not fit in memory"):
        check_memory([info], 4096, available=1 << 20)


def complete_with(model: str, home: Path, tmp_path: Path) -> dict:
    """``codespec complete --model`` in a fake home: its JSON report."""
    source = tmp_path / "fib.py"
    source.write_text("def fibonacci(n):\n    if n < 2:\n        return n\n    return \n")
    env = environment_in(home)
    result = subprocess.run(
        [sys.executable, "-m", "codespec", "complete", f"{source}:4:12", "--model", model,
         "--json", "--max-tokens", "12"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "K/V cache" in result.stderr  # what it takes was said before loading
    return json.loads(result.stdout)


def test_a_model_from_a_store_completes_by_its_name(tmp_path, tiny):
    home = tmp_path / "home"
    lay_out_stores(home, tiny)
    report = complete_with("hf:Qwen/tiny-GGUF/tiny.gguf", home, tmp_path)
    assert report["tokens"] > 0 and report["draft_model"] is None


@pytest.mark.real_model
def test_the_embedded_model_kept_by_ollama_completes_with_the_draft_paired(tmp_path):
    """The embedded 1.5B as Ollama keeps a pulled model (manifest and blob): found by its
    Ollama name, run as it is, and the embedded 0.5B drafts for it (the same vocabulary)."""
    from codespec.models import gguf_file, load_manifest

    default = load_manifest()
    home = tmp_path / "home"
    model = gguf_file(default.target, "")
    digest = default.target.sha256
    store = home / ".ollama" / "models"
    place(model, store / "blobs" / f"sha256-{digest}")
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "qwen2.5-coder" / "1.5b"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    report = complete_with("ollama:qwen2.5-coder:1.5b", home, tmp_path)
    assert report["draft_model"] == default.draft.label
    assert "fibonacci(n - 1)" in report["completion"].replace("n-1", "n - 1"), report


def test_the_settings_file_names_the_model_and_more_folders(tmp_path, tiny):
    """``[model]`` in config.toml: ``name`` runs without ``--model`` (the daemon an editor
    starts reads it too), ``folders`` are looked in; a bad table is one line."""
    from codespec.cli.common import UsageError, model_choice, pair_of
    from codespec.cli.models import add_parser as _  # noqa: F401  (the command exists)

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(tiny.read_bytes())
    config = tmp_path / "config.toml"
    config.write_text(f'[model]\nname = "{folder / "tiny.gguf"}"\nfolders = ["{folder}"]\n')
    args = argparse.Namespace(pair="qwen2.5-coder-1.5b", model=None, config=str(config))
    assert model_choice(args).folders == (str(folder),)
    manifest = pair_of(args)
    assert manifest.target.source == "gguf" and manifest.target.path == str(folder / "tiny.gguf")
    assert find_models(model_choice(args).folders, home=tmp_path / "nobody", env={})
    config.write_text("[model]\nname = 3\n")
    with pytest.raises(UsageError, match=r"\[model\] name"):
        pair_of(args)


def test_a_draft_named_by_the_user_must_share_the_vocabulary(tmp_path, tiny):
    other = tiny.parent / "other-seed.gguf"
    if not other.exists():
        write_tiny_gguf(other, seed=1)
    manifest = manifest_for_model(str(tiny), draft_name=str(other))
    assert manifest.draft is not None and manifest.draft.path == str(other)
    foreign = write_family_gguf(tmp_path / "sc2.gguf", "bpe", ["<|endoftext|>", "<fim_prefix>",
                                "<fim_middle>", "<fim_suffix>"], "<|endoftext|>")  # fmt: skip
    with pytest.raises(ModelError, match="vocabularies differ"):
        manifest_for_model(str(tiny), draft_name=str(foreign))
    source = tmp_path / "x.py"
    source.write_text("x = 1\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "codespec",
            "complete",
            f"{source}:1:1",
            "--draft-model",
            str(other),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "--draft-model" in result.stderr


def test_the_daemon_serves_a_model_named_in_the_settings_file(tmp_path, tiny):
    """``codespec serve`` (what ``codespec lsp`` starts for an editor) with ``[model] name``
    in its settings file: an editor's request over real JSON-RPC is answered by that model,
    the daemon's log says which model it loaded and what it takes, and torch is not mapped
    into it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "lsp"))
    from helpers import wait_for_socket
    from rpc import did_open, folder_session, inline_request

    home = tmp_path / "home"
    lay_out_stores(home, tiny)
    config = tmp_path / "config.toml"
    config.write_text('[model]\nname = "ollama:qwen2.5-coder:tiny"\n')
    env = environment_in(home)
    socket_path, log = tmp_path / "d.sock", tmp_path / "daemon.log"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path), "--no-status",
         "--config", str(config), "--no-stats"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=env,
    )  # fmt: skip
    try:
        wait_for_socket(socket_path)
        client = folder_session(socket_path, [], {"stopRules": False, "maxTokens": 4})
        uri = (tmp_path / "a.py").as_uri()
        client.send(did_open(uri, "def add(a, b):\n    return "))
        client.send(inline_request(1, uri, 1, 11))
        items = client.reply_to(1)["result"]["items"]
        assert items and items[0]["insertText"]
        # a CPU daemon on llama.cpp's kernels never loads torch (issue 52): its memory and start
        maps = Path(f"/proc/{daemon.pid}/maps").read_text()
        assert "libllama" in maps and "libtorch" not in maps
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    text = log.read_text()
    assert "K/V cache" in text and "model ready" in text, text[-2000:]


def test_an_editor_switches_the_daemon_to_another_model(tmp_path, tiny, tiny_manifest):
    """``codespec/chooseModel`` over real JSON-RPC, through ``codespec lsp`` as an editor
    talks: the daemon (the same process, on the same socket) runs the chosen GGUF, the relay
    hands the session over, the session hears the new model in ``codespec/status`` and its
    next completion comes from it; a name that is not a model is one line, and changes nothing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "lsp"))
    from helpers import wait_for_socket
    from rpc import did_open, inline_request, relay_client

    home = tmp_path / "home"
    lay_out_stores(home, tiny)
    socket_path, log = tmp_path / "d.sock", tmp_path / "daemon.log"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path), "--no-status",
         "--pair", str(tiny_manifest), "--no-stats", "--max-tokens", "4"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=environment_in(home),
    )  # fmt: skip
    relay = None
    try:
        wait_for_socket(socket_path)
        pid = int((socket_path.parent / "d.sock.lock").read_text().strip())
        relay, client = relay_client("--socket", str(socket_path))
        client.initialize()
        settings = {"settings": {"stopRules": False, "maxTokens": 4}}  # (a random model's text)
        method = "workspace/didChangeConfiguration"
        client.send({"jsonrpc": "2.0", "method": method, "params": settings})

        def status_with_model() -> dict:
            while True:
                message = client.read(timeout=120)
                assert message is not None
                if message.get("method") == "codespec/status" and "model" in message["params"]:
                    return message["params"]

        assert status_with_model()["model"] == "tiny-test"
        client.send({"jsonrpc": "2.0", "id": "m", "method": "codespec/models", "params": {}})
        names = [row["name"] for row in client.reply_to("m")["result"]["models"]]
        assert "ollama:qwen2.5-coder:tiny" in names

        bad = {"name": "ollama:no-such-model"}
        client.send({"jsonrpc": "2.0", "id": "b", "method": "codespec/chooseModel", "params": bad})
        error = client.reply_to("b")["error"]
        assert error["code"] == -32602 and "no model named" in error["message"]

        choose = {"name": "ollama:qwen2.5-coder:tiny"}
        client.send(
            {"jsonrpc": "2.0", "id": "c", "method": "codespec/chooseModel", "params": choose}
        )
        assert client.reply_to("c")["result"]["restarting"] is True
        status = status_with_model()
        assert status["model"] == "ollama:qwen2.5-coder:tiny"  # (the name it was chosen by)
        uri = (tmp_path / "a.py").as_uri()
        client.send(did_open(uri, "def add(a, b):\n    return "))
        client.send(inline_request(1, uri, 1, 11))
        assert client.reply_to(1)["result"]["items"]
        assert int((socket_path.parent / "d.sock.lock").read_text().strip()) == pid
        assert daemon.poll() is None
    finally:
        if relay is not None:
            relay.kill()
        daemon.terminate()
        daemon.wait(timeout=30)
    text = log.read_text()
    assert "switching to" in text and text.count("model ready") == 2, text[-3000:]


def test_next_edits_run_on_the_users_next_edit_model(tmp_path, tiny, tiny_manifest):
    """``[next_edit] model`` in the settings file: the daemon loads that GGUF beside the pair
    serving completions (here the tiny torch pair), says so, and next edits are written by it
    (the tiny GGUF's random noise, shown at eagerness ``high``); a bad table or a model that is
    not there is one line and exit 2."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "lsp"))
    from helpers import wait_for_socket
    from rpc import did_open, folder_session

    config = tmp_path / "config.toml"
    config.write_text(f'[next_edit]\nmodel = "{tiny}"\n')
    socket_path, log = tmp_path / "d.sock", tmp_path / "daemon.log"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path), "--no-status",
         "--config", str(config), "--pair", str(tiny_manifest)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )  # fmt: skip
    try:
        wait_for_socket(socket_path)
        client = folder_session(socket_path, [], {"nextEditEagerness": "high"})
        uri = (tmp_path / "cart.txt").as_uri()  # (plain text: the random model's edit is noise)
        text = "def total(items):\n    count = 0\n    return count\n"
        client.send(did_open(uri, text, "plaintext"))
        at = {"line": 1, "character": 4}
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {
                    "textDocument": {"uri": uri, "version": 2},
                    "contentChanges": [{"range": {"start": at, "end": at}, "text": "sub"}],
                },
            }
        )
        client.sock.settimeout(120)
        params = {"textDocument": {"uri": uri, "version": 2}, "position": at}
        client.send({"jsonrpc": "2.0", "id": 1, "method": "textDocument/copilotInlineEdit",
                     "params": params})  # fmt: skip
        edits = client.reply_to(1)["result"]["edits"]
        client.send({"jsonrpc": "2.0", "id": 2, "method": "codespec/stats", "params": {}})
        daemon_figures = client.reply_to(2)["result"]["daemon"]
        assert daemon_figures["next_edit_model"] == tiny.name
        assert len(edits) == 1 and edits[0]["command"]["arguments"]
        maps = Path(f"/proc/{daemon.pid}/maps").read_text()
        assert "libllama" in maps  # (the torch pair serves completions; ggml the next edits)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert f"next edits run on {tiny.name}" in log.read_text()
    bad = [
        ("[next_edit]\nmodel = 3\n", "[next_edit] model"),
        ('[next_edit]\nmodel = "/nonexistent/sweep.gguf"\n', "sweep.gguf"),
    ]
    for table, says in bad:
        config.write_text(table)
        result = subprocess.run(
            [sys.executable, "-m", "codespec", "serve", "--socket", str(tmp_path / "e.sock"),
             "--no-status", "--config", str(config), "--pair", str(tiny_manifest)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 2 and says in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
