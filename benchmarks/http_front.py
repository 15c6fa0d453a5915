"""The HTTP front against the LSP path and against llama-server, on the same holes, with the
embedded pair on this machine.

Holes: lines inside functions of standard-library files, each cut after its indentation (the
cursor there, the rest of the file after it), in ``--files`` files, ``--holes`` in all.

1. One daemon with ``--http``: every hole through LSP (``didOpen``, an automatic inline
   completion, ``didClose``) and through ``/infill`` (streamed; the hole's file name and
   language in codespec's own fields, so that both build the same prompt), all holes one way
   then all the other, twice with the order swapped; a hole's prompt is long evicted from the
   cache (4 places kept) when the other way comes to it. Reported: whether the two ways gave
   the same completion, first text and whole completion p50 each way.
2. llama.vim's request (its shape from ``tests/http/requests/llama_vim_fim.json``: 256 lines
   above, 64 below, ``n_predict`` 128, ``t_max_predict_ms`` 1000, ``n_indent`` the line's)
   sent to codespec's ``/infill`` and to llama-server's, on the same GGUF (the pair's target,
   llama-server from ``scripts/build-llama-server.sh``, 2 threads, one slot), one server at a
   time: whole-completion p50 and the share of holes where the texts agree.

    .venv/bin/python benchmarks/http_front.py [--holes 16] [--files 4]
        [--llama-server PATH]   (default: the one scripts/build-llama-server.sh built)
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "lsp"))
from rpc import RawClient, did_open, inline_request  # noqa: E402

from codespec.machine import cpu_kind  # noqa: E402

FILES = ["json/decoder.py", "textwrap.py", "shlex.py", "csv.py", "fractions.py", "heapq.py"]
LLAMA_VIM = json.loads((ROOT / "tests/http/requests/llama_vim_fim.json").read_text())["body"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def holes(count: int, files: int, seed: int) -> list[tuple[str, str, str]]:
    """(file name, text before the cursor, text after it) for lines inside functions."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    rng = random.Random(seed)
    chosen = FILES[:files]
    out = []
    for i in range(count):
        name = chosen[i % len(chosen)]
        lines = (stdlib / name).read_text().split("\n")
        candidates = [
            n
            for n, line in enumerate(lines)
            if line.startswith("        ")
            and len(line.strip()) > 12
            and not line.strip().startswith("#")
        ]
        n = rng.choice(candidates)
        indent = len(lines[n]) - len(lines[n].lstrip())
        before = "\n".join(lines[:n] + [lines[n][:indent]])
        after = "\n" + "\n".join(lines[n + 1 :])
        out.append((Path(name).name, before, after))
    return out


def start_daemon(folder: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "codespec", "serve", "--socket", str(folder / "d.sock")),
            *("--no-status", "--stats-db", str(folder / "stats.sqlite3"), "--http", str(port)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError("the daemon's HTTP front did not come up")


def lsp_client(socket_path: Path) -> RawClient:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(socket_path))
    client = RawClient(sock)
    client.sock.settimeout(600)
    client.initialize()
    return client


def through_lsp(client: RawClient, n: int, hole: tuple[str, str, str]) -> tuple[float, float, str]:
    """(s to the first text, s to the answer, its text) of one inline completion."""
    name, before, after = hole
    uri = f"file:///bench/{n}/{name}"
    client.send(did_open(uri, before + after))
    line, character = before.count("\n"), len(before) - before.rfind("\n") - 1
    t0 = time.perf_counter()
    client.send(inline_request(n, uri, line, character, trigger_kind=2))
    first = None
    while True:
        message = client.read(timeout=600)
        assert message is not None
        if message.get("method") == "codespec/partialCompletion":
            first = first if first is not None else time.perf_counter() - t0
        elif message.get("id") == n:
            whole = time.perf_counter() - t0
            items = (message.get("result") or {}).get("items") or []
            text = items[0]["insertText"] if items else ""
            break
    client.send(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didClose",
            "params": {"textDocument": {"uri": uri}},
        }
    )
    return (first if first is not None else whole), whole, text


def through_http(url: str, hole: tuple[str, str, str]) -> tuple[float, float, str]:
    """The same, streamed from ``/infill``."""
    name, before, after = hole
    body = {"input_prefix": before, "input_suffix": after, "stream": True}
    body |= {"filename": name, "language": "python"}
    t0, first, text = time.perf_counter(), None, ""
    with httpx.stream("POST", f"{url}/infill", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                piece = json.loads(line[6:])
                if piece.get("content") and first is None:
                    first = time.perf_counter() - t0
                text += piece.get("content", "")
    whole = time.perf_counter() - t0
    return (first if first is not None else whole), whole, text


def llama_vim_body(hole: tuple[str, str, str]) -> dict:
    """llama.vim's request at the hole: its window of lines and its fields."""
    _, before, after = hole
    above = before.split("\n")
    prefix_lines, middle = above[:-1][-256:], above[-1]
    suffix = "\n".join(after.split("\n")[:65])
    body = dict(LLAMA_VIM, input_extra=[], t_max_predict_ms=1000)
    body |= {"input_prefix": "\n".join(prefix_lines) + "\n", "prompt": middle}
    body |= {"input_suffix": suffix, "n_indent": len(middle) - len(middle.lstrip())}
    return body


def timed_post(url: str, body: dict) -> tuple[float, str, int]:
    """(s to the answer, its text, the prompt tokens the server computed for it)."""
    t0 = time.perf_counter()
    reply = httpx.post(f"{url}/infill", json=body, timeout=600).json()
    # (llama.vim names its response_fields: the reply holds "timings/prompt_n" at its top)
    computed = reply.get("timings/prompt_n", reply.get("timings", {}).get("prompt_n", 0))
    return time.perf_counter() - t0, reply.get("content", ""), computed


def cold_and_again(url: str, cases: list) -> tuple[list, list]:
    """llama.vim's request at each hole, at a new place, then once more as it is (the user
    typed nothing yet; the server's prompt cache holds it)."""
    cold, again = [], []
    for hole in cases:
        body = llama_vim_body(hole)
        cold.append(timed_post(url, body))
        again.append(timed_post(url, body))
    return cold, again


def p50(values: list[float]) -> float:
    return 1000 * statistics.median(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holes", type=int, default=16)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--llama-server", default=None, help="llama-server binary (default: built)")
    ap.add_argument("--no-peer", action="store_true", help="only the LSP and /infill rounds")
    ap.add_argument("--json", default=str(ROOT / "bench-out" / "http_front.json"))
    args = ap.parse_args()
    cases = holes(args.holes, args.files, args.seed)
    folder = Path(tempfile.mkdtemp(prefix="codespec-http-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"CPU: {cpu_kind()}; {len(cases)} holes in {args.files} files", flush=True)

    daemon = start_daemon(folder, port)
    results: dict[str, dict[int, list[tuple[float, float, str]]]] = {"lsp": {}, "http": {}}
    vim_codespec: tuple[list, list] = ([], [])
    try:
        client = lsp_client(folder / "d.sock")
        request_id = 1000
        for order in (("lsp", "http"), ("http", "lsp")):
            for way in order:
                for i, hole in enumerate(cases):
                    if way == "lsp":
                        request_id += 1
                        got = through_lsp(client, request_id, hole)
                    else:
                        got = through_http(url, hole)
                    results[way].setdefault(i, []).append(got)
        if not args.no_peer:
            vim_codespec = cold_and_again(url, cases)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)

    same = sum(
        len({r[2] for r in results["lsp"][i] + results["http"][i]}) == 1 for i in range(len(cases))
    )
    print(f"\nthe same completion through LSP and /infill (both rounds): {same}/{len(cases)}")
    for i in range(len(cases)):
        texts = [r[2] for r in results["lsp"][i]] + [r[2] for r in results["http"][i]]
        if len(set(texts)) > 1:  # (LSP round 1, round 2, then /infill round 1, round 2)
            print(f"  hole {i} ({cases[i][0]}): " + " | ".join(repr(t[:60]) for t in texts))
    summary: dict = {"cpu": cpu_kind(), "holes": len(cases), "same": same}
    for kind, index in (("first text", 0), ("whole", 1)):
        lsp = p50([r[index] for rs in results["lsp"].values() for r in rs])
        http = p50([r[index] for rs in results["http"].values() for r in rs])
        print(f"{kind:>10}: LSP p50 {lsp:.0f} ms, /infill p50 {http:.0f} ms ({http / lsp:.2f}x)")
        summary[kind] = {"lsp_ms": lsp, "http_ms": http}

    binary = None if args.no_peer else args.llama_server or default_llama_server()
    if binary is not None:
        from codespec.bench.peer_server import serving
        from codespec.models import load_manifest
        from codespec.models.sources import gguf_file

        manifest = load_manifest()
        target = gguf_file(manifest.target, manifest.install_hint)
        with serving(Path(binary), target, []) as server_url:
            vim_llama = cold_and_again(server_url, cases)
        summary["llama_vim"] = {}
        for name, ours_all, theirs_all in (
            ("new place", vim_codespec[0], vim_llama[0]),
            ("same place again", vim_codespec[1], vim_llama[1]),
        ):
            agree = sum(a[1] == b[1] for a, b in zip(ours_all, theirs_all, strict=True))
            ours, theirs = p50([r[0] for r in ours_all]), p50([r[0] for r in theirs_all])
            print(
                f"\nllama.vim's /infill request at a {name}, whole completion p50: codespec "
                f"{ours:.0f} ms, llama-server {theirs:.0f} ms ({theirs / ours:.2f}x); "
                f"same text on {agree}/{len(cases)}"
            )
            print(
                f"  prompt tokens computed p50: codespec "
                f"{statistics.median(r[2] for r in ours_all):.0f}, llama-server "
                f"{statistics.median(r[2] for r in theirs_all):.0f}; chars p50: codespec "
                f"{statistics.median(len(r[1]) for r in ours_all):.0f}, llama-server "
                f"{statistics.median(len(r[1]) for r in theirs_all):.0f}"
            )
            summary["llama_vim"][name] = {"codespec_ms": ours, "llama_server_ms": theirs}
    else:
        print("\n(no llama-server: run scripts/build-llama-server.sh for the comparison)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2))


def default_llama_server() -> str | None:
    """The llama-server scripts/build-llama-server.sh built (the newest, if several)."""
    import os

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    built = sorted(
        (cache / "codespec" / "llama-server").glob("*/build/bin/llama-server"),
        key=lambda p: p.stat().st_mtime,
    )
    return str(built[-1]) if built else None


if __name__ == "__main__":
    main()
