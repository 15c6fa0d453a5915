"""What the engine worker runs: a place in a document (where a prompt is wanted, and how to
build it), and the two kinds of work there: a completion request someone waits for (``Job``) and
a warm-up nobody waits for (``WarmJob``). Each carries the stop signal that gives the engine up
(``engine/stop.py``).

``jobs.py`` builds a place once (``place_at``) and the work from it (``Job.at``, ``WarmJob.at``);
the worker builds a warm-up after a request from the request itself.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from typing import Any, Self

from ..client_stops import ClientStops
from ..completion import CompletionOptions
from ..engine import StopSignal
from ..nextedit.history import EditHistory
from ..nextedit.suggest import NextEdit
from ..stats.record import Timing, new_id
from ..stops import Cursor


@dataclass(frozen=True)
class NextEditAsk:
    """What a next-edit request computes from (``nextedit/suggest.py``): the document's text
    and line then, a copy of its edit history, and how sure the model must be of an edit for
    it to be shown (the session's ``nextEditEagerness``)."""

    text: str
    line: int
    history: EditHistory
    least_confidence: float = 0.0


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


@dataclass
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
    anchors: dict | None = None  # the session's prompt anchors by document (see prompt.Anchor)
    language: str = ""  # the document's languageId, for the stats
    context: tuple[str, ...] = ()  # the context sources its prompt holds, for the stats
    corpora: tuple = ()  # token corpora the engine may draft from (``engine/corpus.py``)
    # a prompt the client built itself, continued as it is (``completion.complete_raw``);
    # None: a completion at ``cursor``
    raw_prompt: str | None = None
    client_stops: ClientStops | None = None  # the client's own stop conditions
    client: str = ""  # which client asked (an HTTP client's name), for the stats
    next_edit: NextEditAsk | None = None  # a next-edit request, not a completion
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
        return cls(**{**where, **own})  # (the work's own win: a place's ``next_edit``)

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

    def at_same_place(self, other: Place) -> bool:
        """Same session and document, same cursor line (typing there extends the prompt: see
        ``prompt.Anchor``)."""
        same_document = (other.session, other.uri) == (self.session, self.uri)
        return same_document and other.line == self.line


@dataclass
class Job(Place):
    """A completion request: someone waits for its future."""

    on_text: Callable[[str], None] | None = None
    signal: JobStop = field(default_factory=JobStop)  # pyright: ignore[reportIncompatibleVariableOverride]  (a narrower StopSignal, set once)
    future: Future = field(default_factory=Future)
    id: str = field(default_factory=new_id)  # the suggestion's id, if it becomes one
    superseded: bool = False  # cancelled because a newer request for the document came
    yielded: bool = False  # stopped after its share of the worker: another session waited
    share_timer: Any = None  # the threading.Timer that ends its share, once one is due
    timing: Timing = field(default_factory=Timing)  # arrived: when it was submitted
    found: NextEdit | None = None  # a next-edit request's edits, once it ran


@dataclass
class WarmJob(Place):
    """Prefill the prompt for a likely next request, and compute ahead the next keystrokes
    there (``lookahead.py``); nobody waits for it."""

    shown_next: str = ""  # the ghost text's first character there: typing it needs no model
