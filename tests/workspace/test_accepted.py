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


# -- planted files: every name the store uses, under every kind of thing an attacker can put
# there (issue 55: a link at the temporary name destroyed its target; a FIFO hung the daemon)


def planted(kind: str, at, victim):
    if kind == "symlink":
        os.symlink(victim, at)
    elif kind == "fifo":
        os.mkfifo(at)
    elif kind == "directory":
        at.mkdir()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_thing_planted_at_the_file_is_left_alone_and_nothing_hangs(tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = tmp_path / FILE_NAME
    planted(kind, path, victim)
    accepted = run_briefly(lambda: book(path))  # (a FIFO opened for reading would block)
    accepted.learn("x = f(", "kept in memory)")
    assert continuation(accepted, "y = f(") == "kept in memory)"  # served from memory
    assert victim.read_text() == "precious\n"
    assert (path.is_symlink(), path.is_fifo(), path.is_dir()) == (
        kind == "symlink",
        kind == "fifo",
        kind == "directory",
    )
    with pytest.raises(ValueError, match="left alone"):
        run_briefly(lambda: store.forget(path))
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_thing_planted_at_the_temporary_name_is_replaced_not_followed(tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = tmp_path / FILE_NAME
    planted(kind, tmp_path / (FILE_NAME + ".tmp"), victim)
    accepted = book(path)
    accepted.learn("x = f(", "first)")  # a new file: written through the temporary name
    assert victim.read_text() == "precious\n"
    assert [("".join(map(chr, r))).endswith("first)") for r in read_records(path)] == [True]


def test_the_control_a_plain_file_is_used(tmp_path):
    """(The control of the two above: the same steps on the store's own file work.)"""
    path = tmp_path / FILE_NAME
    book(path).learn("x = f(", "first)")
    accepted = book(path)
    assert continuation(accepted, "y = f(") == "first)"
    assert store.forget(path) and not path.exists()


def run_briefly(action, seconds: float = 5.0):
    """``action()`` on a thread; fail (instead of hanging the suite) if it blocks."""
    import threading

    out: list = []
    errors: list = []

    def run() -> None:
        try:
            out.append(action())
        except BaseException as exc:  # (re-raised on the test's thread)
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "it blocked"
    if errors:
        raise errors[0]
    return out[0]


def test_a_short_append_is_cut_back_and_later_records_stay_aligned(tmp_path):
    """A file-size limit lets an append through in part (as a full disk does): the torn bytes
    are cut off, the next write rewrites the file, and a restart reads every record."""
    path = tmp_path / FILE_NAME
    script = f"""
import os, resource
from pathlib import Path
from codespec.workspace.accepted import AcceptedCompletions
chars = lambda text: [ord(c) for c in text]
path = Path({str(path)!r})
book = AcceptedCompletions(path, tokenizer=lambda: chars)
book.learn("a = f(", "first)")
limit = os.path.getsize(path) + 10  # room for 2 ids of the next record, not all of it
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
book.learn("b = g(", "second, which does not fit)")
assert os.path.getsize(path) <= limit
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
book.learn("c = h(", "third)")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "not saved" in done.stderr  # the short append was said, once
    texts = ["".join(map(chr, r)) for r in read_records(path)]
    assert [
        t.endswith(end) for t, end in zip(texts, ["first)", "fit)", "third)"], strict=True)
    ] == [True] * 3
    assert (os.path.getsize(path) - len(MAGIC)) % 4 == 0


def test_a_huge_file_is_read_from_its_end_within_the_bound(tmp_path):
    path = tmp_path / FILE_NAME
    records = [np.arange(1, 41, dtype=np.int32) + i for i in range(5000)]  # 205,000 ids
    path.write_bytes(MAGIC + store.encode(records))
    kept = read_records(path, max_tokens=1000)
    assert 0 < sum(map(len, kept)) <= 2 * 1000 + 1
    assert [list(r) for r in kept[-3:]] == [list(r) for r in records[-3:]]  # the newest, whole
    assert all(len(r) == 40 for r in kept)  # no record cut in two
