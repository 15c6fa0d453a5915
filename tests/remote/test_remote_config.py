"""The `[engine]` settings, the SSE reader and the servers' speculation formats: pure
functions, with the formats as the engines document them (vLLM cannot run here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from codespec.remote.config import EngineConfigError, from_table, plain_http_warnings
from codespec.remote.metrics import ServerSpeculation, from_event, from_prometheus
from codespec.remote.sse import SseParser, StreamFault


def test_a_table_with_a_url_is_a_remote_engine_and_local_is_none():
    config = from_table({"url": "https://gpu.team.example:8000/", "model": "qwen-7b"})
    assert config.urls == ("https://gpu.team.example:8000",) and config.verify
    assert from_table({"kind": "local"}) is None


@pytest.mark.parametrize(
    "table, says",
    [
        ({"urls": []}, "at least one"),
        ({"url": "ftp://host"}, "not an http"),
        ({"url": "http://user:pw@host"}, "token_file"),
        ({"url": "http://host", "colour": 1}, "unknown keys"),
        ({"url": "http://host", "total_timeout_s": -1}, "total_timeout_s"),
        ({"url": "http://host", "verify": "no"}, "verify"),
        ({"url": "http://host", "protocol": "grpc"}, "protocol"),
        ({"url": "http://host", "ca_bundle": "/nonexistent.pem"}, "ca_bundle"),
        ({"kind": "cloud"}, "kind"),
    ],
)
def test_bad_engine_settings_are_one_line_errors(table, says):
    with pytest.raises(EngineConfigError, match=says) as caught:
        from_table(table)
    assert "\n" not in str(caught.value)


def test_the_token_comes_from_an_owner_only_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("sk-abc\n")
    token.chmod(0o644)
    with pytest.raises(EngineConfigError, match="chmod 600"):
        from_table({"url": "http://h", "token_file": str(token)})
    token.chmod(0o600)
    config = from_table({"url": "http://h", "token_file": str(token)})
    assert config.token == "sk-abc" and "sk-abc" not in repr(config)
    token.write_text("two words\n")
    with pytest.raises(EngineConfigError, match="one line"):
        from_table({"url": "http://h", "token_file": str(token)})


def test_a_token_file_of_another_user_is_refused(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("sk-abc\n")
    token.chmod(0o600)
    monkeypatch.setattr(os, "getuid", lambda: token.stat().st_uid + 1)  # the file is not ours
    with pytest.raises(EngineConfigError, match="another user"):
        from_table({"url": "http://h", "token_file": str(token)})


def test_plain_http_off_this_machine_is_warned_about():
    config = from_table({"urls": ["http://127.0.0.1:8000", "http://gpu.lan:8000"]})
    warnings = plain_http_warnings(config)
    assert len(warnings) == 1 and "gpu.lan" in warnings[0]


def test_serve_refuses_a_bad_engine_in_one_line(tmp_path):
    token = tmp_path / "token"
    token.write_text("sk-abc")
    token.chmod(0o640)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "codespec",
            "serve",
            "--socket",
            str(tmp_path / "s.sock"),
            "--engine",
            "http://127.0.0.1:9",
            "--engine-token-file",
            str(token),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "chmod 600" in run.stderr
    assert "sk-abc" not in run.stderr


def test_sse_events_in_any_pieces():
    stream = (
        b'data: {"a": 1}\n\n: keep-alive\n\ndata: line one\ndata: line two\r\n\r\ndata: [DONE]\n\n'
    )
    for size in (1, 3, 7, len(stream)):
        parser = SseParser(1 << 20)
        events = []
        for i in range(0, len(stream), size):
            events += parser.feed(stream[i : i + size])
        events += parser.close()
        assert events == ['{"a": 1}', "line one\nline two", "[DONE]"]


def test_sse_refuses_past_its_bound_even_without_a_newline():
    parser = SseParser(1000)
    with pytest.raises(StreamFault, match="larger than"):
        for _ in range(100):
            parser.feed(b"x" * 100)


def test_vllm_per_request_metrics_as_documented():
    event = {
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 53},
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 1.2325581395348837,
                "draft_acceptance_rate": 0.07751937984496124,
                "acceptance_histogram": [39, 1, 0, 3],
                "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
                "num_spec_steps": 43,
                "num_accepted_draft_tokens": 10,
                "num_draft_tokens": 129,
                "num_spec_tokens": 3,
            }
        },
    }
    assert from_event(event) == ServerSpeculation(129, 10, 43, "vllm")
    assert from_event({"metrics": {"speculative_decoding": None}}) is None


def test_llama_cpp_server_timings():
    event = {"timings": {"prompt_n": 12, "predicted_n": 40, "draft_n": 30, "draft_n_accepted": 21}}
    assert from_event(event) == ServerSpeculation(30, 21, source="llama.cpp")
    assert from_event({"timings": {"predicted_n": 4}}) is None  # it did not speculate


PROMETHEUS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 43.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen"} 7.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 129.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen"} 21.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 10.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen"} 5.0
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
"""


def test_vllm_prometheus_counters_summed_over_engines():
    assert from_prometheus(PROMETHEUS) == ServerSpeculation(150, 15, 50, "vllm")
    assert from_prometheus("# no speculation here\nvllm:num_requests_running 1.0\n") is None


def test_draft_length_follows_a_llama_cpp_servers_reported_acceptance():
    from codespec.remote.speculation import MIN_REPORTS, RemoteSpeculation

    policy = RemoteSpeculation()
    for _ in range(MIN_REPORTS):
        policy.observe("line", ServerSpeculation(100, 80, source="vllm"))
    assert policy.n_max("line") is None  # vLLM: set at its start, not per request
    policy = RemoteSpeculation()
    policy.observe("line", ServerSpeculation(100, 80, source="llama.cpp"))
    assert policy.n_max("line") is None  # too few reports yet
    for _ in range(MIN_REPORTS):
        policy.observe("line", ServerSpeculation(100, 80, source="llama.cpp"))
        policy.observe("block", ServerSpeculation(100, 5, source="llama.cpp"))
    assert policy.n_max("line") == 8  # 0.8 per token: runs of 4 on average, drafts of 8
    assert policy.n_max("block") == 0  # drafts that are almost never kept: none
    assert policy.n_max("other") is None
