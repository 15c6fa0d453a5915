"""What the engine worker runs next: the scheduling rules, with no model and no threads.

The worker (``worker.py``) asks this under its lock and runs what it is told. The rules:

* per (session, document) the newest request wins: submitting a job cancels the previous one
  for the same document (queued: it never starts; running: a decoding pass stops between two
  layers, a prefill chunk at its end when the new request is on the same line, whose prompt
  shares that work, and between two layers otherwise). Which earlier requests a new one
  supersedes is its kind's rule (``kinds.Job.supersedes``): a next edit only the previous next
  edit, a completion both;
* sessions are served round-robin, so one busy editor cannot starve another, and while another
  session's request waits, a running request gets ``JOB_SHARE_S`` from its start, then stops at
  its next pass and is answered with what it has (``Job.yielded``);
* the queue is bounded: past ``MAX_QUEUED`` waiting requests the oldest is answered empty, and
  a request still waiting after ``QUEUE_DEADLINE_S`` is answered empty instead of run (its
  editor has moved on; a late ghost text is worse than none). The wait counts from when the
  model was ready: a request made while the model loads is served once it is;
* when no request waits, the newest warm-up runs (one per document), and any request
  outranks a running warm-up.

Time comes from ``clock`` (``time.perf_counter`` by default), so the rules are tested with a
clock the test moves.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..stats.record import Outcome
from .kinds import Job, WarmJob

MAX_QUEUED = 16  # requests waiting at once, all sessions together
QUEUE_DEADLINE_S = 30.0  # the longest a request waits behind others before it is dropped
# The most of the worker one request takes while another session's request waits: then it is
# answered with what it has. A session's long completion (maxTokens 1024, no stop rules, a
# huge prompt) cannot hold other editors past this plus one pass.
JOB_SHARE_S = 4.0

Key = tuple[int, str]  # (session, document uri)


@dataclass
class Scheduler:
    """The queues, the warm-ups waiting, and what is running."""

    queue_deadline_s: float = QUEUE_DEADLINE_S
    job_share_s: float = JOB_SHARE_S
    clock: Callable[[], float] = time.perf_counter
    queues: dict[int, collections.deque[Job]] = field(default_factory=dict)
    order: collections.deque[int] = field(default_factory=collections.deque)  # round-robin
    # each document's requests not answered yet, oldest first
    unanswered: dict[Key, list[Job]] = field(default_factory=dict)
    warm_jobs: dict[Key, WarmJob] = field(default_factory=dict)  # newest last
    running: Job | WarmJob | None = None
    ready_since: float | None = None  # when the model was first ready (None: it loads)

    # -- what comes in ------------------------------------------------------------------------

    def submit(self, job: Job) -> list[tuple[Job, Outcome]]:
        """Queue ``job``: the document's previous request is superseded, a running warm-up
        stopped. Returns the requests to answer empty now (the oldest past ``MAX_QUEUED``)."""
        earlier = self.unanswered.get((job.session, job.uri), [])
        for previous in earlier:
            if job.supersedes(previous):
                previous.superseded = True
                previous.stop(wanted_by=job)
        kept = [previous for previous in earlier if not previous.superseded]
        self.unanswered[(job.session, job.uri)] = [*kept, job]
        if isinstance(self.running, WarmJob):
            self.running.stop(wanted_by=job)  # a request outranks any warm-up
        self.queues.setdefault(job.session, collections.deque()).append(job)
        dropped = []
        while self.waiting() > MAX_QUEUED:
            oldest = min((q[0] for q in self.queues.values() if q), key=lambda j: j.timing.arrived)
            self.queues[oldest.session].popleft()
            dropped.append((oldest, Outcome.DROPPED))
        if job.session not in self.order:
            self.order.append(job.session)
        return dropped

    def warm(self, job: WarmJob) -> None:
        """Queue a warm-up; it replaces an older one for the same document (and stops it if it
        runs: that place is stale now)."""
        previous = self.warm_jobs.pop((job.session, job.uri), None)
        if previous is not None:
            previous.stop()
        running = self.running
        if isinstance(running, WarmJob) and (running.session, running.uri) == (
            job.session,
            job.uri,
        ):
            running.stop(wanted_by=job)
        self.warm_jobs[(job.session, job.uri)] = job

    def forget_document(self, session: int, uri: str) -> None:
        """A document closed: its warm-ups go."""
        job = self.warm_jobs.pop((session, uri), None)
        if job is not None:
            job.stop()
        running = self.running
        if isinstance(running, WarmJob) and (running.session, running.uri) == (session, uri):
            running.stop()

    def drop_session(self, session: int) -> None:
        """A session ended: cancel its work and forget it."""
        for key in [k for k in self.warm_jobs if k[0] == session]:
            self.warm_jobs.pop(key).stop()
        for job in self.queues.pop(session, ()):
            job.signal.cancel(keep_chunk=True)  # queued: it never starts
        if self.running is not None and self.running.session == session:
            self.running.stop()
        self.unanswered = {k: v for k, v in self.unanswered.items() if k[0] != session}
        if session in self.order:
            self.order.remove(session)

    def take_all(self) -> list[Job]:
        """Every waiting request, taken out of the queues (warm-ups are forgotten)."""
        for job in self.warm_jobs.values():
            job.stop()
        self.warm_jobs.clear()
        waiting = [job for queue in self.queues.values() for job in queue]
        for queue in self.queues.values():
            queue.clear()
        return waiting

    def model_ready(self) -> None:
        """The model is loaded: queue deadlines count from now on."""
        if self.ready_since is None:
            self.ready_since = self.clock()

    # -- what runs ----------------------------------------------------------------------------

    def next(self) -> tuple[Job | WarmJob | None, list[tuple[Job, Outcome]]]:
        """The job to run now (sessions in turn; a warm-up only when no request waits; None:
        nothing to do), and the requests to answer empty because they waited too long."""
        expired: list[tuple[Job, Outcome]] = []
        for _ in range(len(self.order)):
            session = self.order[0]
            self.order.rotate(-1)
            queue = self.queues.get(session)
            while queue and self.overdue(queue[0]):
                expired.append((queue.popleft(), Outcome.EXPIRED))
            if queue:
                self.running = queue.popleft()
                return self.running, expired
        if self.warm_jobs:  # nothing waits: warm the newest place
            self.running = self.warm_jobs.pop(next(reversed(self.warm_jobs)))
            return self.running, expired
        return None, expired

    def finished(self, job: Job | WarmJob) -> None:
        """``job`` ran (or gave up): nothing runs, and a request is no longer its document's
        newest."""
        self.running = None
        if isinstance(job, Job):
            self.answered(job)

    def answered(self, job: Job) -> None:
        """``job`` has its answer (run, or answered empty): a later request does not supersede
        it."""
        key = (job.session, job.uri)
        left = [other for other in self.unanswered.get(key, []) if other is not job]
        if left:
            self.unanswered[key] = left
        else:
            self.unanswered.pop(key, None)

    def share_left(self) -> float | None:
        """Seconds the running request may still take while another session's request waits
        (then it yields: ``Job.yielded``); None when it need not yield (a warm-up, or nobody
        else waits)."""
        running = self.running
        if not isinstance(running, Job) or not self.others_wait(running.session):
            return None
        started = running.timing.started or self.clock()
        return max(0.0, self.job_share_s - (self.clock() - started))

    def others_wait(self, session: int) -> bool:
        return any(q for s, q in self.queues.items() if s != session)

    def overdue(self, job: Job) -> bool:
        """Has ``job`` waited past the deadline since it came or the model was ready, whichever
        is later? (While the model loads, nothing is overdue.)"""
        if self.ready_since is None:
            return False
        waited = self.clock() - max(job.timing.arrived, self.ready_since)
        return waited > self.queue_deadline_s

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())
