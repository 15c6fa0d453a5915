"""What the user did with each suggestion: shown, accepted, partially accepted or rejected.

Two sources, one rule book (``Ledger``, one per session, pure: no I/O, the caller passes a
``record(id, fields)`` callback):

* explicit events from the client (``workspace/executeCommand``, see ``lsp/PROTOCOL.md``):
  ``codespec.didShow``, ``codespec.didAccept`` (also the command every inline item carries,
  so a generic LSP client that knows nothing of codespec reports accepts),
  ``codespec.didPartialAccept`` (with the number of characters), ``codespec.didDismiss``;
* inference from the document: after an edit, the text at the suggestion's place is either the
  whole suggestion (accepted), a beginning of it (still in progress: typed or accepted through),
  or something else (the user departed from it: rejected, or partially accepted when a
  beginning of it had been taken).

An explicit verdict beats an inferred one; each suggestion has one row and is counted once.
Events for unknown or expired ids are ignored (a debug line), never an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("codespec.stats")
EXPIRE_S = 600.0  # a suggestion nobody judged within this long was left unaccepted
COMMANDS = (
    "codespec.didShow",
    "codespec.didAccept",
    "codespec.didPartialAccept",
    "codespec.didDismiss",
)


@dataclass
class Suggestion:
    id: str
    uri: str
    head: str  # the document before the cursor when it was asked for (or its window) ...
    tail: str  # ... and after it
    text: str
    head_start: int = 0  # where ``head`` starts in the document
    tail_after: int = 0  # how many characters follow ``tail``
    shown: bool = False
    verdict: str | None = None  # accepted | partial | rejected
    source: str | None = None  # explicit | inferred
    accepted_chars: int = 0
    taken: int = 0  # inferred: how much of it the document holds now
    created: float = field(default_factory=time.monotonic)


class Ledger:
    """Suggestions of one session not judged for good yet, newest per document."""

    def __init__(
        self,
        record: Callable[[str, dict], None],
        client_reports_shown: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.record = record
        # a client that sends codespec.didShow says what it displayed; for any other client an
        # answered suggestion counts as shown
        self.client_reports_shown = client_reports_shown
        self.clock = clock
        self.open: dict[str, Suggestion] = {}  # id -> suggestion still open to events
        # told of each suggestion taken in full or in part, once, when it is judged for good
        # (the workspace drafter learns from it: ``workspace/accepted.py``)
        self.on_taken: Callable[[Suggestion], None] | None = None
        self.by_uri: dict[str, str] = {}  # uri -> id of its newest suggestion

    # -- what the server did ------------------------------------------------------------------

    def offered(self, suggestion: Suggestion) -> None:
        """A suggestion was answered; the previous one for its document is over."""
        self.expire()
        previous = self.by_uri.get(suggestion.uri)
        if previous is not None and previous != suggestion.id:
            self._finish(self.open.get(previous))
        suggestion.created = self.clock()
        self.open[suggestion.id] = suggestion
        self.by_uri[suggestion.uri] = suggestion.id
        if not self.client_reports_shown:
            self._show(suggestion)

    def shown(self, suggestion_id: object) -> None:
        """A client showed one suggestion (a next edit's ``didShowInlineEdit``): unlike
        ``codespec.didShow`` it says nothing of what the client reports of the others."""
        suggestion = self.open.get(suggestion_id) if isinstance(suggestion_id, str) else None
        if suggestion is None:
            log.debug("a shown event for an unknown or expired suggestion: ignored")
            return
        self._show(suggestion)

    def known(self, suggestion_id: str) -> bool:
        return suggestion_id in self.open

    # -- what the client said -----------------------------------------------------------------

    def explicit(self, command: str, arguments: list) -> None:
        """One of ``COMMANDS`` with ``[id]`` or ``[id, characters]``."""
        self.expire()
        suggestion_id = arguments[0] if arguments else None
        suggestion = self.open.get(suggestion_id) if isinstance(suggestion_id, str) else None
        if suggestion is None:
            log.debug("%s for an unknown or expired suggestion: ignored", command)
            return
        if command == "codespec.didShow":
            self.client_reports_shown = True
            self._show(suggestion)
        elif command == "codespec.didAccept":
            self._judge(suggestion, "accepted", len(suggestion.text), "explicit")
        elif command == "codespec.didPartialAccept":
            chars = arguments[1] if len(arguments) > 1 else None
            if not isinstance(chars, int) or isinstance(chars, bool) or chars <= 0:
                log.debug("didPartialAccept without a positive character count: ignored")
                return
            total = min(suggestion.accepted_chars + chars, len(suggestion.text))
            verdict = "accepted" if total >= len(suggestion.text) else "partial"
            self._judge(suggestion, verdict, total, "explicit")
        elif command == "codespec.didDismiss":
            if suggestion.source != "explicit":  # a dismiss after a partial accept keeps it
                self._judge(suggestion, "rejected", 0, "explicit")
            self._close(suggestion)

    # -- what the document shows --------------------------------------------------------------

    def document_changed(self, uri: str, text: str) -> None:
        """Judge the document's newest suggestion by the text now at its place."""
        self.expire()
        suggestion = self.open.get(self.by_uri.get(uri, ""))
        if suggestion is None:
            return
        taken = _taken(suggestion, text)
        if taken is None:  # the user departed from it
            self._finish(suggestion)
        elif taken == len(suggestion.text):
            self._judge(suggestion, "accepted", taken, "inferred")
            self._close(suggestion)
        else:
            suggestion.taken = taken

    def document_closed(self, uri: str) -> None:
        self._finish(self.open.get(self.by_uri.get(uri, "")))

    def end(self) -> None:
        """The session ended: whatever is still open was left unaccepted."""
        for suggestion in list(self.open.values()):
            self._finish(suggestion)

    def expire(self) -> None:
        now = self.clock()
        for suggestion in [s for s in self.open.values() if now - s.created > EXPIRE_S]:
            self._finish(suggestion)

    # -- rules --------------------------------------------------------------------------------

    def _show(self, suggestion: Suggestion) -> None:
        if not suggestion.shown:
            suggestion.shown = True
            self.record(suggestion.id, {"shown": 1})

    def _judge(self, suggestion: Suggestion, verdict: str, chars: int, source: str) -> None:
        if source == "inferred" and suggestion.source == "explicit":
            return  # the client said what happened: that stands
        self._show(suggestion)  # what was accepted was seen
        if (suggestion.verdict, suggestion.accepted_chars, suggestion.source) == (
            verdict,
            chars,
            source,
        ):
            return
        suggestion.verdict, suggestion.accepted_chars, suggestion.source = verdict, chars, source
        self.record(
            suggestion.id,
            {"verdict": verdict, "accepted_chars": chars, "verdict_source": source},
        )
        if verdict == "accepted":
            self._close(suggestion)

    def _finish(self, suggestion: Suggestion | None) -> None:
        """No more events will come for it: judge what is still unjudged."""
        if suggestion is None:
            return
        if suggestion.verdict is None or suggestion.source == "inferred":
            if suggestion.taken > 0:
                self._judge(suggestion, "partial", suggestion.taken, "inferred")
            elif suggestion.verdict is None and suggestion.shown:
                self._judge(suggestion, "rejected", 0, "inferred")
        self._close(suggestion)

    def _close(self, suggestion: Suggestion) -> None:
        was_open = self.open.pop(suggestion.id, None) is not None
        if was_open and suggestion.accepted_chars > 0 and self.on_taken is not None:
            self.on_taken(suggestion)
        if self.by_uri.get(suggestion.uri) == suggestion.id:
            del self.by_uri[suggestion.uri]


def _taken(suggestion: Suggestion, text: str) -> int | None:
    """How many characters of the suggestion the document holds at its place, or None when the
    text there is not a beginning of it (the user typed something else, or edited around it)."""
    head, tail = suggestion.head, suggestion.tail
    middle_start = suggestion.head_start + len(head)
    tail_start = len(text) - suggestion.tail_after - len(tail)
    if tail_start < middle_start or text[suggestion.head_start : middle_start] != head:
        return None
    if text[tail_start : tail_start + len(tail)] != tail:
        return None
    middle = text[middle_start:tail_start]
    return len(middle) if suggestion.text.startswith(middle) else None
