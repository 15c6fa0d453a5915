"""The adaptive policy: verify the chain length that maximises expected tokens per second, from
measured pass costs and acceptance per context; re-measure what it stops using."""

import pytest

from codespec.engine.acceptance import NGRAM_PRIOR, expected_tokens, kept_moments, span_rates
from codespec.engine.costs import WIDTH_PROBE_GAP, PassCosts
from codespec.engine.ngram import SINGLE, SPLIT, UNANIMOUS
from codespec.engine.policy import ACCEPTANCE_PROBE_GAP, SpeculationPolicy

# Pass costs by width as measured on a 2-core AVX2 CPU with int4 weights (ms): wide is dear.
CPU_COSTS = ((1, 0.170), (2, 0.198), (4, 0.243), (8, 0.479), (16, 0.83))
# ... and a GPU-like curve, where a pass of 16 costs about what a pass of 1 does.
FLAT_COSTS = ((1, 0.020), (2, 0.020), (4, 0.021), (8, 0.021), (16, 0.022), (32, 0.024))


def policy_with(costs) -> SpeculationPolicy:
    policy = SpeculationPolicy(draft_mode="off")
    for width, seconds in costs:
        policy.costs.observe_pass(width, seconds)
    return policy


def test_flat_costs_and_good_acceptance_verify_long_chains():
    assert policy_with(FLAT_COSTS).chain_length([0.9] * 20) >= 15


def test_expensive_widths_narrow_the_chain_to_what_pays():
    policy = policy_with(CPU_COSTS)
    # a = 0.9: E(3)/T(4) = 3.44/0.243 beats E(7)/T(8) = 5.7/0.479 and E(1)/T(2) = 1.9/0.198
    assert policy.chain_length([0.9] * 20) == 3
    # a = 0.3: one extra token is all that pays (1.3/0.198 > 1/0.170 > 1.417/0.243)
    assert policy.chain_length([0.3] * 20) == 1
    # a = 0.1: a plain one-row pass is best
    assert policy.chain_length([0.1] * 20) == 0


def test_chain_length_follows_each_tokens_acceptance():
    policy = policy_with(FLAT_COSTS)
    # a sure token, then ones nearly always wrong: not worth the next (5 % dearer) bucket
    assert policy.chain_length([0.99, 0.02, 0.02, 0.02]) == 1
    assert policy.chain_length([0.99, 0.99, 0.99, 0.02, 0.02]) >= 3


def span_of(policy: SpeculationPolicy, evidence: int, support: str = "", n: int = 8) -> list:
    """Per-token rates of an ``n``-token n-gram span of that kind, as the decode loop asks."""
    return span_rates(*policy.acceptance.span_rates(evidence, support), n)


def test_acceptance_is_learned_per_match_length():
    policy = policy_with(CPU_COSTS)
    for _ in range(40):
        policy.acceptance.observe_span(evidence=6, proposed=8, accepted=8)  # long matches hold
        policy.acceptance.observe_span(evidence=1, proposed=8, accepted=0)  # one-token ones do not
    policy.acceptance.begin_request()  # (this test's request saw both kinds)
    rates = policy.acceptance.span_rates
    assert min(rates(6)) > 0.9 and rates(1)[0] < 0.1
    assert policy.chain_length(span_of(policy, 6)) >= 3
    assert policy.chain_length(span_of(policy, 1)) == 0


def test_a_spans_first_token_and_the_rest_are_learned_apart():
    """Spans whose first token is mostly wrong but whose rest holds once it is right: a poor
    first rate, a good later one (one rate for all would be the average of the two)."""
    policy = policy_with(CPU_COSTS)
    for i in range(40):
        policy.acceptance.observe_span(evidence=2, proposed=6, accepted=6 if i % 4 == 0 else 0)
    policy.acceptance.begin_request()
    first, then = policy.acceptance.span_rates(2)
    assert first == pytest.approx(0.25, abs=0.06) and then > 0.9
    # E = 1 + 0.25 (1 + 0.9 + 0.81): a pass of 4 pays here (one rate of ~0.4 for all four
    # tokens would say 1.65 tokens, and pick a narrower pass)
    assert expected_tokens(span_of(policy, 2, n=3)) == pytest.approx(1 + first * 2.71, abs=0.05)
    assert policy.chain_length(span_of(policy, 2)) >= 3


def test_spans_start_from_the_rates_measured_for_their_kind():
    """Before anything is measured: after a 1-token match whose earlier matches disagree (or
    that has no other match) the first token is kept 20-25% of the time, and a pass 22% dearer
    than a plain one (a 2-core Xeon's) does not pay for that token alone; when all earlier
    matches agree it is kept ~80% of the time."""
    policy = policy_with(((1, 0.122), (2, 0.149), (4, 0.175), (8, 0.230)))
    policy.acceptance.begin_request("block")
    rates = policy.acceptance.span_rates
    assert rates(1, UNANIMOUS)[0] > 3 * rates(1, SPLIT)[0]
    assert policy.chain_length(span_of(policy, 1, SPLIT, n=1)) == 0
    assert policy.chain_length(span_of(policy, 1, SINGLE, n=1)) == 0
    assert policy.chain_length(span_of(policy, 1, UNANIMOUS, n=1)) == 1
    split, unanimous = span_of(policy, 1, SPLIT), span_of(policy, 1, UNANIMOUS)
    assert policy.chain_length(unanimous) > max(2, policy.chain_length(split))
    assert policy.chain_length(span_of(policy, 6, SINGLE)) >= 3


def test_acceptance_is_learned_per_context():
    """Lookup that misses in rest-of-line completions does not hold back blocks, or the
    other way round; a context never seen starts from the prior."""
    policy = policy_with(CPU_COSTS)
    for _ in range(20):
        policy.acceptance.begin_request("line")
        policy.acceptance.observe_span(evidence=3, proposed=4, accepted=0)
        policy.acceptance.begin_request("block")
        policy.acceptance.observe_span(evidence=3, proposed=4, accepted=4)
    policy.acceptance.begin_request("line")
    line = policy.acceptance.span_rates(3)
    policy.acceptance.begin_request("block")
    block = policy.acceptance.span_rates(3)
    policy.acceptance.begin_request("another")
    assert line[0] < 0.1 and min(block) > 0.9
    assert policy.acceptance.span_rates(3) == pytest.approx((NGRAM_PRIOR, NGRAM_PRIOR))
    assert policy.chain_length(span_rates(*line, 8)) == 0
    assert policy.chain_length(span_rates(*block, 8)) >= 3


def test_a_poor_offer_is_still_tried_now_and_then():
    policy = policy_with(CPU_COSTS)
    lengths = []
    for _ in range(ACCEPTANCE_PROBE_GAP):
        decision = policy.decide([0.05] * 8, nodes=8)
        policy.commit(decision)
        lengths.append(decision.chain)
    assert lengths[:-1] == [0] * (ACCEPTANCE_PROBE_GAP - 1)
    assert lengths[-1] == 1  # one token, so its acceptance keeps being measured
    assert policy.decisions["acceptance_probes"] == 1


def test_asking_changes_nothing_until_the_answer_is_committed():
    """The questions are pure: asked any number of times, they give the same answer, and only
    ``commit`` counts a probe or moves its schedule."""
    policy = policy_with(CPU_COSTS)
    for _ in range(ACCEPTANCE_PROBE_GAP - 1):
        policy.commit(policy.decide([0.05] * 8, nodes=8))
    due = [policy.decide([0.05] * 8, nodes=8) for _ in range(5)]
    assert all(d == due[0] for d in due) and due[0].acceptance_probe
    assert policy.decisions["acceptance_probes"] == 0
    plans = [policy.plan_draft(2) for _ in range(40)]
    assert len(set(plans)) == 1 and policy.decisions["probes"] == 0
    policy.commit(due[0])
    assert policy.decisions["acceptance_probes"] == 1
    assert not policy.decide([0.05] * 8, nodes=8).acceptance_probe


def test_a_draft_that_does_not_pay_is_probed_with_growing_gaps():
    policy = SpeculationPolicy(draft_mode="auto")
    for width, seconds in CPU_COSTS:
        policy.costs.observe_pass(width, seconds)
    policy.costs.draft_step_s.add(1.0)  # far dearer than a pass: never pays
    runs = []
    for i in range(16 + 32 + 64):
        plan = policy.plan_draft(0)
        policy.commit(plan)
        if plan.use_draft:
            assert plan.probe and not plan.pays
            runs.append(i)
    assert runs == [15, 15 + 32, 15 + 32 + 64]
    assert policy.decisions["probes"] == 3
    assert not policy.plan_draft(0, draft_lag=1000).use_draft  # a long catch-up: no probe


def test_a_width_between_two_measured_ones_is_costed_between_them():
    policy = policy_with(CPU_COSTS)
    assert policy.costs.price(3) == pytest.approx((0.198 + 0.243) / 2)
    assert policy.costs.price(6) == pytest.approx(0.243 + (0.479 - 0.243) / 2)
    # a = 0.5: E(2)/T(3) = 1.75/0.2205 beats E(1)/T(2) = 1.5/0.198 and E(3)/T(4) = 1.875/0.243
    # (costed as a pass of 4, two tokens would lose to three)
    assert policy.chain_length([0.5] * 20) == 2
    policy.costs.observe_pass(3, 0.30)  # measured: 3 rows cost more here than the line says
    assert policy.costs.price(3) == 0.30
    assert policy.chain_length([0.5] * 20) == 3


def test_past_the_widest_measured_width_a_wider_one_looks_a_little_dearer():
    policy = policy_with(((1, 0.1), (2, 0.12)))
    assert policy.costs.price(4) == pytest.approx(0.12 * 1.05)
    assert policy.costs.price(9) == pytest.approx(0.12 * 1.05**3)
    assert SpeculationPolicy().costs.price(1) == 1.0  # nothing measured


def test_other_branches_ride_along_only_where_a_wider_pass_costs_no_more():
    cpu, gpu = policy_with(CPU_COSTS), policy_with(FLAT_COSTS)
    assert cpu.width(chain=2, nodes=20) == 2  # a fourth row costs 10% more here
    assert gpu.width(chain=2, nodes=20) == 3  # ... and 2% here: it rides along
    assert gpu.width(chain=5, nodes=20) == 7  # up to the chain's width bucket (8), no further
    assert gpu.width(chain=5, nodes=6) == 6  # never more nodes than the tree has
    assert cpu.width(chain=1, nodes=1) == 1
    assert cpu.width(chain=0, nodes=20) == 0


def test_the_next_bucket_width_above_the_chain_is_probed_when_stale():
    policy = policy_with(CPU_COSTS)
    for _ in range(WIDTH_PROBE_GAP):
        policy.costs.observe_pass(3, 0.22)  # chains of 2 only: a pass of 4 is not measured again
    probe = policy.verify_chain(2, nodes=8)
    assert probe.nodes == 3 and probe.width_probe == 4  # ... so one is tried
    policy.commit(probe)
    assert policy.decisions["width_probes"] == 1
    policy.costs.observe_pass(4, 0.30)  # the probe's fresh measurement replaces the old one
    assert policy.costs.price(4) == 0.30


def test_a_width_measured_while_busy_is_probed_again():
    policy = policy_with(((1, 0.20), (2, 0.21), (4, 0.60), (8, 1.2)))  # 4, 8 while busy
    for _ in range(WIDTH_PROBE_GAP):
        assert policy.chain_length([0.9] * 8) == 1
        policy.costs.observe_pass(2, 0.21)
    probe = policy.verify_chain(1, nodes=8)
    assert probe.nodes == 3  # bucket 4 is tried once again
    policy.commit(probe)
    policy.costs.observe_pass(4, 0.22)  # quiet again: the fresh measurement replaces the old one
    assert policy.chain_length([0.9] * 8) == 3
    assert policy.decisions["width_probes"] == 1


def test_a_width_that_stays_expensive_is_probed_less_and_less():
    policy = policy_with(((1, 0.20), (2, 0.21), (4, 0.60), (8, 1.2)))
    probes = 0
    for _ in range(WIDTH_PROBE_GAP * 7):
        decision = policy.verify_chain(1, nodes=8)
        policy.commit(decision)
        if decision.nodes == 3:
            probes += 1
            policy.costs.observe_pass(4, 0.58)  # still expensive on this hardware
        else:
            policy.costs.observe_pass(2, 0.21)
    assert policy.chain_length([0.9] * 8) == 1
    assert probes == 3  # after 64, then 128, then 256 more passes (the gap doubles)


def test_a_request_where_lookup_keeps_missing_stops_verifying_it():
    policy = policy_with(CPU_COSTS)
    for i in range(40):  # long run: the first token is kept half the time
        policy.acceptance.observe_span(evidence=2, proposed=1, accepted=i % 2)
    policy.acceptance.begin_request()
    assert policy.chain_length(span_of(policy, 2, n=4)) >= 1
    for _ in range(4):  # this request: four misses in a row
        policy.acceptance.observe_span(evidence=2, proposed=1, accepted=0)
    assert policy.chain_length(span_of(policy, 2, n=4)) == 0
    policy.acceptance.begin_request()  # the next request starts from the long-run rate again
    assert policy.acceptance.span_rates(2)[0] > 0.4


@pytest.mark.parametrize(
    "rates", [[], [0.5], [0.9, 0.3, 1.0, 0.6], [0.2] * 7, [1.0, 1.0, 0.0, 0.8]]
)
def test_kept_moments_are_those_of_the_kept_count(rates):
    """The count's distribution written out: K = m when the first m are kept and the next is
    not (K = k when all are)."""
    probability, kept = [], 1.0
    for m in range(len(rates) + 1):
        stops = 1.0 - rates[m] if m < len(rates) else 1.0
        probability.append(kept * stops)
        kept *= rates[m] if m < len(rates) else 0.0
    mean = sum(m * p for m, p in enumerate(probability))
    variance = sum(m * m * p for m, p in enumerate(probability)) - mean * mean
    assert sum(probability) == pytest.approx(1.0)
    assert kept_moments(rates) == pytest.approx((mean, variance), abs=1e-12)
    assert kept_moments(rates)[0] == pytest.approx(expected_tokens(rates) - 1.0)


def test_riders_fill_no_width_whose_cost_is_a_guess():
    """Past the widest measured width the cost is guessed flat within a bucket (so that a
    chain gets tried there): other branches do not ride along on that guess. Where the wider
    widths were measured cheap (a GPU), they do."""
    cpu = policy_with(((1, 0.080), (2, 0.091), (4, 0.149), (8, 0.203), (17, 0.318)))
    assert cpu.costs.price(25) == cpu.costs.price(17)  # the guess
    assert cpu.width(16, nodes=30) == 16
    gpu = policy_with(FLAT_COSTS)
    assert gpu.width(16, nodes=30) > 16  # measured up to 32 and near flat


def test_pass_prices_are_kept_per_thread_count():
    """A busy spell (fewer threads) learns its own prices from the quiet ones, and the quiet
    prices are still there when it ends."""
    costs = PassCosts()
    costs.use_threads(2)
    costs.observe_pass(1, 0.10)
    costs.observe_pass(4, 0.15)
    costs.draft_step_s.add(0.03)
    costs.use_threads(1)  # first time on one thread: starts from the two-thread prices
    assert costs.price(1) == pytest.approx(0.10) and costs.draft_step_s.value == 0.03
    for _ in range(30):
        costs.observe_pass(1, 0.20)
        costs.observe_pass(4, 0.40)
    assert costs.price(4) == pytest.approx(0.40, rel=0.01)
    costs.use_threads(2)
    assert (costs.price(1), costs.price(4)) == (pytest.approx(0.10), pytest.approx(0.15))
    costs.use_threads(1)
    assert costs.price(4) == pytest.approx(0.40, rel=0.01)
