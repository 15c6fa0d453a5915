"""The engine worker: one thread owns the model and runs what the scheduler picks.

It keeps the lifecycle only; what a job does is its kind's (``kinds.py``).

What runs next (newest request per document, sessions in turn, bounded queue, deadlines, a
request's share of the worker while others wait, warm-ups when nobody waits) is
``scheduler.py``'s to decide; this module runs it:

* a job whose document has changed since it was submitted is answered empty without running
  the model (its result would be for text that no longer exists);
* a failure inside the model call fails that job only; the worker goes on with the next;
* a request whose share of the worker runs out while another session waits stops at its next
  pass and is answered with what it has;
* the heap is trimmed (``memory.py``) after a quiet second, not after each request;
* every request, however it ends, leaves one row for the acceptance stats (``record``, see
  ``codespec/stats``): a queue append, never a wait on the disk;
* a warm-up prefills the prompt of the place a request is likely to come from next, in prefill
  chunks of ``engine.calibration.PREFILL_CHUNK_S`` (larger chunks prefill faster:
  ``docs/benchmarks.md``, "Prefill"), then looks ahead at the next keystrokes there. A request
  arriving meanwhile stops it (``engine/stop.py``): at the end of its chunk when the request is
  at the warmed place (that chunk is the request's own prefill, so finishing it costs the
  request nothing), and between two decoder layers of the chunk otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..completion import CompletionResult
from ..memory import return_freed_memory
from ..stats.record import Outcome, request_row
from .counters import WorkerStats
from .kinds import Job, Warmed, WarmJob
from .scheduler import JOB_SHARE_S, QUEUE_DEADLINE_S, Scheduler

if TYPE_CHECKING:
    from ..runtime import LoadedPair  # (the model's stack loads with the model, not before)
# Quiet seconds after a request before the heap is trimmed: a trim takes a while, and a trim
# after every request made the next keystroke's request wait for it.
TRIM_AFTER_IDLE_S = 1.0
log = logging.getLogger("codespec.worker")


class ModelUnavailable(Exception):
    """The model could not be loaded; the message is meant for the user."""


class Worker:
    """Owns the engine; runs one job at a time."""

    def __init__(
        self,
        get_pair: Callable[[], LoadedPair],
        record: Callable[[dict], None] | None = None,
        queue_deadline_s: float = QUEUE_DEADLINE_S,
        job_share_s: float = JOB_SHARE_S,
    ) -> None:
        self.get_pair = get_pair  # blocks until the model is loaded; raises if loading failed
        self.record = record  # takes each request's stats row (see codespec/stats/record.py)
        self.scheduler = Scheduler(queue_deadline_s, job_share_s)
        self.cond = threading.Condition()  # guards the scheduler
        self.stats = WorkerStats()
        self.trim_due = False  # a request ran since the heap was last trimmed
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="codespec-engine", daemon=True)
        self.thread.start()

    @property
    def running(self) -> Job | WarmJob | None:
        return self.scheduler.running

    # -- called from the LSP side -------------------------------------------------------------

    def serving_request(self) -> bool:
        """Whether a request (not a warm-up) is running now: background work waits meanwhile."""
        return isinstance(self.running, Job)

    def submit(self, job: Job) -> Future:
        with self.cond:
            for dropped, outcome in self.scheduler.submit(job):
                self.stats.dropped += 1
                self._answer_empty(dropped, outcome)
            self._share_due()
            self.cond.notify()
        return job.future

    def warm(self, job: WarmJob) -> None:
        """Queue a warm-up; it replaces an older one for the same document."""
        with self.cond:
            self.scheduler.warm(job)
            self.cond.notify()

    def forget_document(self, session: int, uri: str) -> None:
        with self.cond:
            self.scheduler.forget_document(session, uri)

    def drop_session(self, session: int) -> None:
        """A session ended: cancel its work and forget it."""
        with self.cond:
            self.scheduler.drop_session(session)

    def cancel_everything(self) -> None:
        """Answer every waiting request empty and stop the running work (a model switch)."""
        with self.cond:
            for job in self.scheduler.take_all():
                self._answer_empty(job, Outcome.CANCELLED)
            if self.running is not None:
                self.running.stop()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    # -- the worker thread --------------------------------------------------------------------

    def _answer_empty(self, job: Job, outcome: Outcome) -> None:
        """Answer a request that will not run (under ``cond``)."""
        job.signal.cancel(keep_chunk=True)
        self.scheduler.answered(job)
        if job.future.set_running_or_notify_cancel():
            job.future.set_result(None)
        self._record(job, outcome)

    def _record(self, job: Job, outcome: Outcome, result: CompletionResult | None = None) -> None:
        """Leave the request's stats row; a recording problem never reaches the request."""
        if self.record is None:
            return
        if outcome == Outcome.CANCELLED and job.superseded:
            outcome = Outcome.SUPERSEDED
        job.timing.done = job.timing.done or time.perf_counter()
        try:
            self.record(
                request_row(
                    job.id,
                    job.language,
                    job.stats_kind(result),
                    "invoked" if job.options.invoked else "auto",
                    outcome,
                    job.timing,
                    result.text if result is not None else "",
                    result.stats if result is not None else None,
                    context=job.context,
                    client=job.client,
                )
            )
        except Exception as exc:
            log.debug("stats row not recorded: %s", exc)

    def _next(self) -> Job | WarmJob | None:
        with self.cond:
            while not self.stopping:
                job, expired = self.scheduler.next()
                for late, outcome in expired:
                    self.stats.expired += 1
                    self._answer_empty(late, outcome)
                if job is not None:
                    self._share_due()
                    return job
                if not self.trim_due:
                    self.cond.wait()
                elif not self.cond.wait(TRIM_AFTER_IDLE_S):  # a quiet spell: trim now
                    self.trim_due = False
                    self._trim_unlocked()
            return None

    def _share_due(self) -> None:
        """(Under the lock.) Once another session's request waits, the running request's share
        of the worker is timed (``Scheduler.share_left``); when it runs out, the request stops
        at its next prefill chunk end or target pass and is answered with what it has."""
        running = self.running
        if not isinstance(running, Job) or running.share_timer is not None:
            return
        left = self.scheduler.share_left()
        if left is None:
            return
        running.share_timer = threading.Timer(left, self._yield, args=(running,))
        running.share_timer.daemon = True
        running.share_timer.start()

    def _yield(self, job: Job) -> None:
        with self.cond:
            if self.running is job and self.scheduler.others_wait(job.session):
                job.yielded = True
                job.signal.cancel(keep_chunk=True)  # (the chunk stays cached for its place)

    def _pair(self) -> LoadedPair:
        pair = self.get_pair()
        with self.cond:
            self.scheduler.model_ready()
        return pair

    def _trim_unlocked(self) -> None:
        """Give back the heap pages that requests' temporaries left free (``memory.py``), with
        the lock released: a request arriving meanwhile waits for the trim only."""
        self.cond.release()
        try:
            return_freed_memory()
        finally:
            self.cond.acquire()

    def _run(self) -> None:
        while (job := self._next()) is not None:
            if isinstance(job, WarmJob):
                try:
                    self._warm(job)
                except Exception as exc:  # a warm-up is never worth a failure
                    log.debug("warm-up failed: %s", exc)
                finally:
                    with self.cond:
                        self.scheduler.finished(job)
                continue
            try:
                self._serve(job)
            finally:
                if job.share_timer is not None:
                    job.share_timer.cancel()
                with self.cond:
                    self.scheduler.finished(job)
                    self.trim_due = True

    def _serve(self, job: Job) -> None:
        job.timing.started = time.perf_counter()
        if not job.future.set_running_or_notify_cancel():  # nobody waits for an answer
            self._record(job, Outcome.CANCELLED)
            return
        outcome, result, error = self._outcome(job)
        self._finish(job, outcome, result, error)
        if outcome.ran and result is not None and (follow_up := job.follow_up(result)):
            self.warm(follow_up)

    def _outcome(self, job: Job) -> tuple[Outcome, CompletionResult | None, Exception | None]:
        """Run ``job`` unless it is cancelled or stale: (outcome, its result, its failure)."""
        if job.signal.cancelled:
            return Outcome.CANCELLED, None, None
        if job.stale():
            return Outcome.STALE, None, None
        try:
            pair = self._pair()
            engine = pair.engine
            job.signal.probe = engine.passes_run  # (cancel checks count the passes)
            result = job.run(pair, self._on_text(job))
        except Exception as exc:  # the model call failed: this job fails, the worker goes on
            return Outcome.FAILED, None, exc
        answered = Outcome.SERVED if result.text else Outcome.EMPTY
        if job.yielded and not job.superseded:  # its share ran out: what it has is the answer
            self.stats.yielded += 1
            if result.stats is not None:
                result.stats.stop_reason = "yielded"
            return answered, result, None
        if job.signal.cancelled:
            self.stats.last_cancel = {
                "passes_at_cancel": job.signal.passes_at_cancel,
                "passes_final": engine.passes_run(),
            }
            return Outcome.CANCELLED, result, None
        return answered, result, None

    def _finish(
        self, job: Job, outcome: Outcome, result: CompletionResult | None, error: Exception | None
    ) -> None:
        """The one exit for a job that started: count it, leave its stats row, answer it (an
        empty answer for anything but a completion)."""
        stats = result.stats if result is not None else None
        if stats is not None:
            self.stats.ahead_hits += stats.ahead
            self.stats.tokens += stats.tokens
            self.stats.passes += stats.target_passes + 1
            self.stats.last_prompt = {
                "prefill_tokens": stats.prefill_tokens,
                "cached_tokens": stats.cached_tokens,
            }
        answered = outcome.ran
        if answered:
            self.stats.served += 1
            job.timing.done = time.perf_counter()
            self.stats.latencies_s.append(job.timing.done - job.timing.arrived)
        elif outcome == Outcome.CANCELLED:
            self.stats.cancelled += 1
        elif outcome == Outcome.STALE:
            self.stats.stale += 1
        else:
            self.stats.failed += 1
        self._record(job, outcome, result)
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result if answered else None)

    def _warm(self, job: WarmJob) -> None:
        if job.signal.cancelled or job.stale():
            return
        pair = self._pair()
        warming = pair.engine.warming
        if warming is None:
            return  # a remote engine: its server keeps its own prompt cache
        self._count_warm_up(job.run(pair, warming))

    def _count_warm_up(self, warmed: Warmed) -> None:
        self.stats.warmed += 1
        self.stats.warm_tokens += warmed.tokens
        self.stats.warm_preempted += warmed.preempted
        if warmed.ahead_rows is not None:
            self.stats.looked_ahead += warmed.ahead_rows > 0
            self.stats.ahead_rows += warmed.ahead_rows

    def _on_text(self, job: Job) -> Callable[[str], None]:
        def on_text(text: str) -> None:
            if job.timing.first_text is None:
                job.timing.first_text = time.perf_counter()
            if job.on_text is not None and not job.signal.cancelled:
                job.on_text(text)

        return on_text
