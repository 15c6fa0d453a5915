"""`codespec bench --engine ... --concurrency ...` against real llama-cpp-python servers."""

from __future__ import annotations

import json
import subprocess
import sys

from remote_helpers import needs_server, start_llama_server

pytestmark = needs_server


def bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "codespec", "bench", "--quick", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_two_servers_as_concurrent_editors(tiny_gguf, tmp_path):
    servers = [start_llama_server(tiny_gguf, "--interrupt_requests", "False") for _ in range(2)]
    try:
        (_, plain), (_, spec) = servers
        out = tmp_path / "c.json"
        run = bench(
            "--engine", f"plain={plain}", "--engine", f"spec={spec}",
            "--concurrency", "1,2", "--window-tokens", "128,32", "--json", str(out),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        result = json.loads(out.read_text())["concurrency"]
        assert set(result["levels"]) == {"plain", "spec"}
        for levels in result["levels"].values():
            assert [f["editors"] for f in levels] == [1, 2]
            for f in levels:
                assert f["failed"] == 0 and f["total_ms"]["p50"] > 0
                assert f["requests"] >= 4  # every hole's last request, at least
                assert f["total_tokens_per_s"] > 0
        assert "spec against plain" in run.stdout
        assert "speculation stops paying at" in run.stdout or "pays at every level" in run.stdout
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=30)


def test_bad_concurrency_is_one_line():
    run = bench("--engine", "http://127.0.0.1:9", "--concurrency", "1,x")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith("codespec: error: --concurrency")
