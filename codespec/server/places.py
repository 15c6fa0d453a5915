"""Where the engine worker's work is: a place in a document (where a prompt is wanted, and how
to build it), the slot its prompt anchor is kept in, and the stop signal a request carries.

What is done at a place, and how, is its kind's (``kinds.py``). ``jobs.py`` builds a place once
(``place_at``) and the work from it (``CompletionJob.at``, ``WarmJob.at``...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Self

from ..client_stops import ClientStops
from ..completion import CompletionOptions
from ..engine import StopSignal
from ..nextedit.history import EditHistory
from ..prompt import Anchor
from ..stops import Cursor


@dataclass(eq=False)
class AnchorSlot:
    """The prompt last built at one document (``prompt.Anchor``), so that typing there extends
    it. The document's record holds the slot and each job at the document a reference to it:
    the worker's thread writes it, the session never reads it."""

    anchor: Anchor | None = None


@dataclass(frozen=True)
class NextEditAsk:
    """What a next-edit request computes from (``nextedit/suggest.py``): the document's text
    and line then, a copy of its edit history, and how much an edit needs for it to be shown
    (the session's ``nextEditEagerness``)."""

    text: str
    line: int
    history: EditHistory
    least_confidence: float = 0.0
    # whether the edit must follow from the recent edits (``nextedit/guard.py``: not at the
    # eagerness ``high``, where the user asked for every edit the model offers that keeps
    # the file whole)
    explained: bool = True


class JobStop(StopSignal):
    """A job's stop signal that remembers how many target passes had run when it was cancelled
    (``codespec/stats`` reports how soon a cancel took effect)."""

    def __init__(self) -> None:
        super().__init__()
        self.passes_at_cancel: int | None = None
        self.probe: Callable[[], int] = lambda: 0  # reads the engine's target pass counter

    def cancel(self, keep_chunk: bool = False) -> None:
        if not self.cancelled:
            self.passes_at_cancel = self.probe()
        super().cancel(keep_chunk)


@dataclass(eq=False)
class Place:
    """Where in which document a prompt is wanted, and how to build it."""

    session: int
    uri: str
    edits: int  # the document's edit count when the work was asked (``Document.edits``)
    cursor: Cursor
    options: CompletionOptions
    path: str = ""
    extra_files: tuple[tuple[str, str], ...] = ()
    current_edits: Callable[[], int | None] = lambda: None  # the document's count now
    anchor: AnchorSlot | None = None  # the document's prompt anchor (None: none is kept)
    language: str = ""  # the document's languageId, for the stats
    context: tuple[str, ...] = ()  # the context sources its prompt holds, for the stats
    corpora: tuple = ()  # token corpora the engine may draft from (``engine/corpus.py``)
    client_stops: ClientStops | None = None  # the client's own stop conditions
    client: str = ""  # which client asked (an HTTP client's name), for the stats
    # when the work gives the engine up (``engine/stop.py``; set through ``stop``)
    signal: StopSignal = field(default_factory=StopSignal)
    # the cursor's 0-based line, counted once here: ``at_same_place`` runs under the worker's
    # lock, where counting a large document's newlines would hold up every other caller
    line: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.line = self.cursor.prefix.count("\n")

    @classmethod
    def at(cls, place: Place, **own: Any) -> Self:
        """This kind of work at ``place``: the place's fields copied by name, the work's own
        (``on_text``, ``shown_next``...) given; a fresh stop signal either way."""
        where = {f.name: getattr(place, f.name) for f in fields(Place) if f.init}
        del where["signal"]
        return cls(**{**where, **own})

    @property
    def anchored(self) -> Anchor | None:
        return self.anchor.anchor if self.anchor is not None else None

    def keep_anchor(self, anchor: Anchor | None) -> None:
        """The prompt a request at this place uses next (kept where the place keeps one)."""
        if self.anchor is not None and anchor is not None:
            self.anchor.anchor = anchor

    def stale(self) -> bool:
        """Whether the document was edited since the work was asked (its result would be for
        text that no longer exists)."""
        current = self.current_edits()
        return current is not None and current > self.edits

    def stop(self, wanted_by: Place | None = None) -> None:
        """Stop for ``wanted_by`` (a newer request or warm-up; None: nobody needs the work):
        let a running prefill chunk finish only when that one is at the same place, whose
        prompt the chunk is computing."""
        same_place = wanted_by is not None and self.at_same_place(wanted_by)
        self.signal.cancel(keep_chunk=same_place)

    def same_document(self, other: Place) -> bool:
        return (other.session, other.uri) == (self.session, self.uri)

    def at_same_place(self, other: Place) -> bool:
        """Same session and document, same cursor line (typing there extends the prompt: see
        ``prompt.Anchor``)."""
        return self.same_document(other) and other.line == self.line
