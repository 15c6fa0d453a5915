"""How far a llama.cpp server should draft for a request, from its own reported acceptance.

llama.cpp's server takes ``speculative.n_max`` per request. codespec learns, per kind of
completion (``GenerationParams.context``: single line, multi-line), the share of the server's
drafted tokens its target accepted, and asks for drafts as long as they are likely to survive:
with a per-token acceptance ``a``, a draft's expected accepted run is ``a / (1 - a)`` tokens,
and drafting twice that leaves room for the runs longer than the mean. Below ``MIN_RATE`` the
verification of drafts costs more than the few tokens they give, and it asks for none. Until a
kind has ``MIN_REPORTS`` reports the server's own setting stands. Only servers that reported in
llama.cpp's format are sent the parameter (vLLM takes its speculation from its start-up
settings only).
"""

from __future__ import annotations

import math
import threading

from .metrics import ServerSpeculation

MIN_REPORTS = 3
MIN_RATE = 0.15
MAX_DRAFT = 16
SMOOTHING = 0.3  # weight of the newest request's rate


class RemoteSpeculation:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rates: dict[str, float] = {}
        self.reports: dict[str, int] = {}
        self.llama_cpp = False  # the server reported in llama.cpp's format

    def observe(self, context: str, spec: ServerSpeculation) -> None:
        if spec.drafted <= 0:
            return
        rate = spec.accepted / spec.drafted
        with self.lock:
            self.llama_cpp = self.llama_cpp or spec.source == "llama.cpp"
            old = self.rates.get(context)
            self.rates[context] = rate if old is None else old + SMOOTHING * (rate - old)
            self.reports[context] = self.reports.get(context, 0) + 1

    def n_max(self, context: str) -> int | None:
        """The draft length to ask for, or None to leave the server's setting."""
        with self.lock:
            if not self.llama_cpp or self.reports.get(context, 0) < MIN_REPORTS:
                return None
            rate = self.rates[context]
        if rate < MIN_RATE:
            return 0
        run = rate / (1.0 - rate) if rate < 1.0 else MAX_DRAFT
        return max(1, min(MAX_DRAFT, math.ceil(2 * run - 1e-9)))
