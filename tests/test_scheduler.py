"""The worker's scheduling rules (``server/scheduler.py``), on a clock the test moves: no model,
no threads, no sleeps. What the rules decide is checked here; that the worker acts on them with a
real engine is ``test_worker.py`` and the LSP tests."""

from codespec.completion import CompletionOptions
from codespec.nextedit.history import EditHistory
from codespec.server.kinds import CompletionJob, Job, NextEditJob, WarmJob
from codespec.server.places import NextEditAsk
from codespec.server.scheduler import JOB_SHARE_S, MAX_QUEUED, Scheduler
from codespec.stats.record import Outcome, Timing
from codespec.stops import Cursor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scheduler(**kwargs) -> tuple[Scheduler, Clock]:
    clock = Clock()
    return Scheduler(clock=clock, **kwargs), clock


def job(
    clock: Clock, session: int = 1, uri: str = "file:///a.py", line: int = 0, edit: bool = False
) -> Job:
    """A completion (``edit``: a next edit) asked now."""
    cursor = Cursor("x\n" * line, "", "python")
    timing = Timing(arrived=clock())
    if edit:
        ask = NextEditAsk("x\n", 0, EditHistory.opened("x\n"))
        return NextEditJob(session, uri, 1, cursor, CompletionOptions(), timing=timing, ask=ask)
    return CompletionJob(session, uri, 1, cursor, CompletionOptions(), timing=timing)


def warm(session: int = 1, uri: str = "file:///a.py") -> WarmJob:
    return WarmJob(session, uri, 1, Cursor("", "", "python"), CompletionOptions())


def test_the_newest_request_of_a_document_supersedes_the_older_one():
    s, clock = scheduler()
    old, other_doc = job(clock), job(clock, uri="file:///b.py")
    s.submit(old)
    s.submit(other_doc)
    assert not old.signal.cancelled  # (positive control: nothing newer for it yet)
    new = job(clock)
    s.submit(new)
    assert old.superseded and old.signal.cancelled
    assert not other_doc.signal.cancelled and not new.signal.cancelled
    assert s.unanswered[(1, "file:///a.py")] == [new]


def test_sessions_take_turns():
    s, clock = scheduler()
    a1, a2 = job(clock, 1, "file:///a1.py"), job(clock, 1, "file:///a2.py")
    b1 = job(clock, 2, "file:///b1.py")
    for j in (a1, a2, b1):
        s.submit(j)
    order = []
    while (picked := s.next()[0]) is not None:
        order.append(picked)
        s.finished(picked)
    assert order == [a1, b1, a2]  # not a1, a2 first: session 2 waits its turn, not the queue


def test_past_the_bound_the_oldest_waiting_request_is_dropped():
    s, clock = scheduler()
    jobs = []
    for i in range(MAX_QUEUED):
        clock.now += 1
        jobs.append(job(clock, session=i % 3, uri=f"file:///{i}.py"))
        assert s.submit(jobs[-1]) == []  # (up to the bound nothing is dropped)
    clock.now += 1
    dropped = s.submit(job(clock, session=5, uri="file:///new.py"))
    assert dropped == [(jobs[0], Outcome.DROPPED)]
    assert s.waiting() == MAX_QUEUED


def test_a_request_waiting_past_the_deadline_expires_but_not_while_the_model_loads():
    s, clock = scheduler(queue_deadline_s=30.0)
    late = job(clock)
    s.submit(late)
    clock.now += 100  # the model is still loading: nothing is overdue
    assert not s.overdue(late)
    s.model_ready()
    clock.now += 29
    assert not s.overdue(late)  # the wait counts from when the model was ready
    clock.now += 2
    fresh = job(clock, uri="file:///b.py")
    s.submit(fresh)
    picked, expired = s.next()
    assert expired == [(late, Outcome.EXPIRED)] and picked is fresh


def test_a_running_request_has_a_share_only_while_another_session_waits():
    s, clock = scheduler()
    hog = job(clock, session=1)
    s.submit(hog)
    assert s.next()[0] is hog
    hog.timing.started = clock()
    assert s.share_left() is None  # nobody else waits: it runs to its end
    clock.now += 1.5
    s.submit(job(clock, session=2))
    assert s.share_left() == JOB_SHARE_S - 1.5  # counted from its start, not from the wait
    clock.now += JOB_SHARE_S
    assert s.share_left() == 0.0
    s.submit(job(clock, session=1, uri="file:///other.py"))
    assert s.others_wait(2) and s.others_wait(1)


def test_warm_ups_run_only_when_no_request_waits_and_a_request_stops_them():
    s, clock = scheduler()
    older, newer = warm(uri="file:///a.py"), warm(uri="file:///b.py")
    s.warm(older)
    s.warm(newer)
    request = job(clock, uri="file:///c.py")
    s.submit(request)
    assert s.next()[0] is request  # a waiting request comes before any warm-up
    s.finished(request)
    assert s.next()[0] is newer  # then the newest place
    assert not newer.signal.cancelled
    s.submit(job(clock, uri="file:///d.py"))
    assert newer.signal.cancelled  # a request outranks the running warm-up


def test_a_newer_warm_up_of_a_document_replaces_and_stops_the_older():
    s, _ = scheduler()
    first = warm()
    s.warm(first)
    assert s.next()[0] is first
    second = warm()
    s.warm(second)
    assert first.signal.cancelled and s.warm_jobs == {(1, "file:///a.py"): second}


def test_a_session_that_ends_takes_its_work_with_it():
    s, clock = scheduler()
    running, queued = job(clock, 1, "file:///a.py"), job(clock, 1, "file:///b.py")
    kept = job(clock, 2, "file:///c.py")
    for j in (running, queued, kept):
        s.submit(j)
    s.warm(warm(1, "file:///w.py"))
    assert s.next()[0] is running
    s.drop_session(1)
    assert running.signal.cancelled and queued.signal.cancelled
    assert not kept.signal.cancelled  # (another session's work stays)
    assert s.next()[0] is kept and s.warm_jobs == {}


def test_a_finished_request_is_no_longer_its_documents_newest():
    s, clock = scheduler()
    first = job(clock)
    s.submit(first)
    s.finished(s.next()[0])
    second = job(clock)
    s.submit(second)
    assert not first.superseded  # it had finished: nothing to supersede
    assert s.running is None and s.next()[0] is second


def test_a_next_edit_leaves_a_completion_be_and_a_completion_stops_a_next_edit():
    """A next edit asked while the document's completion waits (a plugin asks for one once
    typing pauses, the completion's prefill may still run) does not cancel it: the completion is
    what the user waits to see. A completion (a keystroke) cancels a next edit; a next edit the
    one before it."""
    s, clock = scheduler()
    completion = job(clock)
    s.submit(completion)
    first_edit = job(clock, edit=True)
    s.submit(first_edit)
    assert not completion.signal.cancelled and not completion.superseded
    second_edit = job(clock, edit=True)
    s.submit(second_edit)
    assert first_edit.superseded and not completion.superseded
    keystroke = job(clock)
    s.submit(keystroke)
    assert completion.superseded and second_edit.superseded and second_edit.signal.cancelled
    assert not keystroke.signal.cancelled
