"""The engine worker's live counters, and the dict ``codespec/stats`` and the daemon's status
line report them as (lsp/PROTOCOL.md, "codespec/stats")."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass
class WorkerStats:
    served: int = 0
    cancelled: int = 0
    stale: int = 0
    failed: int = 0
    tokens: int = 0
    passes: int = 0
    latencies_s: collections.deque = field(default_factory=lambda: collections.deque(maxlen=500))
    last_cancel: dict = field(default_factory=dict)  # passes at cancel vs at the end, last job
    last_prompt: dict = field(default_factory=dict)  # prefilled vs reused, last served request
    dropped: int = 0  # answered empty: the queue was full
    expired: int = 0  # answered empty: waited past the deadline
    warmed: int = 0  # warm-ups run
    warm_tokens: int = 0  # prompt tokens they prefilled
    warm_preempted: int = 0  # warm-ups stopped by a request
    looked_ahead: int = 0  # places whose next keystrokes were computed ahead
    ahead_rows: int = 0  # rows those passes computed
    ahead_hits: int = 0  # requests that started from a prompt computed ahead
    yielded: int = 0  # requests stopped after their share while another session waited


def worker_stats(s: WorkerStats) -> dict:
    """The worker's live counters, as ``codespec/stats`` and the daemon's status report them."""
    latencies = sorted(s.latencies_s)
    return {
        "served": s.served,
        "cancelled": s.cancelled,
        "stale": s.stale,
        "failed": s.failed,
        "tokens": s.tokens,
        "passes": s.passes,
        "tokens_per_pass": s.tokens / s.passes if s.passes else None,
        "latency_p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "last_cancel": dict(s.last_cancel),
        "last_prompt": dict(s.last_prompt),
        "dropped": s.dropped,
        "expired": s.expired,
        "warmed": s.warmed,
        "warm_tokens": s.warm_tokens,
        "warm_preempted": s.warm_preempted,
        "looked_ahead": s.looked_ahead,
        "ahead_rows": s.ahead_rows,
        "ahead_hits": s.ahead_hits,
        "yielded": s.yielded,
    }
