"""Acceptance stats without a daemon: the verdict rules, the SQLite store under faults, the
report and `codespec stats`."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from codespec.stats import schema
from codespec.stats import store as store_module
from codespec.stats.record import Timing, request_row
from codespec.stats.report import ReportError, build, fetch, parse_since, table
from codespec.stats.schema import SCHEMA_VERSION, StoreError, open_readonly
from codespec.stats.store import Store
from codespec.stats.verdicts import EXPIRE_S, Ledger, Suggestion

# -- verdicts -------------------------------------------------------------------------------


class Recorder:
    """What a ledger wrote, folded into one row per id as the store would."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.writes = 0

    def __call__(self, suggestion_id: str, fields: dict) -> None:
        self.writes += 1
        self.rows.setdefault(suggestion_id, {"shown": 0, "verdict": None}).update(fields)


def offered(ledger: Ledger, sid: str, text: str = "return x", uri: str = "file:///a.py"):
    ledger.offered(Suggestion(sid, uri, "def f(x):\n    ", "\n", text))


def test_inferred_accept_then_explicit_accept_is_counted_once():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    ledger.document_changed("file:///a.py", "def f(x):\n    return x\n")
    ledger.explicit("codespec.didAccept", ["a"])  # the item's command, after the edit
    assert rec.rows["a"] == {
        "shown": 1,
        "verdict": "accepted",
        "accepted_chars": 8,
        "verdict_source": "inferred",
    }
    assert rec.writes == 2  # shown, then the verdict: nothing twice


def test_explicit_verdict_beats_the_inferred_one():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    ledger.document_changed("file:///a.py", "def f(x):\n    ret\n")  # accept-word
    ledger.explicit("codespec.didPartialAccept", ["a", 3])
    ledger.document_changed("file:///a.py", "def f(x):\n    retry()\n")  # typed over the rest
    assert rec.rows["a"]["verdict"] == "partial"
    assert rec.rows["a"]["accepted_chars"] == 3
    assert rec.rows["a"]["verdict_source"] == "explicit"
    assert not ledger.open


def test_typing_through_is_in_progress_and_departing_rejects():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    ledger.document_changed("file:///a.py", "def f(x):\n    re\n")  # typed what it shows
    assert "verdict" not in rec.rows["a"] or rec.rows["a"]["verdict"] is None
    ledger.document_changed("file:///a.py", "def f(x):\n    rex\n")  # departed after 2 chars
    assert rec.rows["a"]["verdict"] == "partial" and rec.rows["a"]["accepted_chars"] == 2
    offered(ledger, "b")
    ledger.document_changed("file:///a.py", "def f(x):\n    pass\n")
    assert rec.rows["b"]["verdict"] == "rejected"
    assert rec.rows["b"]["verdict_source"] == "inferred"


def test_an_edit_elsewhere_in_the_window_departs():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    ledger.document_changed("file:///a.py", "def g(x):\n    \n")
    assert rec.rows["a"]["verdict"] == "rejected"


def test_unknown_ids_and_bad_arguments_are_ignored():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    for command, args in [
        ("codespec.didAccept", ["nope"]),
        ("codespec.didAccept", []),
        ("codespec.didAccept", [{"x": 1}]),
        ("codespec.didPartialAccept", ["a"]),
        ("codespec.didPartialAccept", ["a", -4]),
        ("codespec.didPartialAccept", ["a", True]),
    ]:
        ledger.explicit(command, args)
    assert rec.rows["a"] == {"shown": 1, "verdict": None}


def test_partial_accepts_add_up_to_a_full_accept():
    rec = Recorder()
    ledger = Ledger(rec)
    offered(ledger, "a")
    ledger.explicit("codespec.didPartialAccept", ["a", 6])
    assert rec.rows["a"]["verdict"] == "partial"
    ledger.explicit("codespec.didPartialAccept", ["a", 6])
    assert rec.rows["a"]["verdict"] == "accepted" and rec.rows["a"]["accepted_chars"] == 8


def test_a_client_that_reports_shows_counts_only_what_it_showed():
    rec = Recorder()
    ledger = Ledger(rec, client_reports_shown=True)
    offered(ledger, "a")
    offered(ledger, "b")  # "a" was never shown: no verdict either
    assert "a" not in rec.rows
    ledger.explicit("codespec.didShow", ["b"])
    ledger.explicit("codespec.didDismiss", ["b"])
    assert rec.rows["b"] == {
        "shown": 1,
        "verdict": "rejected",
        "accepted_chars": 0,
        "verdict_source": "explicit",
    }


def test_unjudged_suggestions_expire_and_sessions_end_them():
    now = [0.0]
    rec = Recorder()
    ledger = Ledger(rec, clock=lambda: now[0])
    offered(ledger, "a")
    offered(ledger, "b", uri="file:///b.py")
    now[0] = EXPIRE_S + 1
    ledger.explicit("codespec.didAccept", ["a"])  # too late: expired, left unaccepted
    assert rec.rows["a"]["verdict"] == "rejected"
    offered(ledger, "c")
    ledger.end()
    assert rec.rows["c"]["verdict"] == "rejected" and not ledger.open


# -- the store -------------------------------------------------------------------------------


def row(request_id: str, language: str = "python", age_s: float = 0.0, **extra) -> dict:
    timing = Timing(arrived=0.0, started=0.01, first_text=0.1, done=0.3)
    base = request_row(request_id, language, "single", "auto", "served", timing, "x = 1")
    base["t"] = time.time() - age_s
    return {**base, **extra}


def count(store: Store) -> int:
    return store.read(lambda conn: conn.execute("SELECT COUNT(*) FROM requests").fetchone()[0])


def test_store_commits_in_batches_and_a_reader_sees_them(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    for i in range(50):
        store.put_request(row(f"r{i}"))
    store.put_verdict("r3", {"shown": 1, "verdict": "accepted", "accepted_chars": 5})
    assert store.flush()
    reader = open_readonly(tmp_path / "s.sqlite3")
    assert reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 50
    assert reader.execute("SELECT verdict FROM requests WHERE id='r3'").fetchone()[0] == "accepted"
    assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (tmp_path / "s.sqlite3").stat().st_mode & 0o777 == 0o600
    store.close()


def test_a_reader_holding_a_transaction_does_not_block_the_writer(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    store.put_request(row("a"))
    store.flush()
    reader = sqlite3.connect(tmp_path / "s.sqlite3")
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 1  # a snapshot
    store.put_request(row("b"))
    started = time.monotonic()
    assert store.flush(timeout=5)
    assert time.monotonic() - started < 4
    assert reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 1  # still its snapshot
    reader.rollback()
    assert reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 2
    assert store.status == "file"
    store.close()


def test_rows_older_than_the_retention_are_pruned_on_open(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("old", age_s=40 * 86400))
    store.put_request(row("new", age_s=60))
    store.close()
    store = Store(path, retention_days=30)
    assert store.read(lambda c: [r[0] for r in c.execute("SELECT id FROM requests")]) == ["new"]
    store.close()


def test_a_corrupt_file_is_moved_aside_with_one_warning(tmp_path):
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"this is not a database, it is junk" * 200)
    store = Store(path)
    assert store.status == "file" and len(store.warnings) == 1
    assert "moved to" in store.warnings[0]
    aside = list(tmp_path.glob("s.sqlite3.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")
    store.put_request(row("a"))
    store.flush()
    assert count(store) == 1
    store.close()


def test_an_unwritable_place_keeps_counts_in_memory(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state dir should be")
    store = Store(blocker / "s.sqlite3")
    assert store.status.startswith("memory: cannot write") and len(store.warnings) == 1
    store.put_request(row("a"))
    store.flush()
    assert count(store) == 1
    store.close()


def test_a_full_disk_moves_the_rows_to_memory_with_one_warning(tmp_path):
    store = Store(tmp_path / "s.sqlite3", max_pages=12)  # a "disk" of 12 pages
    for i in range(600):
        store.put_request(row(f"r{i}"))
        if i % 100 == 99:
            store.flush()
    store.flush()
    assert store.status.startswith("memory") and "full" in store.status
    assert len(store.warnings) == 1
    assert count(store) == 600  # what the file held was carried over; nothing lost
    store.close()


def store_with_version(path, value) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (value,))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("value", ["abc", "4.0", "", "-3", " 4", "٤", "9" * 40, None])
def test_a_malformed_schema_version_is_a_damaged_store(tmp_path, value):
    """Text, a fraction, a negative, an empty string, other digits, a huge number, NULL: the
    daemon moves the store aside and starts a fresh one; ``codespec stats`` says so in a line."""
    path = tmp_path / "s.sqlite3"
    store_with_version(path, value)
    result = stats_cli("--db", str(path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    store = Store(path)
    assert store.status == "file" and len(store.warnings) == 1, store.warnings
    assert list(tmp_path.glob("s.sqlite3.corrupt-*"))
    store.put_request(row("a"))
    store.flush()
    assert count(store) == 1
    store.close()
    assert stats_cli("--db", str(path), "--json").returncode == 0  # the fresh store reads


def test_a_well_formed_older_version_is_migrated_not_moved(tmp_path):
    """(The control of the test above: a good version string keeps the store.)"""
    path = tmp_path / "s.sqlite3"
    store_with_version(path, "0")
    store = Store(path)
    assert store.status == "file" and store.warnings == []
    assert not list(tmp_path.glob("*.corrupt-*"))
    store.close()


def test_a_newer_schema_is_left_alone(tmp_path):
    path = tmp_path / "s.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    store = Store(path)
    assert store.status.startswith("memory") and "newer codespec" in store.status
    store.close()
    assert not list(tmp_path.glob("*.corrupt-*"))  # not moved aside, not migrated
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION + 1)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='requests'").fetchone() is None
    with pytest.raises(StoreError):
        open_readonly(path)


def test_put_never_waits_for_the_disk(tmp_path):
    """The worker thread only appends to a queue, even while the writer holds its lock."""
    store = Store(tmp_path / "s.sqlite3")
    done = threading.Event()
    with store.lock:  # the writer is stuck (a slow disk)
        threading.Thread(target=lambda: (store.put_request(row("a")), done.set())).start()
        assert done.wait(2)
    store.flush()
    assert count(store) == 1
    store.close()


def file_count(path: Path) -> int:
    """Rows as another process sees them in the file (not the store's own connection)."""
    reader = open_readonly(path)
    try:
        return reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    finally:
        reader.close()


def hold_exclusive(path: Path, seconds: float) -> threading.Thread:
    """Another process's ``BEGIN EXCLUSIVE`` on the store, for ``seconds``."""
    locked = threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path, timeout=10)
        other.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(seconds)
        other.rollback()
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(10)
    return thread


def test_a_lock_held_for_a_while_delays_rows_but_loses_none(tmp_path, monkeypatch):
    """Locked longer than one attempt waits: the rows stay queued and reach the file once the
    lock is released; the store never leaves the file."""
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    holder = hold_exclusive(path, 3.0)
    for i in range(3):
        store.put_request(row(f"r{i}"))
    assert not store.flush(timeout=1.0)  # still locked: not written yet
    holder.join()
    assert store.flush(timeout=10)
    assert store.status == "file" and file_count(path) == 3 and not store.warnings
    store.close()


def test_a_lasting_failure_goes_to_memory_and_comes_back_to_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.1)
    monkeypatch.setattr(store_module, "LOCKED_FOR_S", 0.5)
    monkeypatch.setattr(store_module, "RETRY_FILE_S", 0.5)
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("before"))
    assert store.flush()
    holder = hold_exclusive(path, 4.0)
    for i in range(5):
        store.put_request(row(f"r{i}"))
        time.sleep(0.3)
    assert store.flush(timeout=10)
    assert store.status.startswith("memory") and count(store) == 6  # nothing lost meanwhile
    store.put_verdict("r1", {"shown": 1, "verdict": "accepted"})
    holder.join()
    deadline = time.monotonic() + 10
    while store.status != "file":
        assert time.monotonic() < deadline, store.status
        store.put_request(row(f"later{time.monotonic()}"))
        store.flush()
    assert "written again" in store.warnings[-1]
    reader = open_readonly(path)
    assert (
        reader.execute("SELECT verdict FROM requests WHERE id = 'r1'").fetchone()[0] == "accepted"
    )
    assert reader.execute("SELECT COUNT(*) FROM requests").fetchone()[0] >= 7
    reader.close()
    store.close()


def test_a_store_deleted_under_the_daemon_is_written_anew(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("a"))
    assert store.flush()
    for name in ("s.sqlite3", "s.sqlite3-wal", "s.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    store.put_request(row("b"))
    assert store.flush()
    assert store.status == "file" and file_count(path) == 2  # "a" carried over
    assert len(store.warnings) == 1 and "deleted or replaced" in store.warnings[0]
    store.close()


def test_what_is_not_a_regular_file_is_left_untouched(tmp_path):
    fifo = tmp_path / "fifo.sqlite3"
    os.mkfifo(fifo, 0o644)
    store = Store(fifo)  # (opening a FIFO would block until a writer came)
    assert store.status.startswith("memory") and "not a regular file" in store.status
    assert stat.S_IMODE(os.stat(fifo).st_mode) == 0o644  # not chmod-ed
    store.close()
    target = tmp_path / "elsewhere.txt"
    (tmp_path / "link.sqlite3").symlink_to(target)  # dangling: never created through it
    store = Store(tmp_path / "link.sqlite3")
    assert store.status.startswith("memory") and not target.exists()
    store.close()


def test_close_folds_the_wal_into_the_file(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    for i in range(20):
        store.put_request(row(f"r{i}"))
    store.close()
    wal = tmp_path / "s.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    copy = tmp_path / "copy.sqlite3"
    copy.write_bytes(path.read_bytes())  # the file alone, as a user would copy it
    assert file_count(copy) == 20


# -- the report ------------------------------------------------------------------------------


STOPS = ["", "eos", "max_tokens", "stop_rule", "cancelled", "refused: parse"]


def random_rows(rng, n: int) -> list[dict]:
    """Rows of every outcome, verdict, stop and missing latency, over ten days."""
    rows = []
    for i in range(n):
        outcome = rng.choice(["served", "served", "empty", "cancelled", "stale", "failed"])
        extra = {
            "kind": rng.choice(["single", "multi", "none", "next-edit"]),
            "trigger": rng.choice(["auto", "invoked"]),
            "outcome": outcome,
            "stop": rng.choice(
                ["", "eos", "max_tokens", "stop_rule", "cancelled", "refused: parse"]
            ),
            "tokens": rng.randrange(0, 60),
            "chars": rng.randrange(0, 300),
            "lines": rng.randrange(0, 9),
            "passes": rng.randrange(1, 40),
            "ngram_proposed": rng.randrange(0, 30),
            "ngram_accepted": rng.randrange(0, 10),
            "draft_proposed": rng.randrange(0, 30),
            "draft_accepted": rng.randrange(0, 10),
            "prefill_tokens": rng.randrange(0, 900),
            "cached_tokens": rng.randrange(0, 900),
            "decode_s": rng.random() * 3,
            "shown": rng.choice([0, 1, 1]),
            "verdict": rng.choice([None, "accepted", "partial", "rejected"]),
            "accepted_chars": rng.randrange(0, 100),
            "context": rng.choice(["", "workspace", "neighbours", "workspace,neighbours"]),
        }
        for name in ("queue_ms", "prefill_ms", "first_ms", "total_ms"):
            extra[name] = None if rng.random() < 0.2 else float(rng.randrange(0, 2000))
        language = rng.choice(["python", "rust", "go", "lua"])
        rows.append(row(f"q{i}", language, age_s=rng.random() * 10 * 86400, **extra))
    return rows


@pytest.mark.parametrize("by", ["language", "kind", "day", "context", "ending"])
@pytest.mark.parametrize(
    "since, language", [("all", None), ("3d", None), ("12h", None), ("all", "rust")]
)
def test_the_sql_report_is_the_report_built_from_the_rows(tmp_path, by, since, language):
    """``report.query`` aggregates in SQLite; ``report.build`` defines the figures over rows.
    On a random store they agree on every figure, for every grouping and filter, whether the
    window is read through an index (a short one, a language) or straight through."""
    import random

    from codespec.stats.report import fetch, query, window
    from codespec.stats.summary import source

    store = Store(tmp_path / "s.sqlite3")
    for r in random_rows(random.Random(hash((by, since, language)) % 1000), 600):
        store.put_request(r)
    store.close()
    conn = open_readonly(tmp_path / "s.sqlite3")
    table = source(conn, *window(parse_since(since), language))
    if since != "3d":  # (all: straight through; twelve of the ten days' hours, a language: index)
        assert table.endswith("NOT INDEXED") == (since == "all" and not language), table
    fast = query(conn, since, language, by)
    naive = build(fetch(conn, parse_since(since), language), by, since, language)
    assert same(fast, naive)
    several = not language and since != "12h"  # (twelve hours may lie within one day)
    assert fast["total"]["requests"] > 0 and len(fast["groups"]) > (1 if several else 0)


def same(a, b, where: str = "report") -> bool:
    """Equal, floats within rounding (sums taken in another order), recursively."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        return all(same(a[k], b[k], f"{where}.{k}") for k in a)
    if isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        return all(same(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), (where, a, b)
        return True
    assert a == b, (where, a, b)
    return True


def test_report_figures_by_language_kind_and_day():
    rows = [
        {
            **row("a"),
            "shown": 1,
            "verdict": "accepted",
            "accepted_chars": 5,
            "tokens": 4,
            "passes": 2,
            "decode_s": 0.5,
            "ngram_proposed": 6,
            "ngram_accepted": 3,
        },
        {
            **row("b"),
            "shown": 1,
            "verdict": "partial",
            "accepted_chars": 2,
            "tokens": 6,
            "passes": 3,
            "decode_s": 1.0,
        },
        {
            **row("c", "go"),
            "shown": 1,
            "verdict": "rejected",
            "kind": "multi",
            "trigger": "invoked",
        },
        {**row("d", "go"), "outcome": "superseded", "chars": 0},
    ]
    report = build(rows)
    python = next(g for g in report["groups"] if g["key"] == "python")
    assert (python["shown"], python["accepted"], python["partial"]) == (2, 1, 1)
    assert python["acceptance_rate"] == 0.5 and python["char_acceptance_rate"] == 0.7
    assert python["tokens_per_pass"] == 2.0 and python["tokens_per_s"] == 10 / 1.5
    assert python["ngram"] == {"proposed": 6, "accepted": 3, "rate": 0.5}
    assert report["total"]["outcomes"] == {"served": 3, "superseded": 1}
    assert report["total"]["latency_ms"]["first_ms"]["p50"] == pytest.approx(100)
    kinds = {g["key"] for g in build(rows, "kind")["groups"]}
    assert kinds == {"single/auto", "multi/invoked"}
    assert len(build(rows, "day")["groups"]) == 1
    assert "python" in table(report) and "total" in table(report)
    with pytest.raises(ReportError):
        build(rows, "colour")


@pytest.mark.parametrize(
    "text,seconds",
    [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("2w", 14 * 86400), ("all", None)],
)
def test_since_spans(text, seconds):
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["7", "d7", "-1d", "7 days", ""])
def test_bad_since_spans(text):
    with pytest.raises(ReportError):
        parse_since(text)


def stats_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "codespec", "stats", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_reports_json_table_and_a_self_contained_page(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("a", "python"))
    store.put_request(row("b", "rust", age_s=3 * 86400))
    store.put_verdict("a", {"shown": 1, "verdict": "accepted", "accepted_chars": 5})
    store.close()
    out = stats_cli("--db", str(path), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["total"]["accepted"] == 1 and report["total"]["requests"] == 2
    recent = json.loads(stats_cli("--db", str(path), "--json", "--since", "1d").stdout)
    assert [g["key"] for g in recent["groups"]] == ["python"]
    only = json.loads(stats_cli("--db", str(path), "--json", "--language", "rust").stdout)
    assert only["total"]["requests"] == 1
    text = stats_cli("--db", str(path)).stdout
    assert "python" in text and "rust" in text
    page = tmp_path / "report.html"
    out = stats_cli("--db", str(path), "--html", str(page))
    assert out.returncode == 0, out.stderr
    html = page.read_text()
    assert html.count("<svg") == 4 and "<script" not in html
    # nothing fetched at view time: no resource named by address
    assert not re.search(
        r"""(src|href)\s*=\s*["']?(https?:|//)|url\(\s*["']?(https?:|//)|@import""", html
    )


def test_a_report_is_never_written_over_the_store(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("a"))
    store.close()
    before = path.read_bytes()
    (tmp_path / "alias.html").symlink_to(path)
    for target in (path, tmp_path / "alias.html", tmp_path / "." / "s.sqlite3"):
        out = stats_cli("--db", str(path), "--html", str(target))
        assert out.returncode == 1 and "is the stats store itself" in out.stderr
        assert out.stderr.count("\n") == 1
    assert path.read_bytes() == before and file_count(path) == 1
    page = tmp_path / "page.html"
    page.symlink_to(tmp_path / "victim.txt")
    (tmp_path / "victim.txt").write_text("keep me")
    assert stats_cli("--db", str(path), "--html", str(page)).returncode == 0
    assert (tmp_path / "victim.txt").read_text() == "keep me"  # the link was replaced instead
    assert not page.is_symlink() and "<svg" in page.read_text()


def test_cli_on_an_empty_or_missing_store_says_so_in_one_line(tmp_path):
    out = stats_cli("--db", str(tmp_path / "none.sqlite3"))
    assert out.returncode == 0 and out.stdout.count("\n") == 1
    assert "no completions recorded yet" in out.stdout
    Store(tmp_path / "empty.sqlite3").close()
    out = stats_cli("--db", str(tmp_path / "empty.sqlite3"), "--since", "7d")
    assert out.returncode == 0 and "no completions recorded in the last 7d" in out.stdout
    bad = stats_cli("--db", str(tmp_path / "empty.sqlite3"), "--since", "soon")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"junk" * 1000)
    out = stats_cli("--db", str(junk))
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_rows_hold_no_source_text(tmp_path):
    """Only lengths and labels: the suggestion's text never reaches the store."""
    secret = "password = 'hunter2'"
    timing = Timing(arrived=0.0, done=0.1)
    store = Store(tmp_path / "s.sqlite3")
    store.put_request(request_row("a", "python", "single", "auto", "served", timing, secret))
    store.close()
    assert b"hunter2" not in Path(tmp_path / "s.sqlite3").read_bytes()
    for extra in tmp_path.glob("s.sqlite3-*"):
        assert b"hunter2" not in extra.read_bytes()


def test_the_status_line_shows_acceptance_since_the_daemon_started(tmp_path):
    from codespec.server.config import Settings
    from codespec.server.daemon import Daemon

    store = Store(tmp_path / "s.sqlite3")
    store.put_request({**row("before", age_s=3600), "shown": 1, "verdict": "accepted"})
    daemon = Daemon(lambda: None, Settings(), store=store)
    for i, verdict in enumerate(["accepted", "rejected", "partial", None]):
        store.put_request({**row(f"r{i}"), "shown": int(verdict is not None), "verdict": verdict})
    store.flush()
    assert daemon.status_line().endswith("| accepted 1/3 shown (33%)")
    daemon.worker.stop()
    store.close()


def test_a_store_of_schema_1_is_brought_up_with_its_rows_kept(tmp_path):
    """A store an older codespec wrote (schema 1) gains the remote-engine, context and client
    columns on open, by the reader as by the daemon, and its rows count as local, in-file ones."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    for statement in schema.MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    old = {
        k: v
        for k, v in row("old").items()
        if k
        not in (
            "engine",
            "server_proposed",
            "server_accepted",
            "context",
            "workspace_proposed",
            "workspace_accepted",
            "client",
        )
    }
    conn.execute(
        f"INSERT INTO requests ({', '.join(old)}) VALUES ({', '.join('?' * len(old))})",
        list(old.values()),
    )
    conn.commit()
    conn.close()
    reader = open_readonly(path)
    assert reader.execute(
        "SELECT engine, server_proposed, context, client FROM requests"
    ).fetchall() == [("local", 0, "", "")]
    from codespec.stats.report import query

    report = query(reader, "all", None, "language")
    assert report["total"]["requests"] == 1 and report["total"]["server"]["proposed"] == 0
    assert report["total"]["workspace"]["proposed"] == 0


def a_store_with_one_bad_row(tmp_path: Path, column: str, value: str) -> Path:
    """A store of two rows, the second's ``column`` set to the SQL ``value`` by hand."""
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("good", "python"))
    store.put_request(row("bad", "python"))
    store.close()
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE requests SET {column} = {value} WHERE id = 'bad'")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("column", ["first_ms", "total_ms", "decode_s", "tokens", "t"])
def test_a_row_with_text_in_a_number_column_breaks_no_report(tmp_path, column):
    """SQLite keeps whatever a row was given: one row with text where a number belongs is read
    as missing, and every form of the report still works (terminal, JSON, HTML, by kind)."""
    path = a_store_with_one_bad_row(tmp_path, column, "'not a number'")
    for args in (
        [],
        ["--json"],
        ["--by", "kind"],
        ["--by", "day"],
        ["--html", str(tmp_path / "r.html")],
    ):
        result = stats_cli("--db", str(path), *args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
    report = json.loads(stats_cli("--db", str(path), "--json").stdout)
    assert report["total"]["requests"] >= 1


@pytest.mark.parametrize("when", ["1e300", "-1e300", "9e18", "-1"])
def test_a_time_no_calendar_names_breaks_no_report(tmp_path, when):
    """A number in the time column that no day can name (SQLite's strftime gives NULL, Python's
    localtime raises) is the day "unknown" in every form of the report, SQL and rows alike."""
    path = a_store_with_one_bad_row(tmp_path, "t", when)
    for args in (["--by", "day"], ["--by", "day", "--html", str(tmp_path / "r.html")]):
        result = stats_cli("--db", str(path), *args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
    report = json.loads(stats_cli("--db", str(path), "--json", "--by", "day").stdout)
    keys = [group["key"] for group in report["groups"]]
    assert "unknown" in keys and len(keys) == 2, keys
    reader = sqlite3.connect(path)
    rows = fetch(reader)
    assert sorted(g["key"] for g in build(rows, "day")["groups"]) == sorted(keys)


def test_raw_escapes_in_a_language_id_do_not_reach_the_terminal(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    store.put_request(row("a", "py\x1b[2Jthon\x07"))
    store.close()
    result = stats_cli("--db", str(path))
    assert result.returncode == 0 and "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "py?[2Jthon?" in result.stdout  # (shown, made harmless)
