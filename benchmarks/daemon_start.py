"""A daemon's start and memory: ``codespec serve`` from nothing to its first completion, and its
resident memory after it, with the draft as ``auto`` leaves it and with ``--draft on``.

For each checkout (this one, and ``--against PATH``: another checkout of codespec, run with the
same Python, for a side-by-side), a daemon is started on a private socket, an editor session
opens a file and asks for an inline completion at once, and the seconds from the process's
start to the reply are taken; then the daemon's VmRSS, and whether libtorch and transformers'
tokenizer are mapped into it. One daemon at a time (on 2 cores two would distort each other).

    .venv/bin/python benchmarks/daemon_start.py [--against /path/to/older/checkout]
        [--repeats 2] [--backend auto]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "lsp"))
from rpc import did_open, folder_session, inline_request

from codespec.machine import cpu_kind

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "def fibonacci(n):\n    if n < 2:\n        return n\n    return "


def vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_start(checkout: Path, draft: str, backend: str, work: Path) -> dict:
    """Start a daemon from ``checkout``, complete once, measure, stop it."""
    socket_path = work / "d.sock"
    socket_path.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    t0 = time.perf_counter()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "codespec", "serve", "--socket", str(socket_path), "--no-status",
         "--no-stats", "--backend", backend, "--draft", draft],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=checkout,
    )  # fmt: skip
    try:
        while not socket_path.exists():
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon from {checkout} exited with {daemon.returncode}")
            time.sleep(0.02)
        client = folder_session(socket_path, [], {"stopRules": False, "maxTokens": 16})
        uri = (work / "a.py").as_uri()
        client.send(did_open(uri, SOURCE))
        client.send(inline_request(1, uri, 3, 11))
        client.sock.settimeout(600)
        items = client.reply_to(1)["result"]["items"]
        first_s = time.perf_counter() - t0
        maps = Path(f"/proc/{daemon.pid}/maps").read_text()
        return {
            "first_completion_s": first_s,
            "rss_mb": vm_rss_mb(daemon.pid),
            "libtorch": "libtorch" in maps,
            "answered": bool(items and items[0]["insertText"]),
        }
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another codespec checkout, side by side")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.against:
        checkouts["--against"] = args.against.resolve()
    print(f"{cpu_kind()}; {os.cpu_count()} cores; backend {args.backend}")
    header = f"{'checkout':<14} {'draft':<6} {'start -> first completion':>26} {'RSS MB':>8}"
    print(header + "  libtorch")
    with tempfile.TemporaryDirectory() as tmp:
        for draft in ("auto", "on"):
            for _ in range(args.repeats):
                for name, checkout in checkouts.items():  # alternated: drift hits both alike
                    run = one_start(checkout, draft, args.backend, Path(tmp))
                    assert run["answered"], f"{name} gave no completion"
                    print(
                        f"{name:<14} {draft:<6} {run['first_completion_s']:>24.1f} s "
                        f"{run['rss_mb']:>8.0f}  {'mapped' if run['libtorch'] else 'no'}"
                    )


if __name__ == "__main__":
    main()
