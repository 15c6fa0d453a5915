"""One pass's proposal: the proposers' candidates merged into a token tree the policy sizes,
and what the loop learns from the target's verdict on it.

``build`` asks the lookup proposers for spans (the longest match leads the tree's main chain),
lets the draft continue the leading span where the policy says it pays, and keeps the first k
tokens of the main chain that maximise expected tokens per second (``policy.py``), plus what
fits beside them at no extra cost. ``learn`` then tells each proposer and the policy how far
the target followed them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .acceptance import kept_moments
from .policy import SpeculationPolicy
from .proposers import DRAFT, LOOKUP_SOURCES, NGRAM, SOURCES, Kind, Proposals, Proposer, Sampling
from .request import GenerationParams, GenerationStats, Output
from .slots import common_prefix_len
from .tree import Candidate, TokenTree

ROOT = -1  # the tree's root (the pending token), as ``TokenTree.parents`` names it


@dataclass
class Proposal:
    """One pass's token tree and what the loop learns from it once the target has judged it."""

    tree: TokenTree
    # per lookup source that offered spans (``LOOKUP_SOURCES``), in the tree's order: its
    # best span's match length and how the other matches voted on its first token (ngram.py)
    spans: dict[str, tuple[int, str]] = field(default_factory=dict)
    # the draft's part: the node it grew below (ROOT: the root) and what its steps cost; None
    # when it did not run, or when the node it grew below is not verified in this pass
    draft_under: int | None = None
    draft: Proposals | None = None
    bet: list[float] = field(default_factory=list)  # predicted rates of the verified main chain


def build(
    policy: SpeculationPolicy,
    max_nodes: int,
    active: list[Proposer],
    prompt: list[int],
    out: Output,
    params: GenerationParams,
    sampling: Sampling,
) -> Proposal:
    """Build this pass's token tree from the ``active`` proposers, sized by the policy (at
    most ``max_nodes`` nodes, and none past the request's token limit)."""
    remaining = params.max_tokens - len(out.tokens)
    proposal = Proposal(TokenTree())
    # A pass emits at most depth + 1 tokens: never propose past the token limit.
    cap = min(policy.max_nodes_limit, max_nodes, remaining - 1)
    if not active or cap <= 0:
        return proposal
    tree = proposal.tree
    offers = _look_up(active, prompt, out.tokens, cap, params, sampling)
    # The longer match leads (it becomes the main chain); on a tie the prompt's own lookup
    # does, its text being nearer the cursor.
    for source in sorted(offers, key=lambda source: -offers[source][0].evidence):
        for candidate in offers[source]:
            tree.add(candidate, cap)
        proposal.spans[source] = (offers[source][0].evidence, offers[source][0].support)
    book = policy.acceptance
    span_rates = {
        source: book.span_rates(*found, source=source)
        for source, found in (proposal.spans or {NGRAM: (0, "")}).items()
    }
    lead_rates = next(iter(span_rates.values()))
    for drafter in (p for p in active if p.kind == Kind.DRAFT):
        context = drafter.context(prompt, out.tokens, params)
        _draft(policy, drafter, proposal, context, cap, remaining, sampling, lead_rates)
    # Verify the k* first tokens of the main chain that pay (policy.py), plus what fits
    # beside them in the same width bucket at no extra cost.
    chain = tree.main_chain()
    rates = [
        _node_rate(tree.sources[i], depth, span_rates, book.draft.rate)
        for depth, i in enumerate(chain)
    ]
    # ... and none past where the stop rules would end generation (wasted width).
    verify = policy.decide(rates, len(tree), out.horizon([tree.tokens[i] for i in chain]))
    policy.commit(verify)
    k, width = verify.chain, verify.nodes
    keep = chain[:k] + [i for i in range(len(tree)) if i not in chain][: max(0, width - k)]
    keep = [i for i in keep if all(p in keep for p in tree.path_to(i)[:-1])]
    proposal.tree, index = tree.subset(keep)
    if proposal.draft_under not in (None, ROOT):
        proposal.draft_under = index.get(proposal.draft_under)
    if proposal.draft_under is None:
        proposal.draft = None
    proposal.bet = rates[:k]
    return proposal


def _look_up(
    active: list[Proposer],
    prompt: list[int],
    generated: list[int],
    cap: int,
    params: GenerationParams,
    sampling: Sampling,
) -> dict[str, list[Candidate]]:
    """The lookup proposers' spans, by source, each over the context it reads."""
    offers: dict[str, list[Candidate]] = {}
    for proposer in active:
        if proposer.kind == Kind.LOOKUP:
            context = proposer.context(prompt, generated, params)
            offers[proposer.name] = proposer.propose(context, cap, sampling).candidates
    return {source: found for source, found in offers.items() if found}


def _draft(
    policy: SpeculationPolicy,
    drafter: Proposer,
    proposal: Proposal,
    context: list[int],
    cap: int,
    remaining: int,
    sampling: Sampling,
    lead_rates: tuple[float, float],
) -> None:
    """Let the draft continue the leading lookup span (or start at the root) when the
    policy says it pays. It grows from a leaf, so its sampled tokens never share a node with
    a deterministic proposal."""
    tree = proposal.tree
    looked_up = [i for i in tree.main_chain() if tree.sources[i] & set(LOOKUP_SOURCES)]
    plan = policy.plan_draft(len(looked_up), drafter.lag(context), lead_rates)
    policy.commit(plan)
    if not plan.use_draft:
        return
    under = looked_up[-1] if looked_up else ROOT
    depth = tree.depths[under] if under != ROOT else 0
    room = min(plan.draft_len, cap - len(tree), remaining - 1 - depth)
    if room <= 0:
        return
    prefix = [tree.tokens[i] for i in tree.path_to(under)]
    drafted = drafter.propose(context + prefix, room, sampling)
    for candidate in drafted.candidates:
        tree.add(candidate, cap, under=under)
    proposal.draft_under, proposal.draft = under, drafted


def learn(
    policy: SpeculationPolicy,
    active: list[Proposer],
    proposal: Proposal,
    path: list[int],
    stats: GenerationStats,
) -> None:
    """What a verified pass teaches: the request's counters, each proposer's record of how far
    the target followed it, the policy's acceptance rates and draft costs, and the bet."""
    tree = proposal.tree
    stats.target_passes += 1
    stats.accepted_per_pass.append(len(path))
    kept = set(path)
    by_name = {p.name: p for p in active}
    for source in SOURCES:
        nodes = [i for i, s in enumerate(tree.sources) if source in s]
        stats.proposed[source] += len(nodes)
        stats.accepted[source] += sum(1 for i in nodes if i in kept)
    # Lookups: judge each source's best branch (its first child chain) by how far the path
    # followed it.
    for source, (evidence, support) in proposal.spans.items():
        first_branch = _first_chain(tree, source)
        if first_branch:
            taken = sum(1 for i in first_branch if i in kept)
            by_name[source].observe(len(first_branch), taken)
            policy.acceptance.observe_span(
                evidence, len(first_branch), taken, support, source=source
            )
    if proposal.draft is not None:
        stats.draft_passes += 1
        stats.draft_forwards += proposal.draft.forwards
        draft_nodes = [i for i, s in enumerate(tree.sources) if DRAFT in s]
        reached = proposal.draft_under == ROOT or proposal.draft_under in kept
        # Tokens the target never got to judge (the path broke off earlier) are not evidence.
        proposed = len(draft_nodes) if reached else 0
        taken = sum(1 for i in draft_nodes if i in kept) if reached else 0
        if DRAFT in by_name:
            by_name[DRAFT].observe(proposed, taken)
        policy.observe_draft(proposal.draft.step_s, proposed, taken)
    if proposal.bet:  # kept: how far the path followed the chain the bet was on
        chain = tree.main_chain()[: len(proposal.bet)]
        mean, variance = kept_moments(proposal.bet)
        stats.bets.append((proposal.bet[0], mean, variance, common_prefix_len(path, chain)))


def _node_rate(
    sources: set[str], depth: int, span_rates: dict[str, tuple[float, float]], draft_rate: float
) -> float:
    """The predicted acceptance of a main-chain node: its leading lookup source's rate at that
    depth (the first token's, or a later one's), else the draft's."""
    for source, (first, then) in span_rates.items():
        if source in sources:
            return first if depth == 0 else then
    return draft_rate


def _first_chain(tree: TokenTree, source: str) -> list[int]:
    """Nodes along the first-child chain from the root that carry ``source``."""
    chain, node = [], ROOT
    while True:
        kids = [k for k in tree.children(node) if source in tree.sources[k]]
        if not kids:
            return chain
        node = kids[0]
        chain.append(node)
