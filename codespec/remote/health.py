"""Which of the remote engine's URLs to try, and what the editors are told about them.

Each base URL is up or down. A failure takes it down for a backoff (doubling from
``FIRST_BACKOFF_S`` to ``MAX_BACKOFF_S``, or the server's ``Retry-After``); while it is down,
requests go to the next URL, and when every URL is down a request is answered empty at once
(an editor never waits on a server known to be gone). A probe (the engine's watch) or a
request after the backoff tries it again; a success brings it back. A URL that failed by
*hanging* (no answer until a timeout) is tried again by the probe alone: a request would wait
out the same timeout, one editor after another.

Whether a URL is down does not wait on any one request living long enough to see it: each
request tells the health when it was sent, and a URL that has been asked but has sent no text
for ``patience`` seconds is asked directly (``Remote``'s watch, on its own loop). No answer:
it is down (a server that accepts connections and answers nothing, or is gone). An answer: it
is busy (alive, computing), which is logged once and is not a fault: requests keep going to
it, after any URL that is not busy. A busy URL that has taken ``STUCK_REQUESTS`` requests and
sent none of them text for the first-token timeout is *stuck* (it answers a probe but never a
completion): it goes down as a hanging one, and only a completion probe brings it back.

Logging is per incident, not per request: one line when a URL goes down, one when it comes
back. Listeners hear when the engine as a whole becomes unreachable or reachable again (the
daemon tells the editors' status).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
# A URL that goes down again this soon after its last logged incident is flapping (up for a
# probe, down for the next request): its incidents are logged at debug level meanwhile.
QUIET_S = 300.0
# Requests a busy URL may take without sending any of them text (for the first-token timeout)
# before it is taken for stuck rather than busy: a busy server answers someone in that time.
STUCK_REQUESTS = 3
log = logging.getLogger("codespec.remote")

READY = "ready"
UNREACHABLE = "remote unreachable"


@dataclass
class UrlState:
    url: str
    failures: int = 0
    down_until: float = 0.0
    reason: str = ""
    warned_at: float | None = None  # when its last incident was logged
    warned: bool = False  # this incident was logged (so its end is too)
    silent_since: float | None = None  # the first request sent since it last sent text
    last_sent: float = float("-inf")
    waiting: int = 0  # requests sent to it and not yet over
    busy: bool = False  # it answered a probe while silent: alive, computing
    incidents: int = 0  # times it went down (a waiting request sees a new one)
    hangs: bool = False  # down by a timeout: only the probe tries it again
    stuck: bool = False  # down as stuck: the probe that tries it again is a completion
    unanswered: int = 0  # requests sent since its last text
    quiet_since: float | None = None  # the first of those (a probe's answer does not reset it)

    @property
    def down(self) -> bool:
        return self.failures > 0


class Health:
    """Up/down state of each URL; thread-safe (the worker and the remote loop both use it)."""

    def __init__(self, urls: tuple[str, ...], clock: Callable[[], float] = time.monotonic):
        self.states = [UrlState(url) for url in urls]
        self.clock = clock
        self.lock = threading.Lock()
        self.listeners: list[Callable[[str, str], None]] = []
        self.state = READY
        self.refusals: set[tuple[str, str]] = set()

    def candidates(self) -> list[str]:
        """URLs to try now, in order: those up (the busy ones last), then those whose backoff
        has passed."""
        now = self.clock()
        with self.lock:
            up = [s.url for s in self.states if not s.down and not s.busy]
            busy = [s.url for s in self.states if not s.down and s.busy]
            due = [s.url for s in self.states if s.down and not s.hangs and s.down_until <= now]
        return up + busy + due

    def down_urls(self) -> list[str]:
        with self.lock:
            return [s.url for s in self.states if s.down]

    def due_for_probe(self) -> list[tuple[str, bool]]:
        """Down URLs whose backoff has passed, each with whether its probe must be a completion
        (a stuck one answers every other question)."""
        now = self.clock()
        with self.lock:
            return [(s.url, s.stuck) for s in self.states if s.down and s.down_until <= now]

    def is_busy(self, url: str) -> bool:
        with self.lock:
            return self._state(url).busy

    def incidents(self, url: str) -> int:
        with self.lock:
            return self._state(url).incidents

    def heard(self, url: str) -> None:
        """``url`` sent text: it is neither silent nor busy."""
        with self.lock:
            state = self._state(url)
            state.silent_since, state.busy = None, False
            state.unanswered, state.quiet_since = 0, None

    def sent(self, url: str) -> None:
        """A request went to ``url``: its silence, if it stays silent, counts from the first."""
        with self.lock:
            state = self._state(url)
            state.last_sent = self.clock()
            state.waiting += 1
            state.unanswered += 1
            if state.silent_since is None:
                state.silent_since = state.last_sent
            if state.quiet_since is None:
                state.quiet_since = state.last_sent

    def over(self, url: str) -> None:
        """A request sent to ``url`` is over, however it ended."""
        with self.lock:
            state = self._state(url)
            state.waiting = max(0, state.waiting - 1)

    def silent(self, patience_s: float) -> list[str]:
        """URLs up that were asked and have sent no text for ``patience_s`` seconds, while
        requests still wait on them or keep going to them."""
        now = self.clock()
        with self.lock:
            return [
                s.url
                for s in self.states
                if not s.down
                and s.silent_since is not None
                and now - s.silent_since >= patience_s
                and (s.waiting > 0 or now - s.last_sent < patience_s)
            ]

    def answered_while_silent(self, url: str, silent_s: float, stuck_after_s: float) -> None:
        """A silent URL answered a probe: busy, not gone, and its silence counts afresh; unless
        it has taken ``STUCK_REQUESTS`` requests and answered none for ``stuck_after_s`` (the
        first-token timeout): then it is stuck, and goes down."""
        with self.lock:
            state, now = self._state(url), self.clock()
            state.silent_since = now
            quiet_s = now - state.quiet_since if state.quiet_since is not None else 0.0
            stuck = state.unanswered >= STUCK_REQUESTS and quiet_s >= stuck_after_s
            first, state.busy = not state.busy, True
        if stuck:
            reason = (
                f"it answers probes but sent no completion text to {state.unanswered} requests "
                f"in {quiet_s:.0f} s"
            )
            self.failed(url, reason, hangs=True, stuck=True)
            return
        if first:
            log.info(
                "remote %s is busy: it answers, but sent no completion text in %.0f s",
                url,
                silent_s,
            )

    def succeeded(self, url: str) -> None:
        with self.lock:
            state = self._state(url)
            was_warned = state.down and state.warned
            state.failures, state.down_until, state.reason = 0, 0.0, ""
            state.warned = False
            state.silent_since, state.busy = None, False
            state.hangs = state.stuck = False
            state.unanswered, state.quiet_since = 0, None
        if was_warned:
            log.info("remote %s is reachable again", url)
        self._tell()

    def failed(
        self,
        url: str,
        reason: str,
        retry_after_s: float | None = None,
        hangs: bool = False,
        stuck: bool = False,
    ) -> None:
        """``url`` failed: down for a backoff. ``hangs``: it failed by a timeout, so only the
        probe tries it again; ``stuck``: that probe must be a completion."""
        with self.lock:
            state, now = self._state(url), self.clock()
            first = not state.down
            state.failures += 1
            state.incidents += 1
            backoff = min(FIRST_BACKOFF_S * 2 ** (state.failures - 1), MAX_BACKOFF_S)
            if retry_after_s is not None:
                backoff = min(max(retry_after_s, 0.0), MAX_BACKOFF_S)
            state.down_until = now + backoff
            state.reason = reason
            state.hangs = state.hangs or hangs or stuck  # (a quick failure of a hanging URL
            state.stuck = state.stuck or stuck  # does not make it worth a request's wait)
            state.silent_since, state.busy = None, False  # (watched afresh once it is back)
            state.unanswered, state.quiet_since = 0, None
            flapping = state.warned_at is not None and now - state.warned_at < QUIET_S
            warn = first and not flapping  # one line per incident; retries are not news
            if warn:
                state.warned_at, state.warned = now, True
        if warn:
            log.warning("remote %s unreachable: %s (retrying with backoff)", url, reason)
        elif first:
            log.debug("remote %s unreachable again: %s", url, reason)
        self._tell()

    def refused(self, url: str, reason: str) -> None:
        """The server is up but refused this request (a 4xx, a reply we cannot read): it stays
        up; each distinct refusal is logged once."""
        with self.lock:
            first = (url, reason) not in self.refusals
            if len(self.refusals) >= 256:  # distinct server messages: a bound, not a history
                self.refusals.clear()
            self.refusals.add((url, reason))
        if first:
            log.warning("remote %s refused a request: %s", url, reason)

    def message(self) -> str:
        """What the status shows: the engine's state and, when down, why."""
        with self.lock:
            reasons = [f"{s.url}: {s.reason}" for s in self.states if s.down]
        return "; ".join(reasons) if reasons else "remote engine reachable"

    def _state(self, url: str) -> UrlState:
        return next(s for s in self.states if s.url == url)

    def _tell(self) -> None:
        with self.lock:
            state = UNREACHABLE if all(s.down for s in self.states) else READY
            changed, self.state = state != self.state, state
        if changed:
            for listener in list(self.listeners):
                try:
                    listener(state, self.message())
                except Exception as exc:  # a listener's problem is never the request's
                    log.debug("status listener failed: %s", exc)
