"""The slot pool's rules and the stop signal's answers, without a model."""

from codespec.engine.slots import PARK_MIN_TOKENS, Slot, SlotPool
from codespec.engine.stop import REDO_ROWS, StopSignal


def pool(slots=4, budget=100) -> SlotPool:
    return SlotPool(size_of=lambda cache: cache, slots=slots, budget_bytes=budget)


def test_the_slot_sharing_the_longest_prefix_is_chosen():
    p = pool()
    p.park(Slot([1, 2, 3, 4], 10))
    p.park(Slot([1, 2, 9], 10))
    assert p.best_for([1, 2, 3, 4, 5], current=[1, 2]) == (1, 4)
    assert p.best_for([1, 2, 9, 9], current=[1, 2, 9, 9, 9]) == (None, 4)  # current is best
    assert p.take(1).ids == [1, 2, 3, 4] and [s.ids for s in p.parked] == [[1, 2, 9]]


def test_parked_slots_are_kept_within_count_and_budget_least_recent_first_out():
    p = pool(slots=3, budget=25)
    for i in range(4):
        p.park(Slot([i], 10))
    assert [s.ids for s in p.parked] == [[3], [2]]  # three slots: the current and two parked
    p.park(Slot([4], 10))
    p.park(Slot([5], 20))  # over the budget with anything beside it
    assert [s.ids for s in p.parked] == [[5]]
    p.park(Slot([], 1))  # an empty cache is not worth a slot
    assert [s.ids for s in p.parked] == [[5]]


def test_a_place_is_left_only_past_a_keystroke_s_worth_of_tokens():
    assert not pool().leaves_place(PARK_MIN_TOKENS)
    assert pool().leaves_place(PARK_MIN_TOKENS + 1)
    assert not pool(slots=1).leaves_place(10 * PARK_MIN_TOKENS)  # nowhere to park


def test_the_stop_signal_tells_chunks_passes_and_layers_apart():
    stop = StopSignal()
    assert not stop.at_chunk_end() and not stop.stops_pass() and not stop.stops_pass(100)
    stop.cancel(keep_chunk=True)  # a newer request at the same place needs the chunk
    assert stop.at_chunk_end() and stop.stops_pass()  # decoding passes stop at once
    assert not stop.stops_pass(REDO_ROWS + 1)  # a prefill chunk finishes ...
    assert stop.stops_pass(REDO_ROWS)  # ... unless a keystroke's few rows, cheaper to redo
    assert not stop.preempted
    stop.cancel()  # later: nobody needs it after all
    assert stop.preempted and stop.stops_pass(REDO_ROWS + 1)
    other = StopSignal()
    other.cancel()  # a request elsewhere: nothing of this work is needed
    assert other.cancelled and other.stops_pass(1000)
