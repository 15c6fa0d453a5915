"""Snippets of other open documents: the window like the code above the cursor, the window
last edited, stable while typing on a line and across prompts, bounded."""

from lsprotocol import types

from codespec.server.documents import Document
from codespec.workspace import snippets
from codespec.workspace.snippets import (
    MAX_SNIPPETS,
    RECENT_S,
    WINDOW_LINES,
    Neighbour,
    SnippetMemory,
    choose_snippets,
)

IMPORTS = "".join(f"import module_{i}\n" for i in range(25))
FILLER = "".join(f"value_{i} = compute_{i}(other_{i})\n" for i in range(40))
BILLING = (
    "def charge(customer, invoice, gateway):\n"
    "    receipt = gateway.capture(invoice.total, customer.card)\n"
    "    ledger.record(customer, invoice, receipt)\n"
    "    return receipt\n"
)
PREFIX = (
    "def refund(customer, invoice, gateway):\n"
    "    receipt = gateway.reverse(invoice.total, customer.card)\n"
    "    ledger.record(customer, invoice, receipt)\n"
    "    "
)


def lines_of(text: str) -> list[str]:
    return text.split("\n")


def test_the_window_like_the_code_above_the_cursor_is_chosen():
    billing = Neighbour("billing.py", IMPORTS + FILLER + BILLING + FILLER)
    chosen = choose_snippets(PREFIX, [billing], now=0.0)
    assert len(chosen) == 1 and "gateway.capture" in chosen[0].text
    assert len(lines_of(chosen[0].text.rstrip("\n"))) <= WINDOW_LINES
    # nothing alike: nothing shown (the imports are not shown for want of anything better)
    assert choose_snippets(PREFIX, [Neighbour("other.py", IMPORTS + FILLER)], now=0.0) == []


def test_the_last_edit_is_shown_while_recent():
    text = IMPORTS + FILLER + FILLER
    edited = Neighbour("models.py", text, edited_line=70, edited_at=100.0)
    [snippet] = choose_snippets(PREFIX, [edited], now=100.0 + RECENT_S / 2)
    assert snippet.start_line <= 70 < snippet.start_line + WINDOW_LINES
    assert choose_snippets(PREFIX, [edited], now=100.0 + RECENT_S * 2) == []


def test_typing_on_the_cursor_line_does_not_change_the_choice():
    neighbours = [
        Neighbour("billing.py", IMPORTS + BILLING + FILLER),
        Neighbour("shipping.py", FILLER + "def ship(order, courier):\n    courier.send(order)\n"),
    ]
    first = choose_snippets(PREFIX, neighbours, now=0.0)
    for typed in ("r", "return", "return order.ship(courier) + value_3"):
        assert choose_snippets(PREFIX + typed, neighbours, now=0.0) == first


def test_the_last_prompts_snippet_keeps_its_place_while_it_still_fits():
    old = Neighbour("billing.py", IMPORTS + BILLING)
    memory = SnippetMemory()
    [kept] = choose_snippets(PREFIX, [old], now=0.0, memory=memory)
    # the code above the cursor drifts: a better window appears elsewhere, and the old one
    # still scores above the keep threshold: it stays first, the new one follows
    drifted = PREFIX.replace("    ", "    audit.log(customer)\n    ", 1)
    better = Neighbour("refunds.py", PREFIX + "audit.log(customer)\n")
    chosen = choose_snippets(drifted, [old, better], now=0.0, memory=memory)
    assert chosen[0].key == kept.key and [s.path for s in chosen] == ["billing.py", "refunds.py"]
    # gone below it: replaced
    unrelated = "def f(a_b):\n    return a_b\n" * 3 + "    "
    chosen = choose_snippets(unrelated, [old, better], now=0.0, memory=memory)
    assert kept.key not in [s.key for s in chosen]


def test_bounded_per_document_and_in_all():
    many = [Neighbour(f"b{i}.py", BILLING + FILLER + BILLING) for i in range(5)]
    chosen = choose_snippets(PREFIX, many, now=0.0)
    assert len(chosen) == MAX_SNIPPETS and len({s.path for s in chosen}) == MAX_SNIPPETS
    huge = Neighbour("huge.py", BILLING * (snippets.MAX_DOCUMENT_LINES // 4 + 1))
    assert choose_snippets(PREFIX, [huge], now=0.0) == []
    assert choose_snippets(PREFIX, [Neighbour("empty.py", "")], now=0.0) == []


def test_a_document_remembers_where_it_was_last_edited():
    doc = Document("file:///a.py", "one\ntwo\nthree\nfour\n")
    assert doc.edited_line() is None
    at_three = types.Range(start=types.Position(2, 0), end=types.Position(2, 5))
    doc.apply(types.TextDocumentContentChangePartial(range=at_three, text="THREE"), "utf-16")
    assert doc.edited_line() == 2 and doc.last_edit is not None
    doc.apply(
        types.TextDocumentContentChangeWholeDocument(text="one\ntwo\nTHREE\nfour\nfive\n"),
        "utf-16",
    )
    assert doc.edited_line() == 4  # a whole-text change: where it first differs
