"""The ggml backend's count of parked cells (``ggml/cells.py``), without llama.cpp: never
negative, moved only in whole non-negative numbers, given back only by ``reset``."""

from __future__ import annotations

import pytest

from codespec.ggml.cells import CellCount


def test_parking_and_joining_move_cells_and_reset_gives_them_all_back():
    cells = CellCount()
    cells.park(3)  # a tree pass's rejected nodes
    cells.park(2)  # a look-ahead's unused branches
    cells.join(1)  # an accepted path's cell was counted with its tree: the text's again
    assert cells.parked == 4
    cells.reset()
    assert cells.parked == 0


@pytest.mark.parametrize("bad", ["park -1", "join -1", "join 5"])
def test_a_count_that_would_go_wrong_is_refused_and_left_as_it_was(bad):
    cells = CellCount()
    cells.park(4)
    verb, n = bad.split()
    with pytest.raises(ValueError):
        getattr(cells, verb)(int(n))
    assert cells.parked == 4


def test_crowded_only_with_parked_cells_past_the_limit():
    cells = CellCount()
    assert not cells.crowded(text=90, rows=20, limit=100)  # nothing parked: nothing to give
    cells.park(5)
    assert not cells.crowded(text=80, rows=10, limit=100)  # 95: room
    assert cells.crowded(text=90, rows=10, limit=100)  # 105: give parked cells back first
