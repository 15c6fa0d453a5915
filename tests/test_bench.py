"""`codespec bench`: the corpus (real files, real grammars), the metrics, and a whole run of the
command on a tiny model through its CLI."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from codespec.bench import corpus, report, sources
from codespec.bench.runner import MAX_ROUNDS, ROUND_TOKENS, quality, rounds_for
from codespec.engine.proposers import NGRAM
from codespec.languages import LANGUAGES

LUA = """local M = {}

-- helpers for a small table library (written for this test)
local function copy(t)
  local out = {}
  for k, v in pairs(t) do
    out[k] = v
  end
  return out
end

function M.merge(a, b)
  local out = copy(a)
  for k, v in pairs(b) do
    if out[k] == nil then
      out[k] = v
    end
  end
  return out
end

function M.keys(t)
  local out = {}
  for k in pairs(t) do
    out[#out + 1] = k
  end
  table.sort(out)
  return out
end

function M.values(t)
  local out = {}
  for _, v in pairs(t) do
    out[#out + 1] = v
  end
  return out
end
"""

JS = """'use strict';

const DEFAULTS = { retries: 3, timeout: 1000 };

function withDefaults(options) {
  const merged = Object.assign({}, DEFAULTS, options);
  if (merged.retries < 0) {
    throw new Error('retries must be >= 0');
  }
  return merged;
}

function backoff(attempt, base) {
  const delay = base * Math.pow(2, attempt);
  const jitter = Math.random() * base;
  return Math.min(delay + jitter, 30000);
}

class Client {
  constructor(options) {
    this.options = withDefaults(options);
    this.pending = new Map();
  }

  request(name, payload) {
    const id = this.pending.size + 1;
    this.pending.set(id, { name, payload });
    return id;
  }

  cancel(id) {
    const entry = this.pending.get(id);
    this.pending.delete(id);
    return entry;
  }
}

module.exports = { Client, backoff, withDefaults };
"""


def fake_package(corpus_dir: Path, origin: str, folder: str, files: dict[str, str]) -> None:
    root = corpus_dir / origin / folder
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text * 3 if len(text) < sources.MIN_FILE_BYTES else text)
    (root / "source.json").write_text(json.dumps({"version": "9.9-test"}))


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    fake_package(d, "debian", "lua-penlight", {"usr/share/lua/5.4/pl/tablex.lua": LUA})
    fake_package(d, "npm", "express4.21.2", {"package/lib/client.js": JS})
    return d


def file_text(packages: list[sources.Package], hole: corpus.Hole) -> str:
    (package,) = [p for p in packages if p.label == hole.package]
    return (package.root / hole.file).read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", corpus.KINDS)
def test_stdlib_holes_are_cut_from_the_real_file(kind, corpus_dir):
    packages = sources.packages(corpus_dir, {"python"})
    holes = corpus.sample_holes(packages, "python", kind, 3, seed=1)
    assert len(holes) == 3 and len({h.file for h in holes}) == 3  # one hole per file
    for hole in holes:
        text = file_text(packages, hole)
        assert hole.prefix + hole.truth + hole.suffix == text
        assert text[hole.start : hole.end] == hole.truth and hole.truth.strip()
        assert hole.suffix.startswith("\n")  # holes end at a line end
        lines = hole.truth.split("\n")
        if kind == "line":
            assert len(lines) == 1
        elif kind == "block":
            assert 2 <= len(lines) <= 8
        elif kind == "function":
            # Python: the line before the body is the header (possibly a docstring's end)
            assert hole.prefix.rstrip().endswith((":", '"""', "'''")) or "def " in hole.prefix
        else:  # copy: the removed lines appear, in order, earlier in the file
            first, second = lines[0].strip(), lines[1].strip()
            earlier = [s.strip() for s in hole.prefix.split("\n")]
            assert any(
                earlier[i] == first and earlier[i + 1] == second for i in range(len(earlier) - 1)
            )


def test_sampling_is_deterministic_and_independent_of_other_languages(corpus_dir):
    python_only = sources.packages(corpus_dir, {"python"})
    everything = sources.packages(corpus_dir)
    assert {p.spec.language for p in everything} >= {"python", "lua", "javascript"}
    a = [h.describe() for h in corpus.sample_holes(python_only, "python", "block", 4, seed=7)]
    b = [h.describe() for h in corpus.sample_holes(everything, "python", "block", 4, seed=7)]
    c = [h.describe() for h in corpus.sample_holes(python_only, "python", "block", 4, seed=8)]
    assert a == b
    assert a != c
    assert all(h["package"].startswith(("stdlib:python@", "site-packages:")) for h in a)
    assert {h["package"].split(":")[0] for h in a} == {"stdlib", "site-packages"}  # turns
    assert all("prefix" not in h for h in a)


def test_a_recorded_corpus_is_cut_again_exactly(corpus_dir):
    packages = sources.packages(corpus_dir)
    holes = corpus.sample_holes(packages, "lua", "block", 1, seed=4)
    holes += corpus.sample_holes(packages, "python", "function", 2, seed=4)
    described = json.loads(json.dumps([h.describe() for h in holes]))  # as the JSON keeps it
    assert corpus.recut(packages, described) == holes
    described[1]["file_sha256"] = "0" * 64
    with pytest.raises(ValueError, match="differs from the record"):
        corpus.recut(packages, described)
    described[1]["package"] = "npm:left-pad@0.0.1"
    with pytest.raises(ValueError, match="not in the corpus"):
        corpus.recut(packages, described)
    # a rerun cuts what it still can and names what it cannot (a mirror that moved on)
    kept, skipped = corpus.recut_available(packages, described)
    assert kept == [holes[0], holes[2]]
    assert skipped == [
        "npm:left-pad@0.0.1 is not in the corpus (codespec bench --fetch): 1 hole(s) skipped"
    ]


@pytest.mark.parametrize("language", ["lua", "javascript"])
def test_function_bodies_leave_the_closing_line_in_the_suffix(language, corpus_dir):
    packages = sources.packages(corpus_dir, {language})
    holes = corpus.sample_holes(packages, language, "function", 1, seed=2)
    assert len(holes) == 1
    hole = holes[0]
    closer = "end" if language == "lua" else "}"
    assert hole.suffix.split("\n")[1].strip() == closer
    assert not hole.truth.rstrip().endswith(closer) or language == "lua"
    assert hole.package.endswith("@9.9-test")
    # the file without the body still parses as far as the grammar goes: header, closer intact
    header = hole.prefix.rstrip().split("\n")[-1]
    assert "function" in header or "(" in header


def test_block_holes_in_other_grammars(corpus_dir):
    packages = sources.packages(corpus_dir, {"javascript"})
    (hole,) = corpus.sample_holes(packages, "javascript", "block", 1, seed=3)
    assert hole.truth.count("\n") >= 1
    text = file_text(packages, hole)
    assert text.count(hole.truth) >= 1 and hole.prefix + hole.truth + hole.suffix == text


def test_no_leak_check():
    hole = corpus.Hole("python", "line", "x", "f.py", "", 4, 9, 1, 4, "abc\nx = ", "1 + 2", "\ny\n")
    corpus.check_no_leak(hole, "x = ", "\ny")
    with pytest.raises(AssertionError):
        corpus.check_no_leak(hole, "x = 1 + 2", "\ny")  # removed text in the prompt's prefix
    with pytest.raises(AssertionError):
        corpus.check_no_leak(hole, "x = ", "1 + 2\ny")


def test_quality_metrics():
    hole = corpus.Hole(
        "python", "block", "x", "f.py", "", 0, 0, 1, 4, "def f(a):\n    ", "return a + 1", "\n"
    )
    same = quality(hole, "return a + 1   \n\n")
    assert same == {"exact_match": True, "edit_similarity": 1.0, "parse_ok": True}
    near = quality(hole, "return a + 2")
    assert not near["exact_match"] and 0.9 < near["edit_similarity"] < 1.0 and near["parse_ok"]
    broken = quality(hole, "return (a + 1")
    assert not broken["parse_ok"]


def row(language: str, kind: str, spec: tuple, plain: tuple, exact: bool = True) -> dict:
    """A per-hole record: (tokens, total_ms, passes) for each run."""

    def run(t):
        return dict(
            tokens=t[0],
            total_ms=t[1],
            ttft_ms=10.0,
            passes=t[2],
            proposed={"ngram": 4, "draft": 0},
            accepted={"ngram": 2, "draft": 0},
            draft_passes=0,
        )

    return dict(
        hole={"language": language, "kind": kind, "package": "p", "file": "f", "line": 1},
        spec=run(spec),
        plain=run(plain),
        exact=exact,
        divergence_logit_gap=None if exact else 0.0,
        divergence_fresh_gap=None if exact else 0.0,
        draft_decisions={"draft_off": 3},
        exact_match=False,
        edit_similarity=0.5,
        parse_ok=True,
        ttft_ms=100.0,
        cold_ttft_ms=1000.0,
    )


def test_aggregate_is_a_ratio_of_sums():
    rows = [
        row("python", "line", spec=(10, 1000, 5), plain=(10, 2000, 10)),
        row("python", "copy", spec=(30, 1000, 6), plain=(30, 6000, 30), exact=False),
        row("go", "line", spec=(0, 100, 1), plain=(0, 100, 1)),
    ]
    summary = report.summarize(rows)
    py = summary["by_language"]["python"]
    assert py["speedup"] == pytest.approx((40 / 2.0) / (40 / 8.0))
    assert py["speedup_median"] == pytest.approx((2.0 + 6.0) / 2)
    assert py["tokens_per_pass"] == pytest.approx(40 / 11)
    assert py["exact"] == 0.5 and len(py["mismatches"]) == 1
    assert py["mismatches"][0].endswith("(top-2 logit gap 0.000; 0.000 after a fresh prefill)")
    assert py["acceptance"]["ngram"] == 0.5 and py["acceptance"]["draft"] is None
    assert summary["overall"]["holes"] == 3 and summary["by_kind"]["line"]["holes"] == 2
    assert summary["by_language_kind"]["python"]["copy"]["speedup"] == pytest.approx(6.0)
    text = report.table(summary)
    assert "python" in text and "overall" in text and "4.00x" in text


def priced_row(language: str, kind: str, spec_widths: list, spec_ms: list, plain_ms: list):
    """A hole whose runs record their passes (widths and times); both emit len(plain_ms)
    tokens."""
    record = row(language, kind, spec=(len(plain_ms), 10 + sum(spec_ms), len(spec_ms) + 1),
                 plain=(len(plain_ms), 10 + sum(plain_ms), len(plain_ms) + 1))  # fmt: skip
    record["spec"] |= dict(pass_widths=spec_widths, pass_ms=spec_ms)
    record["plain"] |= dict(pass_widths=[1] * len(plain_ms), pass_ms=plain_ms)
    return record


def test_priced_speedup_prices_each_pass_at_its_widths_median():
    """A hole timed while the machine was busy: measured, speculation lost; priced at the run's
    median pass times, its two passes of width 2 against four of width 1 win. A hole where
    speculation really did not pay loses either way."""
    rows = [
        # quiet machine: 4 plain passes of 100 ms; speculation: 2 passes of width 2 at 120 ms
        priced_row("go", "line", [2, 2], [120, 120], [100, 100, 100, 100]),
        # busy during the speculative run: the same two passes took 300 ms each
        priced_row("go", "copy", [2, 2], [300, 300], [100, 100, 100, 100]),
        # proposals rejected: 4 passes, two of them width 2, for the plain run's 4 tokens
        priced_row("lua", "line", [1, 2, 1, 2], [100, 120, 100, 120], [100, 100, 100, 100]),
        priced_row("python", "block", [2, 2, 2], [120, 120, 120], [100] * 6),
    ]
    summary = report.summarize(rows)
    assert summary["pass_prices_ms"] == {1: 100, 2: 120}
    copy = summary["by_language_kind"]["go"]["copy"]
    assert copy["speedup"] == pytest.approx(410 / 610)  # measured: a loss
    assert copy["priced_speedup"] == pytest.approx(410 / 250)  # priced: as on the quiet machine
    lua = summary["by_language_kind"]["lua"]["line"]
    assert lua["speedup"] == pytest.approx(410 / 450) == lua["priced_speedup"]
    assert summary["slices_below_one"] == {
        "speedup": ["go copy 0.67x", "lua line 0.91x"],
        "priced_speedup": ["lua line 0.91x"],
        "priced_bets": [],  # (these records keep no bets)
    }
    assert summary["timing_noise"] == pytest.approx(0.0)  # 3 of 4 holes did not stray
    assert summary["overall"]["priced_speedup"] == pytest.approx(1840 / 1320)
    assert "priced" in report.table(summary)
    # records from before passes were kept: no priced figure, nothing made up
    old = [row("go", "line", spec=(4, 100, 2), plain=(4, 200, 4))]
    assert report.summarize(old)["overall"]["priced_speedup"] is None


def test_bets_are_summed_per_slice_and_checked_against_their_predictions():
    """A slice that lost: its bets kept 0 tokens of 1.7 expected; across all bets, the first
    token's predicted rate against how often it was kept, in bins of 0.2."""
    lost = priced_row("lua", "line", [2, 3, 2], [120, 130, 120], [100, 100])
    lost["spec"]["bets"] = [[0.7, 0.7, 0.21, 0], [0.5, 1.0, 0.8, 0]]
    won = priced_row("go", "copy", [3, 3], [130, 130], [100] * 6)
    won["spec"]["bets"] = [[0.9, 1.7, 0.3, 2], [1.0, 2.0, 0.0, 2]]
    summary = report.summarize([lost, won])
    bets = summary["by_language_kind"]["lua"]["line"]["bets"]
    assert bets["count"] == 2 and bets["kept"] == 0 and bets["expected"] == pytest.approx(1.7)
    assert bets["z"] == pytest.approx(-1.7 / math.sqrt(1.01))
    assert summary["slices_below_one"]["priced_bets"] == [
        "lua line kept 0 tokens of 1.7 expected (-1.7 sd, 2 bets)"
    ]
    assert summary["overall"]["bets"]["kept"] == 4
    bins = [(c["low"], c["bets"], c["kept"]) for c in summary["bet_calibration"]]
    assert bins == [(0.4, 1, 0.0), (0.6, 1, 0.0), (0.8, 2, 1.0)]  # 1.0 counts in the last bin
    assert "0.8-1.0: 0.95 -> 1.00 (2)" in report.calibration_text(summary["bet_calibration"])


def test_bench_command_end_to_end(tiny_manifest, tmp_path):
    """The whole command on a tiny fp32 model: holes from the stdlib, JSON, docs and plots."""
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nhand-written text stays\n")
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "codespec", "bench", "--pair", str(tiny_manifest)]
    args = ["--languages", "python", "--kinds", "line,copy", "--per-kind", "2"]
    args += ["--max-tokens", "8", "--corpus-dir", str(tmp_path / "corpus")]
    args += ["--json", str(out), "--write-docs", "--docs", str(docs)]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd + args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "overall" in done.stdout and "speedup" in done.stdout
    result = json.loads(out.read_text())
    for figures in (result["overall"], result["by_language"]["python"]):
        for key in ("speedup", "exact", "tokens_per_pass", "exact_match", "edit_similarity",
                    "parse_ok", "ttft_ms_p50", "total_ms_p50"):  # fmt: skip
            assert figures[key] is not None, key
        assert figures["exact"] == 1.0  # fp32: speculative == plain greedy on every hole
        assert figures["priced_speedup"] > 0
    assert result["overall"]["holes"] == 4 == len(result["corpus"]["holes"])
    assert set(result["by_kind"]) == {"line", "copy"}
    assert result["holes"][0]["plain"]["tokens"] <= 8
    for hole in result["holes"]:  # short completions: timed in rounds, the median kept
        for mode in ("spec", "plain"):
            run = hole[mode]
            assert len(run["rounds_ms"]) == rounds_for(hole["plain"]["tokens"]) > 1
            assert run["total_ms"] == pytest.approx(statistics.median(run["rounds_ms"]))
    assert all(h["hole"]["language"] == "python" for h in result["holes"])
    text = docs.read_text()
    assert "hand-written text stays" in text and "<!-- bench:start" in text
    assert "| **overall** |" in text
    assert (tmp_path / "img" / "bench-speedup.png").stat().st_size > 1000
    assert (tmp_path / "img" / "bench-acceptance.png").stat().st_size > 1000

    # the same holes again from the recorded corpus description, with a core kept busy: the
    # requests run on the cores left free
    again = tmp_path / "again.json"
    rerun = [*cmd, "--holes-from", str(out), "--max-tokens", "4", "--json", str(again)]
    rerun += ["--background-load", "1"]
    done = subprocess.run(rerun, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(again.read_text())
    assert loaded["corpus"]["holes"] == result["corpus"]["holes"]
    assert loaded["settings"]["background_load"] == 1 and "threads: " in done.stdout
    threads = {int(n): count for n, count in loaded["threads"].items()}
    assert sum(threads.values()) == 2 * len(loaded["holes"])
    if loaded["machine"]["threads"] >= 2:
        assert max(threads) < loaded["machine"]["threads"]

    # the docs can be regenerated from the saved JSON alone
    docs.write_text("# Benchmarks\n")
    again = subprocess.run(
        cmd + ["--docs-from", str(out), "--docs", str(docs)], capture_output=True, text=True
    )
    assert again.returncode == 0 and "| **overall** |" in docs.read_text()


def test_the_memory_line_says_when_the_peak_was_reached():
    from codespec.bench.docs import memory_text

    def memory(loaded: float, peak: float) -> dict:
        return {
            "after_load": {"rss_mb": loaded, "rss_now_mb": 2124.0},
            "peak": {"rss_mb": peak, "rss_now_mb": 2378.0},
        }

    line = memory_text(memory(2682.0, 2682.0), 35.3)
    assert line == (
        "- Memory: RSS 2124 MB after loading, 2378 MB at the end, peak 2682 MB (during "
        "loading); loading the prepared pair 35.3 s."
    )
    assert "peak 3100 MB (after loading)" in memory_text(memory(2682.0, 3100.0), 35.3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--languages", "cobol"], "unknown language 'cobol'"),
        (["--kinds", "poem"], "unknown hole kind 'poem'"),
        (["--per-kind", "0"], "--per-kind: must be from 1"),
        (["--languages", "lua", "--corpus-dir", "/nonexistent"], "no holes"),
    ],
)
def test_bad_bench_input_is_one_line_and_exit_2(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "codespec", "bench", *args], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("codespec: error:")
    assert message in done.stderr and "Traceback" not in done.stderr


def test_peer_without_llama_cpp_says_how_to_install(monkeypatch, capsys):
    from codespec import cli

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as on a machine without the extra
    code = cli.main(["bench", "--peer", "llama.cpp", "--languages", "python"])
    assert code == 2
    assert "pip install -e '.[peer]'" in capsys.readouterr().err


def test_every_language_has_a_source_package():
    assert {s.language for s in sources.SOURCES} == set(LANGUAGES)


def test_peer_summary_compares_the_same_holes():
    from codespec.bench.peer import peer_lines, summarize

    def llama(tokens, total, ttft, cold, ids):
        return dict(tokens=tokens, total_ms=total, ttft_ms=ttft, cold_ttft_ms=cold, ids=ids)

    records = [
        dict(plain=llama(10, 500, 40, 8000, [1]), prompt_lookup=llama(10, 2000, 50, 9000, [1]),
             plain_matches_ours=True, lookup_matches_its_greedy=True),
        dict(plain=llama(30, 1000, 60, 8000, [2]), prompt_lookup=llama(30, 1000, 70, 9000, [3]),
             plain_matches_ours=False, lookup_matches_its_greedy=False),
    ]  # fmt: skip
    ours = [row("python", "line", (10, 1000, 5), (10, 2000, 10)),
            row("go", "copy", (30, 3000, 9), (30, 6000, 30))]  # fmt: skip
    s = summarize(records, ours)
    assert s["llama.cpp plain"]["tok_s"] == pytest.approx(40 / 1.5)
    assert s["llama.cpp prompt lookup"]["tok_s"] == pytest.approx(40 / 3.0)
    assert s["codespec speculative"]["tok_s"] == pytest.approx(40 / 4.0)
    assert s["codespec plain"]["tok_s"] == pytest.approx(40 / 8.0)
    assert s["codespec plain"]["ttft_ms_p50"] == 100.0 and s["holes"] == 2
    assert s["llama.cpp plain matches codespec plain"] == 1
    text = "\n".join(peer_lines({"model": "m.gguf", "summary": s}))
    assert "| llama.cpp plain | 26.7 | 1.00x |" in text and "1 of 2 holes" in text
    assert "| codespec speculative | 10.0 | 0.38x |" in text


def test_peer_prompt_is_the_prompt_complete_builds(tiny_manifest, corpus_dir):
    """The peer gets our prompt by tokenizing alone; it must be the one `complete` prefills."""
    from codespec.bench.runner import bench_settings, cursor_of, options_for, prompt_ids
    from codespec.completion import complete
    from codespec.runtime import load_pair

    pair = load_pair(str(tiny_manifest), progress=lambda m: None)
    settings = bench_settings(2)
    packages = sources.packages(corpus_dir, {"python", "lua"})
    holes = corpus.sample_holes(packages, "python", "line", 1, seed=1)
    holes += corpus.sample_holes(packages, "lua", "function", 1, seed=1)
    for hole in holes:
        options = options_for(hole, settings)
        result = complete(pair, cursor_of(hole), options, path=Path(hole.file).name)
        assert prompt_ids(pair, hole, settings) == result.anchor.ids


def test_short_completions_are_timed_in_rounds():
    assert rounds_for(0) == rounds_for(1) == MAX_ROUNDS
    assert rounds_for(ROUND_TOKENS // 4) == 4 and rounds_for(ROUND_TOKENS // 2) == 2
    assert rounds_for(ROUND_TOKENS) == rounds_for(10 * ROUND_TOKENS) == 1


def test_every_round_starts_from_the_policy_state_of_the_first(
    tiny_manifest, corpus_dir, monkeypatch
):
    """A round replays the first round's situation (its probes and decisions included); the
    next hole sees the policy as one round left it."""
    from codespec.bench import runner
    from codespec.completion import complete
    from codespec.runtime import load_pair

    pair = load_pair(str(tiny_manifest), progress=lambda m: None)
    packages = sources.packages(corpus_dir, {"python"})
    (hole,) = corpus.sample_holes(packages, "python", "line", 1, seed=1)
    seen = []  # the policy's state when each speculative run starts

    def recording_complete(pair, cursor, options, **kwargs):
        if options.speculate and options.max_tokens > 1:
            policy = pair.engine.policy
            seen.append((policy.costs.passes, dict(policy.decisions), policy.costs.pass_s[1].value))
        return complete(pair, cursor, options, **kwargs)

    monkeypatch.setattr(runner, "complete", recording_complete)
    row = runner.run_hole(pair, hole, runner.bench_settings(6), spec_first=True)
    assert len(seen) == len(row["spec"]["rounds_ms"]) == rounds_for(row["plain"]["tokens"]) > 1
    assert all(state == seen[0] for state in seen)
    assert pair.engine.policy.costs.passes > seen[0][0]  # what the first round taught it stays
    assert pair.engine.policy.acceptance.context == "line"  # a rest-of-line completion's context
    assert all(context == "line" for context, _, _ in pair.engine.policy.acceptance.spans[NGRAM])
    assert row["exact"]


def test_repository_holes_use_a_name_only_another_file_defines(tmp_path):
    """CrossCodeEval's construction on a real package layout: the removed text starts at a use
    (in code, not in a string, comment or import) of a name another file of the package
    defines and the file itself does not."""
    from codespec.bench.repo import cut_repo_holes
    from codespec.bench.sources import Package, SourceSpec

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    padding = "".join(
        f"# filler line {n} so the file is long enough to sample\n" for n in range(40)
    )
    (pkg / "billing.py").write_text(
        padding + "def compute_total(items, tax_rate):\n    return sum(items) * (1 + tax_rate)\n"
    )
    (pkg / "main.py").write_text(
        "from billing import compute_total\n" + padding
        + "# compute_total is documented elsewhere\n"
        + "def run(items):\n    label = 'compute_total(items)'\n"
        + "    return compute_total(items, tax_rate=0.2)\n"
    )  # fmt: skip
    package = Package(SourceSpec("site-packages", "pkg", "python", "pkg"), "1", tmp_path)
    holes = cut_repo_holes([package], "python", 5, seed=1)
    assert [(h.relative, h.name, h.hole.truth) for h in holes] == [
        ("main.py", "compute_total", "compute_total(items, tax_rate=0.2)")
    ]
    hole = holes[0].hole
    assert hole.prefix.endswith("    return ") and hole.suffix == "\n"
    # --repo-lines: the lines after it go too (here the file ends first)
    [longer] = cut_repo_holes([package], "python", 5, seed=1, lines=3)
    assert longer.hole.truth == "compute_total(items, tax_rate=0.2)\n" and longer.hole.suffix == ""
    (pkg / "main.py").write_text((pkg / "main.py").read_text() + "\nprint(run([1]))\nexit()\n")
    [longer] = cut_repo_holes([package], "python", 5, seed=1, lines=3)
    assert longer.hole.truth == "compute_total(items, tax_rate=0.2)\n\nprint(run([1]))"
    assert longer.hole.kind == "repo-3" and longer.hole.suffix == "\nexit()\n"


def test_bench_repo_end_to_end(tiny_manifest, tmp_path):
    """`codespec bench --repo` on the tiny model: every hole completed in each mode, the
    workspace mode's prompt holding the definitions the in-file one lacks, the speculative
    modes' output the plain run's, the drafter searching the package's token ids."""
    out = tmp_path / "repo.json"
    cmd = [sys.executable, "-m", "codespec", "bench", "--pair", str(tiny_manifest), "--repo"]
    cmd += ["--languages", "python", "--per-kind", "8", "--max-tokens", "4", "--json", str(out)]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "EM in-file" in done.stdout
    result = json.loads(out.read_text())
    assert result["summary"]["all"]["holes"] == len(result["holes"]) == 8
    with_context = [h for h in result["holes"] if h["chunks"]]
    assert with_context, "no repository hole got workspace context"
    for hole in with_context:
        assert hole["workspace"]["prompt_tokens"] > hole["in-file"]["prompt_tokens"]
    for hole in result["holes"]:
        assert set(hole["in-file"]) >= {"exact_match", "edit_similarity", "parse_ok", "ms"}
        assert hole["drafter"]["completion"] == hole["plain"]["completion"]
        assert hole["drafter"]["tokens"] == hole["plain"]["tokens"] > 0
        assert hole["plain"]["passes"] == hole["plain"]["tokens"]  # one token a pass
    every = result["summary"]["all"]
    assert every["drafter"]["exact"] == every["workspace"]["exact"] == 1.0
    assert every["drafter"]["speedup"] > 0 and "speedup ws/drafter" in done.stdout
