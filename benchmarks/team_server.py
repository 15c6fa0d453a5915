"""A team server on a CPU: what the first keystrokes cost when codespec decodes on
llama-cpp-python's server running the embedded GGUF on this machine (issue 55; results in
docs/benchmarks.md, "A team server on a CPU").

Two runs, each on a fresh server: the prompt at its configured sizes (as before the remote
engine measured its server), and sized by the server's measured prefill rate. Each run types
three keystrokes into a Python file of 240 functions and prints, per keystroke, how the request
ended, the time to its first text and the rate the engine has measured.

    .venv/bin/python benchmarks/team_server.py [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from remote_helpers import large_document, start_llama_server  # noqa: E402

from codespec.completion import complete  # noqa: E402
from codespec.languages import language_for  # noqa: E402
from codespec.models import gguf_file, load_manifest  # noqa: E402
from codespec.remote.config import from_table  # noqa: E402
from codespec.remote.engine import RemoteEngine  # noqa: E402
from codespec.runtime import load_remote_pair  # noqa: E402
from codespec.settings import Settings, completion_options  # noqa: E402
from codespec.stops import Cursor  # noqa: E402

PREFIX, SUFFIX = large_document()


class ConfiguredSizes(RemoteEngine):
    """The engine as it was: no rate, so the windows keep their configured sizes."""

    @property
    def prefill_rate(self) -> None:  # type: ignore[override]
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    default = load_manifest()
    model = gguf_file(default.target, default.install_hint)
    print("| prompt | keystroke | ended | first text (s) | measured rate (tokens/s) |")
    print("|---|---|---|---|---|")
    for name, sized in (("configured sizes", False), ("sized by the measured rate", True)):
        server, url = start_llama_server(model, "--n_threads", str(args.threads))
        pair = load_remote_pair(from_table({"url": url}))
        if not sized:
            pair.engine.__class__ = ConfiguredSizes
        try:
            for n, typed in enumerate(("", "r", "re"), 1):
                cursor = Cursor(PREFIX + typed, SUFFIX, language_for("python"))
                result = complete(pair, cursor, completion_options(Settings()), path="h.py")
                stats = result.stats
                rate = pair.engine.measured_rate  # type: ignore[attr-defined]
                shown = f"{stats.ttft_s:.2f}" if result.text else f"empty at {stats.total_s:.1f}"
                print(
                    f"| {name} | {n} | {stats.stop_reason} | {shown} | {rate:.0f} |"
                    if rate
                    else f"| {name} | {n} | {stats.stop_reason} | {shown} | - |"
                )
        finally:
            pair.engine.close()
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
