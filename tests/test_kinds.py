"""Job kinds carry their own work (``server/kinds.py``): the worker asks each job which kind of
stats row it leaves and what it supersedes, and never infers a kind from empty fields."""

from __future__ import annotations

import pytest

from codespec.completion import CompletionOptions, CompletionResult
from codespec.nextedit.history import EditHistory
from codespec.server.kinds import CompletionJob, Job, NextEditJob, RawPromptJob
from codespec.server.places import NextEditAsk
from codespec.server.worker import ModelUnavailable, Worker
from codespec.stops import Cursor, Mode

CURSOR = Cursor("def f():\n    ", "\n", "python")


def completion(mode: Mode | None = None) -> CompletionJob:
    return CompletionJob(1, "file:///a.py", 1, CURSOR, CompletionOptions(mode=mode))


def raw() -> RawPromptJob:
    return RawPromptJob(1, "http:/completion", 0, CURSOR, CompletionOptions(), prompt="x = ")


def next_edit() -> NextEditJob:
    ask = NextEditAsk("x\n", 0, EditHistory.opened("x\n"))
    return NextEditJob(1, "file:///a.py", 1, CURSOR, CompletionOptions(), ask=ask)


def test_each_kind_names_its_stats_row():
    assert completion(Mode.LINE).stats_kind(None) == "single"
    assert completion(Mode.LINE).stats_kind(CompletionResult("x", Mode.BLOCK, None)) == "multi"
    assert completion().stats_kind(None) == "none"
    assert raw().stats_kind(None) == "raw"
    assert next_edit().stats_kind(None) == "next-edit"


def test_what_a_request_supersedes_is_its_kinds_rule():
    assert completion().supersedes(next_edit()) and completion().supersedes(completion())
    assert next_edit().supersedes(next_edit()) and not next_edit().supersedes(completion())
    elsewhere = CompletionJob(1, "file:///b.py", 1, CURSOR, CompletionOptions())
    assert not completion().supersedes(elsewhere)


def test_no_follow_up_where_no_model_ran():
    assert completion().follow_up(CompletionResult("", Mode.NONE, None)) is None


@pytest.mark.parametrize(("make", "kind"), [(raw, "raw"), (next_edit, "next-edit")])
def test_the_worker_records_the_kind_the_job_names(make, kind):
    """Even a request that fails before any model ran leaves a row of its own kind."""

    def no_model():
        raise ModelUnavailable("no model here")

    rows: list[dict] = []
    worker = Worker(no_model, record=rows.append)
    try:
        job: Job = make()
        with pytest.raises(ModelUnavailable):
            worker.submit(job).result(timeout=10)
    finally:
        worker.stop()
        worker.thread.join(timeout=10)
    assert [(row["kind"], row["outcome"]) for row in rows] == [(kind, "failed")]
