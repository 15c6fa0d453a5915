"""The remote engine's health on a fake clock: which URLs a request tries, and when a busy URL
is taken for a stuck one."""

from __future__ import annotations

from codespec.remote.health import STUCK_REQUESTS, Health


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_url_that_hangs_is_never_tried_by_a_request_only_by_the_probe():
    """A quick failure (refused, 5xx) is tried again by the next request after its backoff,
    which costs that request milliseconds; one that failed by a timeout would cost the next
    request the same timeout, so only the probe tries it again."""
    clock = Clock()
    health = Health(("http://quick", "http://hangs"), clock)
    health.failed("http://quick", "HTTP 503")
    health.failed("http://hangs", "the stream sent no text in time", hangs=True)
    assert health.candidates() == []
    clock.now += 60.0  # past any backoff
    assert health.candidates() == ["http://quick"]
    assert health.due_for_probe() == [("http://quick", False), ("http://hangs", False)]
    health.failed("http://hangs", "HTTP 503")  # a quick failure does not make it worth a wait
    clock.now += 60.0
    assert health.candidates() == ["http://quick"]
    health.succeeded("http://hangs")  # the probe found it serving
    assert health.candidates() == ["http://hangs", "http://quick"]  # (up first, then due)


def test_a_busy_url_that_answers_no_request_for_the_timeout_is_stuck():
    clock = Clock()
    health = Health(("http://u",), clock)
    for _ in range(STUCK_REQUESTS):
        health.sent("http://u")
        clock.now += 1.0
        health.over("http://u")
    health.answered_while_silent("http://u", 3.0, stuck_after_s=10.0)
    assert health.is_busy("http://u") and health.candidates() == ["http://u"]  # too soon
    clock.now += 7.0
    health.answered_while_silent("http://u", 3.0, stuck_after_s=10.0)
    assert health.candidates() == [] and health.due_for_probe() == []
    assert "sent no completion text to 3 requests" in health.message()
    clock.now += 60.0
    assert health.due_for_probe() == [("http://u", True)]  # asked for a completion


def test_text_from_a_busy_url_keeps_it_busy_not_stuck():
    clock = Clock()
    health = Health(("http://u",), clock)
    for _ in range(2 * STUCK_REQUESTS):
        health.sent("http://u")
        clock.now += 5.0
        health.heard("http://u")  # someone got text: alive and serving
        health.over("http://u")
        health.answered_while_silent("http://u", 3.0, stuck_after_s=10.0)
    assert health.candidates() == ["http://u"]
