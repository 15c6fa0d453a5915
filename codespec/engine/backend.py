"""The target-backend seam: what the decode loop needs from the model it verifies with.

The loop (``loop.py``), the policy and the proposers see the target only through these operations;
``torch_backend.kvcache.CachedModel`` implements them over torch, ``ggml.backend.GgmlModel`` over
llama.cpp's CPU kernels. What an implementation must keep:

* **exactness**: a decode pass gives a position the same logits, and writes it the same keys
  and values, whatever pass computed it (a one-row pass, a row of a chain, a node of a tree),
  where ``calibrate`` finds one-row passes exact; where it does not, the loop pads one-row
  passes (``Engine._verify``). (torch's rows are also the same bits as a prefill's; ggml's
  prefill rounds differently, which plain and speculative decoding share.)
* **stopping**: a pass given a ``StopSignal`` asks it before each layer and, once told to stop,
  raises ``Cancelled`` with the cache as it was before the pass (``stop.py``);
* **one sequence**: after ``keep`` of an accepted path the cache holds a plain sequence again.

Prices are not the backend's business: the loop times its passes and the policy learns them.
"""

from __future__ import annotations

from typing import Any, Protocol

from numpy.typing import NDArray

from .ahead import LookAhead
from .stop import StopSignal
from .tree import Logits

# ``max_pass_rows`` of a backend whose rows are exact at any width
NO_ROW_LIMIT = 1 << 30


class TargetBackend(Protocol):
    ids: list[int]  # the token ids the current cache holds, in order
    prefill_chunk: int  # tokens per prefill pass (set from the speed measured at load)
    forward_calls: int  # passes run so far (cancel checks count them)
    # the most rows a decoding pass may have and keep each row's bits (``NO_ROW_LIMIT``: any)
    max_pass_rows: int

    @property
    def vocab_size(self) -> int: ...

    def use_width_independent_rows(self) -> None:
        """Compute each row on its own from now on (attention by row:
        ``torch_backend/attention.py``)."""
        ...

    @property
    def threads(self) -> int:
        """The threads a pass runs on now (at load: the most it will use)."""
        ...

    def use_threads(self, n: int) -> None:
        """Run the next passes on ``n`` threads (the engine's choice: ``machine.FreeCores``);
        a row's bits do not depend on it."""
        ...

    def prefill(
        self, ids: list[int], stop: StopSignal | None = None, chunk: int | None = None
    ) -> tuple[Logits, int, int]:
        """Make the cache hold ``ids``, reusing what a slot shares with it; return (logits
        after the last id, tokens reused, tokens computed)."""
        ...

    def forward(
        self,
        tokens: list[int],
        tree_mask: NDArray | None = None,
        depths: list[int] | None = None,
        all_logits: bool = True,
        stop: StopSignal | None = None,
    ) -> Logits:
        """Append a chain, or a token tree (``tree_mask``: which new token sees which;
        ``depths``: each one's position past the cache), and return logits at each token."""
        ...

    def keep(self, n: int, extra: list[int]) -> None:
        """Keep the first ``n`` cached positions and the ``extra`` ones (an accepted path)."""
        ...

    def crop(self, n: int) -> None: ...

    def reset(self) -> None: ...

    # prompts computed ahead, whose prefill is then free (``ahead.py``: one object, so the
    # decode loop, the warm-ups and the prefill ask it directly)
    @property
    def ahead(self) -> LookAhead[Any]: ...
