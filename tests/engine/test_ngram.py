"""N-gram prompt lookup: longest match first, most recent first, never the pattern itself."""

from codespec.engine import NgramProposer


def test_longest_match_wins():
    ng = NgramProposer(max_ngram=3, min_ngram=1, span=3)
    #          0  1  2  3  4  5  6  7  8  9
    context = [1, 2, 3, 7, 7, 9, 3, 8, 2, 3]
    # "2 3" occurs at 1 (-> 7 7 9); "3" alone also at 6 (-> 8 ...). The 2-gram wins.
    assert [c.tokens for c in ng.lookup(context, 8)] == [[7, 7, 9]]


def test_most_recent_match_first():
    ng = NgramProposer(max_ngram=2, min_ngram=2, span=2, branches=2)
    context = [5, 6, 1, 1, 5, 6, 2, 2, 5, 6]
    assert [c.tokens for c in ng.lookup(context, 8)] == [[2, 2], [1, 1]]


def test_no_match_and_no_self_match():
    ng = NgramProposer(min_ngram=2)
    assert ng.lookup([1, 2, 3, 4], 8) == []
    assert ng.lookup([1, 2], 8) == []


def test_span_adapts():
    ng = NgramProposer(span=4, max_span=6)
    ng.observe(4, 4)
    assert ng.span == 6
    ng.observe(6, 6)
    assert ng.span == 6
    ng.observe(6, 1)
    assert ng.span == 5


def test_each_span_says_how_the_matches_vote_on_its_first_token():
    ng = NgramProposer(max_ngram=1, min_ngram=1, span=2, branches=3)
    # "4" was followed by 5 twice: both matches agree
    assert [(c.tokens, c.support) for c in ng.lookup([4, 5, 6, 4, 5, 7, 4], 8)] == [
        ([5, 7], "unanimous"),
        ([5, 6], "unanimous"),
    ]
    # one earlier "4": nobody else to agree or not
    assert [c.support for c in ng.lookup([4, 5, 6, 4], 8)] == ["single"]
    # "4" went on with 5, then with 9: each span's first token is disputed
    spans = ng.lookup([4, 5, 6, 4, 9, 4], 8)
    assert [(c.tokens, c.support) for c in spans] == [([9, 4], "split"), ([5, 6], "split")]
