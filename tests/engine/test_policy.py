"""The adaptive policy's cost model: wide passes are used while they are cheap, and a width
measured during a slow moment is measured again rather than ruled out for good."""

from codespec.engine.policy import WIDTH_PROBE_GAP, SpeculationPolicy


def test_budget_follows_measured_pass_costs():
    policy = SpeculationPolicy(draft_mode="off")
    for width, seconds in ((1, 0.20), (2, 0.21), (4, 0.22), (8, 0.26), (16, 0.40)):
        policy.observe_pass(width, seconds)
    assert policy.width_budget() == 7  # bucket 8 costs 1.3x a one-token pass, 16 costs 2x


def test_a_width_measured_while_busy_is_probed_again():
    policy = SpeculationPolicy(draft_mode="off")
    policy.observe_pass(1, 0.20)
    policy.observe_pass(2, 0.21)
    policy.observe_pass(4, 0.60)  # another process had the cores for this one
    budgets = [policy.width_budget() for _ in range(WIDTH_PROBE_GAP)]
    assert budgets[:-1] == [1] * (WIDTH_PROBE_GAP - 1)
    assert budgets[-1] == 3  # one pass of bucket 4 is allowed again
    assert policy.width_budget() == 3  # ... until such a pass has been measured
    policy.observe_pass(4, 0.22)  # quiet again: the fresh measurement replaces the old one
    assert policy.width_budget() >= 3
    assert policy.decisions["width_probes"] == 1


def test_a_width_that_stays_expensive_stays_out():
    policy = SpeculationPolicy(draft_mode="off")
    policy.observe_pass(1, 0.20)
    policy.observe_pass(4, 0.60)
    for _ in range(WIDTH_PROBE_GAP):
        policy.width_budget()
    policy.observe_pass(4, 0.58)  # the probe: still expensive on this hardware
    assert policy.width_budget() == 1
