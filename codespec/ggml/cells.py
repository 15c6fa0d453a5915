"""Where the ggml backend's K/V cells go (``backend.py`` and ``ahead.py`` say why): the text's
sequence holds its ids' cells; rejected tree nodes and unused look-ahead cells are *parked*
(kept under a sequence nobody reads, since freeing cells below the text's would leave holes
llama.cpp fills out of position order) until a compaction gives them all back.

``CellCount`` is the one place that counts parked cells. Its invariants: the count is never
negative, a park or a join moves a whole, non-negative number of cells, and only ``reset`` (the
cache cleared or compacted) brings it back to zero.
"""

from __future__ import annotations


class CellCount:
    """The cells parked under ``layout.PARKED``, and whether the cache must compact."""

    def __init__(self) -> None:
        self.parked = 0

    def park(self, cells: int) -> None:
        """``cells`` more cells moved to the parked sequence."""
        if cells < 0:
            raise ValueError(f"cannot park {cells} cells")
        self.parked += cells

    def join(self, cells: int) -> None:
        """``cells`` parked cells became the text's again (an accepted path of a tree whose
        other nodes were just parked)."""
        if not 0 <= cells <= self.parked:
            raise ValueError(f"cannot take {cells} of {self.parked} parked cells back")
        self.parked -= cells

    def reset(self) -> None:
        """Every parked cell is given back (the cache was cleared or compacted)."""
        self.parked = 0

    def crowded(self, text: int, rows: int, limit: int) -> bool:
        """Whether ``rows`` more cells after ``text`` cells of text and the parked ones pass
        ``limit`` (then parked cells are worth giving back first)."""
        return self.parked > 0 and text + self.parked + rows > limit
