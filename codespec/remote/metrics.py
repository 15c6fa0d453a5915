"""What a serving engine says about its own speculation, in the formats the engines document.

* llama.cpp's server: the last streamed event's ``timings`` carries ``draft_n`` (tokens
  drafted) and ``draft_n_accepted`` when it speculated.
* vLLM with ``--per-request-spec-decode-metrics summary``: the final usage chunk's
  ``metrics.speculative_decoding`` (``num_draft_tokens``, ``num_accepted_draft_tokens``,
  ``num_spec_steps``); sent only with ``stream_options.include_usage``.
* vLLM's Prometheus counters at ``/metrics`` (``vllm:spec_decode_num_draft_tokens_total`` and
  friends), for the whole server: the bench reads them before and after a run and subtracts.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class ServerSpeculation:
    """Draft tokens the server proposed and how many of them its target accepted."""

    drafted: int
    accepted: int
    steps: int = 0  # verification steps, where the server says
    source: str = ""  # "vllm" | "llama.cpp": whose format it came in

    @property
    def rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def __add__(self, other: ServerSpeculation) -> ServerSpeculation:
        return ServerSpeculation(
            self.drafted + other.drafted,
            self.accepted + other.accepted,
            self.steps + other.steps,
            self.source or other.source,
        )


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


def from_event(event: dict) -> ServerSpeculation | None:
    """The speculation figures a streamed event carries, if any (either engine's format)."""
    metrics = event.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        spec = metrics["speculative_decoding"]
        drafted = _count(spec.get("num_draft_tokens"))
        accepted = _count(spec.get("num_accepted_draft_tokens"))
        if drafted is not None and accepted is not None:
            steps = _count(spec.get("num_spec_steps")) or 0
            return ServerSpeculation(drafted, accepted, steps, "vllm")
    timings = event.get("timings")
    if isinstance(timings, dict):
        drafted = _count(timings.get("draft_n"))
        accepted = _count(timings.get("draft_n_accepted"))
        if drafted is not None and accepted is not None:
            return ServerSpeculation(drafted, accepted, source="llama.cpp")
    return None


PROMETHEUS_COUNTERS = {
    "vllm:spec_decode_num_draft_tokens": "drafted",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
    "vllm:spec_decode_num_drafts": "steps",
}


def from_prometheus(text: str) -> ServerSpeculation | None:
    """vLLM's speculation counters in a ``/metrics`` page, summed over their labels (one
    series per model and engine); None when the page has none (no speculation configured).
    A counter's family name drops the ``_total`` suffix its samples carry."""
    totals = {"drafted": 0.0, "accepted": 0.0, "steps": 0.0}
    seen = False
    for family in text_string_to_metric_families(text):
        field = PROMETHEUS_COUNTERS.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") or family.type != "counter":
                totals[field] += sample.value
                seen = True
    if not seen:
        return None
    drafted, accepted, steps = (int(totals[k]) for k in ("drafted", "accepted", "steps"))
    return ServerSpeculation(drafted, accepted, steps, "vllm")
