"""The engine worker: one thread owns the model; LSP sessions submit jobs to it.

Scheduling rules:

* per (session, document) the newest request wins: submitting a job cancels the previous one
  for the same document (queued: it never starts; running: a decoding pass stops between two
  layers, a prefill chunk at its end when the new request is on the same line, whose prompt
  shares that work, and between two layers otherwise);
* a job whose document has changed since it was submitted is answered empty without running
  the model (its result would be for text that no longer exists);
* sessions are served round-robin, so one busy editor cannot starve another, and while another
  session's request waits, a running request gets ``JOB_SHARE_S`` from its start, then stops at
  its next pass and is answered with what it has (``Job.yielded``);
* the queue is bounded: past ``MAX_QUEUED`` waiting requests the oldest is answered empty, and
  a request still waiting after ``QUEUE_DEADLINE_S`` is answered empty instead of run (its
  editor has moved on; a late ghost text is worse than none). The wait counts from when the
  model was ready: a request made while the model loads is served once it is (the editor
  shows the load; a request whose document changed meanwhile is stale and skipped anyway);
* a failure inside the model call fails that job only; the worker goes on with the next;
* the heap is trimmed (``memory.py``) after a quiet second, not after each request;
* every request, however it ends, leaves one row for the acceptance stats (``record``, see
  ``codespec/stats``): a queue append, never a wait on the disk;
* when no request waits, the worker *warms*: it prefills the prompt of the place a request is
  likely to come from next (where edits settled or the cursor rests), newest first, one per
  document, in prefill chunks of ``engine.calibration.PREFILL_CHUNK_S`` (larger chunks prefill
  faster: ``docs/benchmarks.md``, "Prefill"). A request arriving meanwhile stops the warm-up
  (``engine/stop.py``): at the end of its chunk when the request is at
  the warmed place (that chunk is the request's own prefill, so finishing it costs the request
  nothing), and between two decoder layers of the chunk otherwise (the chunk is dropped; the
  request waits at most one layer's share of it).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ..completion import CompletionResult, complete, prompt_at
from ..lookahead import likely_next_chars, next_key_prompts
from ..memory import return_freed_memory
from ..stats.record import request_row
from ..stops import Mode
from .counters import WorkerStats
from .places import Job, WarmJob

MAX_QUEUED = 16  # requests waiting at once, all sessions together
QUEUE_DEADLINE_S = 30.0  # the longest a request waits behind others before it is dropped
# The most of the worker one request takes while another session's request waits: then it is
# answered with what it has. A session's long completion (maxTokens 1024, no stop rules, a
# huge prompt) cannot hold other editors past this plus one pass.
JOB_SHARE_S = 4.0
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
        get_pair: Callable[[], object],
        pass_delay_s: float = 0.0,
        record: Callable[[dict], None] | None = None,
        queue_deadline_s: float = QUEUE_DEADLINE_S,
        job_share_s: float = JOB_SHARE_S,
    ) -> None:
        self.job_share_s = job_share_s
        self.get_pair = get_pair  # blocks until the model is loaded; raises if loading failed
        self.queue_deadline_s = queue_deadline_s
        self.ready_since: float | None = None  # when get_pair first returned (the model loaded)
        self.record = record  # takes each request's stats row (see codespec/stats/record.py)
        self.pass_delay_s = pass_delay_s  # testing aid: slow each target pass down
        self.queues: dict[int, collections.deque[Job]] = {}
        self.order: collections.deque[int] = collections.deque()  # round-robin of sessions
        self.latest: dict[tuple[int, str], Job] = {}
        self.warm_jobs: dict[tuple[int, str], WarmJob] = {}  # newest last
        self.cond = threading.Condition()
        self.stats = WorkerStats()
        self.running: Job | WarmJob | None = None
        self.trim_due = False  # a request ran since the heap was last trimmed
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="codespec-engine", daemon=True)
        self.thread.start()

    # -- called from the LSP side -------------------------------------------------------------

    def serving_request(self) -> bool:
        """Whether a request (not a warm-up) is running now: background work waits meanwhile."""
        return isinstance(self.running, Job)

    def submit(self, job: Job) -> Future:
        with self.cond:
            previous = self.latest.get((job.session, job.uri))
            if previous is not None:
                previous.superseded = True
                previous.stop(wanted_by=job)
            self.latest[(job.session, job.uri)] = job
            if isinstance(self.running, WarmJob):
                self.running.stop(wanted_by=job)  # a request outranks any warm-up
            self.queues.setdefault(job.session, collections.deque()).append(job)
            while sum(len(q) for q in self.queues.values()) > MAX_QUEUED:
                oldest = min(
                    (q[0] for q in self.queues.values() if q), key=lambda j: j.timing.arrived
                )
                self.queues[oldest.session].popleft()
                self.stats.dropped += 1
                self._answer_empty(oldest, "dropped")
            if job.session not in self.order:
                self.order.append(job.session)
            self._share_due()
            self.cond.notify()
        return job.future

    def warm(self, job: WarmJob) -> None:
        """Queue a warm-up; it replaces an older one for the same document."""
        with self.cond:
            previous = self.warm_jobs.pop((job.session, job.uri), None)
            if previous is not None:
                previous.stop()
            running = self.running
            if isinstance(running, WarmJob) and (running.session, running.uri) == (
                job.session,
                job.uri,
            ):
                running.stop(wanted_by=job)  # that place is stale now
            self.warm_jobs[(job.session, job.uri)] = job
            self.cond.notify()

    def forget_document(self, session: int, uri: str) -> None:
        with self.cond:
            job = self.warm_jobs.pop((session, uri), None)
            if job is not None:
                job.stop()
            running = self.running
            if isinstance(running, WarmJob) and (running.session, running.uri) == (session, uri):
                running.stop()

    def drop_session(self, session: int) -> None:
        """A session ended: cancel its work and forget it."""
        with self.cond:
            for key in [k for k in self.warm_jobs if k[0] == session]:
                self.warm_jobs.pop(key).stop()
            for job in self.queues.pop(session, ()):
                job.signal.cancel(keep_chunk=True)  # queued: it never starts
            if self.running is not None and self.running.session == session:
                self.running.stop()
            self.latest = {k: v for k, v in self.latest.items() if k[0] != session}
            if session in self.order:
                self.order.remove(session)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    # -- the worker thread --------------------------------------------------------------------

    def _answer_empty(self, job: Job, outcome: str) -> None:
        """Answer a request that will not run (under ``cond``)."""
        job.signal.cancel(keep_chunk=True)
        if self.latest.get((job.session, job.uri)) is job:
            del self.latest[(job.session, job.uri)]
        if job.future.set_running_or_notify_cancel():
            job.future.set_result(None)
        self._record(job, outcome)

    def _record(self, job: Job, outcome: str, result: CompletionResult | None = None) -> None:
        """Leave the request's stats row; a recording problem never reaches the request."""
        if self.record is None:
            return
        if outcome == "cancelled" and job.superseded:
            outcome = "superseded"
        job.timing.done = job.timing.done or time.perf_counter()
        mode = result.mode if result is not None else job.options.mode
        kind = {Mode.LINE: "single", Mode.BLOCK: "multi", Mode.NONE: "none"}.get(mode, "none")
        try:
            self.record(
                request_row(
                    job.id,
                    job.language,
                    kind,
                    "invoked" if job.options.invoked else "auto",
                    outcome,
                    job.timing,
                    result.text if result is not None else "",
                    result.stats if result is not None else None,
                    context=job.context,
                )
            )
        except Exception as exc:
            log.debug("stats row not recorded: %s", exc)

    def _next(self) -> Job | WarmJob | None:
        with self.cond:
            while not self.stopping:
                for _ in range(len(self.order)):
                    session = self.order[0]
                    self.order.rotate(-1)
                    queue = self.queues.get(session)
                    while queue and self._overdue(queue[0]):
                        self.stats.expired += 1
                        self._answer_empty(queue.popleft(), "expired")
                    if queue:
                        self.running = queue.popleft()
                        self._share_due()
                        return self.running
                if self.warm_jobs:  # nothing waits: warm the newest place
                    key = next(reversed(self.warm_jobs))
                    self.running = self.warm_jobs.pop(key)
                    return self.running
                if not self.trim_due:
                    self.cond.wait()
                elif not self.cond.wait(TRIM_AFTER_IDLE_S):  # a quiet spell: trim now
                    self.trim_due = False
                    self._trim_unlocked()
            return None

    def _share_due(self) -> None:
        """(Under the lock.) While a request of another session waits, the running request
        gets ``JOB_SHARE_S`` of the worker from its start, then yields: it stops at its next
        prefill chunk end or target pass and is answered with what it has (``Job.yielded``)."""
        running = self.running
        if not isinstance(running, Job) or running.share_timer is not None:
            return
        if not self._others_wait(running.session):
            return
        started = running.timing.started or time.perf_counter()
        left = max(0.0, self.job_share_s - (time.perf_counter() - started))
        running.share_timer = threading.Timer(left, self._yield, args=(running,))
        running.share_timer.daemon = True
        running.share_timer.start()

    def _others_wait(self, session: int) -> bool:
        return any(q for s, q in self.queues.items() if s != session)

    def _yield(self, job: Job) -> None:
        with self.cond:
            if self.running is job and self._others_wait(job.session):
                job.yielded = True
                job.signal.cancel(keep_chunk=True)  # (the chunk stays cached for its place)

    def _overdue(self, job: Job) -> bool:
        """Has ``job`` waited past the deadline since it came or the model was ready, whichever
        is later? (While the model loads, nothing is overdue.)"""
        if self.ready_since is None:
            return False
        waited = time.perf_counter() - max(job.timing.arrived, self.ready_since)
        return waited > self.queue_deadline_s

    def _pair(self):
        pair = self.get_pair()
        if self.ready_since is None:
            self.ready_since = time.perf_counter()
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
                        self.running = None
                continue
            try:
                self._serve(job)
            finally:
                if job.share_timer is not None:
                    job.share_timer.cancel()
                with self.cond:
                    self.running = None
                    if self.latest.get((job.session, job.uri)) is job:
                        del self.latest[(job.session, job.uri)]
                    self.trim_due = True

    def _serve(self, job: Job) -> None:
        job.timing.started = time.perf_counter()
        if not job.future.set_running_or_notify_cancel():  # nobody waits for an answer
            self._record(job, "cancelled")
            return
        outcome, result, error = self._outcome(job)
        self._finish(job, outcome, result, error)
        if outcome in ("served", "empty") and result is not None and result.stats is not None:
            if result.anchor is not None and job.options.look_ahead_keys:
                self._look_ahead_after(job, result.text[:1])  # (not where the model did not run)

    def _outcome(self, job: Job) -> tuple[str, CompletionResult | None, Exception | None]:
        """Run ``job`` unless it is cancelled or stale: (outcome, its result, its failure)."""
        if job.signal.cancelled:
            return "cancelled", None, None
        current = job.current_version()
        if current is not None and current > job.version:
            return "stale", None, None
        try:
            pair = self._pair()
            # the local engine counts target forward passes, for cancel checks
            forwards = getattr(pair.engine, "target", None)
            if forwards is not None:
                job.signal.probe = lambda: forwards.forward_calls
            result: CompletionResult = complete(
                pair,
                job.cursor,
                job.options,
                path=job.path,
                extra_files=job.extra_files,
                stop=job.signal,
                on_text=self._on_text(job),
                anchor=job.anchors.get(job.uri) if job.anchors is not None else None,
                corpora=job.corpora,
            )
            if job.anchors is not None and result.anchor is not None:
                job.anchors[job.uri] = result.anchor
        except Exception as exc:  # the model call failed: this job fails, the worker goes on
            return "failed", None, exc
        if job.yielded and not job.superseded:  # its share ran out: what it has is the answer
            self.stats.yielded += 1
            if result.stats is not None:
                result.stats.stop_reason = "yielded"
            return ("served" if result.text else "empty"), result, None
        if job.signal.cancelled:
            self.stats.last_cancel = {
                "passes_at_cancel": job.signal.passes_at_cancel,
                "passes_final": forwards.forward_calls if forwards is not None else 0,
            }
            return "cancelled", result, None
        return ("served" if result.text else "empty"), result, None

    def _finish(
        self, job: Job, outcome: str, result: CompletionResult | None, error: Exception | None
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
        answered = outcome in ("served", "empty")
        if answered:
            self.stats.served += 1
            job.timing.done = time.perf_counter()
            self.stats.latencies_s.append(job.timing.done - job.timing.arrived)
        elif outcome == "cancelled":
            self.stats.cancelled += 1
        elif outcome == "stale":
            self.stats.stale += 1
        else:
            self.stats.failed += 1
        self._record(job, outcome, result)
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result if answered else None)

    def _look_ahead_after(self, job: Job, shown_next: str) -> None:
        """While the user reads the answer, compute ahead the next keystrokes at its place
        (a warm-up of that place, whose prompt is cached already)."""
        self.warm(WarmJob.at(job, shown_next=shown_next))

    def _warm(self, job: WarmJob) -> None:
        current = job.current_version()
        if job.signal.cancelled or (current is not None and current > job.version):
            return
        pair = self._pair()
        if not hasattr(pair.engine, "warm"):
            return  # a remote engine: its server keeps its own prompt cache
        # the prompt a request here would use: typing at an anchored cursor extends its prompt
        anchored = job.anchors.get(job.uri) if job.anchors is not None else None
        prompt, anchor = prompt_at(
            pair, job.cursor, job.options, job.path, job.extra_files, anchor=anchored
        )
        computed = pair.engine.warm(prompt, job.signal)
        if job.anchors is not None:
            job.anchors[job.uri] = anchor  # a request at this place uses exactly this prompt
        self.stats.warmed += 1
        self.stats.warm_tokens += computed
        self.stats.warm_preempted += job.signal.cancelled
        keys = job.options.look_ahead_keys
        if keys and not job.signal.cancelled:
            tokenizer, cursor = pair.tokenizer, job.cursor

            def next_prompts(logits) -> list[list[int]]:
                chars = likely_next_chars(tokenizer, logits, keys, skip=job.shown_next)
                return next_key_prompts(tokenizer, anchor, cursor.prefix, cursor.suffix, chars)

            rows = pair.engine.look_ahead(prompt, next_prompts, job.signal)
            self.stats.looked_ahead += rows > 0
            self.stats.ahead_rows += rows

    def _on_text(self, job: Job) -> Callable[[str], None]:
        def on_text(text: str) -> None:
            if self.pass_delay_s:  # (each text, the first too, comes as late as on a slow CPU)
                time.sleep(self.pass_delay_s)
            if job.timing.first_text is None:
                job.timing.first_text = time.perf_counter()
            if job.on_text is not None and not job.signal.cancelled:
                job.on_text(text)

        return on_text
