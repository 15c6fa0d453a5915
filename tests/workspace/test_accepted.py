"""The accepted completions' store: what is kept, what survives a restart or a torn write,
what is never touched, the bound, and ``codespec forget``."""

import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from codespec.workspace import accepted as store
from codespec.workspace.accepted import (
    FILE_NAME,
    LEAD_TOKENS,
    MAGIC,
    AcceptedCompletions,
    read_records,
)


def chars(text: str) -> list[int]:
    """A tokenizer a test can read: one id per character."""
    return [ord(c) for c in text]


def book(path, max_tokens: int = store.MAX_TOKENS) -> AcceptedCompletions:
    return AcceptedCompletions(path, tokenizer=lambda: chars, max_tokens=max_tokens)


def continuation(accepted: AcceptedCompletions, context: str, span: int = 40) -> str:
    found = accepted.corpus().lookup(chars(context), span=span, branches=1)
    return "".join(map(chr, found[0].tokens)) if found else ""


def test_an_accepted_completion_is_drafted_after_a_restart(tmp_path):
    path = tmp_path / FILE_NAME
    first = book(path)
    first.learn("x = 1\nresult = compute(", "alpha, beta)\n")
    assert continuation(first, "y = compute(") == "alpha, beta)\n"

    again = book(path)  # a new daemon: read from the file
    assert continuation(again, "z = compute(") == "alpha, beta)\n"
    # only the lead before the cursor is kept, not the whole document
    [record] = read_records(path)
    assert len(record) == LEAD_TOKENS + len("alpha, beta)\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_nothing_is_learned_before_the_model_is_loaded(tmp_path):
    waiting = AcceptedCompletions(tmp_path / FILE_NAME, tokenizer=lambda: None)
    waiting.learn("before ", "taken")
    assert not (tmp_path / FILE_NAME).exists() and waiting.corpus().total == 0


def test_a_torn_last_record_is_dropped_and_the_rest_kept(tmp_path):
    path = tmp_path / FILE_NAME
    accepted = book(path)
    accepted.learn("a = f(", "one, two)")
    accepted.learn("b = g(", "three, four)")
    with open(path, "ab") as file:  # a crash halfway through a third record
        file.write(np.array(chars("five"), dtype="<i4").tobytes()[:-2])
    records = read_records(path)
    assert len(records) == 2
    assert all(
        "".join(map(chr, r)).endswith(t)
        for r, t in zip(records, ["one, two)", "three, four)"], strict=True)
    )
    reopened = book(path)
    assert continuation(reopened, "q = g(") == "three, four)"
    reopened.learn("c = h(", "six)")  # appended after the torn bytes were dropped by a rewrite
    assert [len(r) for r in read_records(path)][:2] == [len(r) for r in records]
    assert continuation(book(path), "w = h(") == "six)"


def test_someone_elses_file_is_never_written(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_bytes(b"not ours\n")
    accepted = book(path)
    accepted.learn("k = v(", "kept in memory)")
    assert path.read_bytes() == b"not ours\n"
    assert continuation(accepted, "m = v(") == "kept in memory)"
    with pytest.raises(ValueError):
        store.forget(path)
    assert path.exists()


def test_past_the_bound_the_older_half_goes_and_the_file_is_rewritten(tmp_path):
    path = tmp_path / FILE_NAME
    accepted = book(path, max_tokens=400)
    for n in range(20):
        accepted.learn(f"call{n:02d}(", f"argument_{n:02d}, more_{n:02d})")
    assert accepted.corpus().total <= 400
    assert continuation(accepted, "call19(") == "argument_19, more_19)"
    assert continuation(accepted, "call00(") == ""  # the oldest went
    on_disk = read_records(path)
    assert sum(map(len, on_disk)) <= 400
    assert "".join(map(chr, on_disk[-1])).endswith("argument_19, more_19)")
    assert not path.with_name(FILE_NAME + ".tmp").exists()


def test_a_running_daemon_forgets_when_the_file_is_deleted(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "CHECK_S", 0.0)
    path = tmp_path / FILE_NAME
    accepted = book(path)
    accepted.learn("p = r(", "private detail)")
    assert continuation(accepted, "s = r(") == "private detail)"
    assert store.forget(path) and not store.forget(path)
    time.sleep(0.01)
    assert continuation(accepted, "s = r(") == ""
    accepted.learn("t = u(", "after forgetting)")  # a fresh file, without the forgotten one
    assert [("".join(map(chr, r))).endswith("after forgetting)") for r in read_records(path)] == [
        True
    ]


def test_codespec_forget_deletes_only_its_file(tmp_path):
    env = {**os.environ, "CODESPEC_STATE_DIR": str(tmp_path)}
    path = tmp_path / FILE_NAME
    path.write_bytes(MAGIC)

    def forget(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "codespec", "forget", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

    done = forget()
    assert done.returncode == 0 and "forgot" in done.stdout and not path.exists()
    again = forget()
    assert again.returncode == 0 and "nothing to forget" in again.stdout
    path.write_bytes(b"a file of the user's\n")
    refused = forget("--db", str(tmp_path / "stats.sqlite3"))
    assert refused.returncode == 2 and path.exists()
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
