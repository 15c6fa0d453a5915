"""From an HTTP client's ``Ask`` to a job on the daemon's worker, and from its result to an
``Answer``: the same worker, scheduler, stop rules and stats as the LSP sessions.

Each client (its name, from the User-Agent) is a session of the scheduler, and each endpoint a
document: a client's newer request supersedes its older one still running there, as
llama-server's clients expect while the user types. A client's prompt anchors are kept, so
typing at a place extends the cached prompt as it does for an editor session.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...client_stops import ClientStops
from ...languages import GENERIC, has_syntax_error, language_for
from ...models import ModelError, gguf_file
from ...models.gguf_info import chat_template
from ...settings import completion_options
from ...sources import CLIENT_CONTEXT
from ...stats.record import client_label
from ...stops import CLOSERS, QUOTES, Cursor, decide_mode
from ...tokenizer import break_specials
from ..config import Settings
from ..jobs import apply_multiline_policy
from ..kinds import CompletionJob, Job, RawPromptJob, RawWarmJob, WarmJob
from ..places import AnchorSlot, Place
from ..view import DaemonView
from ..worker import ModelUnavailable
from .answers import Answer
from .chat import chat_prompt
from .wire import MAX_PREDICT, Ask, fim_parts

if TYPE_CHECKING:
    from ...completion import CompletionResult
    from ...runtime import LoadedPair

MAX_CLIENTS = 64  # client sessions kept; past this the oldest is forgotten
_session_ids = itertools.count(1 << 30)  # apart from the LSP sessions' ids


@dataclass
class ClientSession:
    """What the front keeps per HTTP client: its scheduler session and a prompt anchor per
    endpoint (each endpoint is a document to the scheduler)."""

    id: int = field(default_factory=lambda: next(_session_ids))
    anchors: dict[str, AnchorSlot] = field(default_factory=dict)

    def anchor(self, endpoint: str) -> AnchorSlot:
        return self.anchors.setdefault(endpoint, AnchorSlot())


def client_name(user_agent: str | None, endpoint: str) -> str:
    """The stats' name for a client: its User-Agent's first product (``curl`` for llama.vim,
    ``axios`` for llama.vscode, ``Zed``...) and the endpoint it used."""
    product = (user_agent or "").split(" ", 1)[0].split("/", 1)[0]
    return client_label(f"{product} {endpoint}" if product else endpoint)


class Front:
    """Builds and reads the jobs of HTTP requests."""

    def __init__(self, daemon: DaemonView, settings: Settings) -> None:
        self.daemon = daemon
        self.worker = daemon.worker
        self.settings = settings
        self.model_ready = daemon.model_ready
        self.loaded = daemon.loaded  # the model pair once loaded (None until then, or if it failed)
        self.clients: dict[str, ClientSession] = {}

    def session(self, client: str) -> ClientSession:
        session = self.clients.pop(client, None) or ClientSession()
        self.clients[client] = session  # (newest last)
        while len(self.clients) > MAX_CLIENTS:
            oldest = next(iter(self.clients))
            self.worker.drop_session(self.clients.pop(oldest).id)
        return session

    def resolve(self, ask: Ask) -> Ask:
        """A chat becomes the prompt its model's template makes of it; a bare FIM prompt in
        the loaded model's own markers becomes the cursor it describes (codespec's prompt,
        stop rules and prompt reuse then apply); anything else as it is."""
        pair = self.loaded()
        if ask.chat:
            return self._chat(ask, pair)
        if ask.prompt is None or pair is None:
            return ask
        marks = pair.manifest.tokens
        parts = fim_parts(ask.prompt, marks.fim_prefix, marks.fim_suffix, marks.fim_middle)
        if parts is None:
            return ask
        return replace(ask, prompt=None, prefix=parts[0], suffix=parts[1])

    def _chat(self, ask: Ask, pair: LoadedPair | None) -> Ask:
        if pair is None:
            raise ModelUnavailable("the model is not loaded yet (GET /health says when)")
        tokenizer = pair.tokenizer
        names = {"bos_token": "", "eos_token": ""}
        for name, token in (("bos_token", None), ("eos_token", tokenizer.eos_token_id)):
            names[name] = (
                (tokenizer.convert_ids_to_tokens(token) or "") if token is not None else ""
            )
        prompt = chat_prompt(
            self._chat_template(pair),
            ask.messages,
            lambda text: break_specials(tokenizer, text),
            names,
        )
        return replace(ask, prompt=prompt, max_tokens=ask.max_tokens or MAX_PREDICT)

    @staticmethod
    def _chat_template(pair: LoadedPair) -> str | None:
        """The template the target's tokenizer folder names, else the one its GGUF carries
        (None for a model without one)."""
        if pair.tokenizer.chat_template is not None:
            return pair.tokenizer.chat_template
        try:
            return chat_template(gguf_file(pair.manifest.target, pair.manifest.install_hint))
        except ModelError:
            return None

    def place(self, ask: Ask, client: str) -> Place:
        """Where the request asks: a cursor between its prefix and suffix, or its own prompt."""
        settings = self.settings
        session = self.session(client)
        options = completion_options(settings, invoked=False, temperature=ask.temperature)
        options = replace(options, seed=ask.seed)
        if ask.max_tokens is not None:
            options = replace(
                options,
                max_tokens=ask.max_tokens,
                line_max_tokens=min(options.line_max_tokens, ask.max_tokens),
            )
        stops = ClientStops(ask.stop_words, ask.min_indent, ask.predict_s)
        language = language_for(ask.language, ask.path) if ask.prompt is None else GENERIC
        cursor = Cursor(ask.prefix, ask.suffix, language)
        extra = self.daemon.outbound(ask.extra_files, settings.remote_workspace_context)
        if ask.prompt is None:
            syntax = decide_mode(cursor, False, settings.complete_mid_word)
            options.mode = apply_multiline_policy(syntax, settings.multiline)
        return Place(
            session=session.id,
            uri=f"http:{ask.endpoint}",
            edits=0,
            cursor=cursor,
            options=options,
            path=ask.path or "",
            extra_files=extra,
            anchor=session.anchor(ask.endpoint),
            language=ask.language or ("raw" if ask.prompt is not None else language.name),
            context=(CLIENT_CONTEXT,) if extra else (),
            client_stops=stops if stops else None,
            client=client,
        )

    def submit(self, ask: Ask, client: str, on_text: Callable[[str], None] | None) -> Job:
        """The request as a job on the worker (its future answers it)."""
        place = self.place(ask, client)
        job: Job
        if ask.prompt is not None:
            job = RawPromptJob.at(place, on_text=on_text, prompt=ask.prompt)
        else:
            job = CompletionJob.at(place, on_text=on_text)
        self.worker.submit(job)
        return job

    def prepare(self, ask: Ask, client: str) -> None:
        """``n_predict: 0``: compute the prompt ahead (a warm-up), as llama.vim asks while the
        user is idle so that its next request finds ``input_extra`` cached."""
        place = self.place(ask, client)
        if ask.prompt is not None:
            self.worker.warm(RawWarmJob.at(place, prompt=ask.prompt))
        else:
            self.worker.warm(WarmJob.at(place))

    def model_label(self) -> str:
        pair = self.loaded()
        return pair.model_label if pair is not None else "codespec"

    def answer(self, job: Job, result: CompletionResult | None) -> Answer:
        """What the client is told of a finished job."""
        label = self.model_label()
        if result is None or result.stats is None:
            return Answer("", stop_type="eos" if result is not None else "limit", model=label)
        stats = result.stats
        stop_type, word = "eos", ""
        if stats.stop_reason in ("max_tokens", "cancelled", "yielded"):
            stop_type = "limit"
        elif stats.stop_reason == "stop_rule" and job.client_stops is not None:
            stop_type, word = job.client_stops.reason(result.text) or ("eos", "")
        return Answer(
            result.text,
            stop_type=stop_type,
            stopping_word=word,
            prompt_tokens=result.prompt_tokens,
            cached_tokens=stats.cached_tokens,
            predicted_tokens=len(result.tokens),
            prompt_ms=1000 * stats.prefill_s,
            predicted_ms=1000 * max(stats.total_s - stats.prefill_s, 0.0),
            truncated=result.truncated,
            tokens_per_pass=stats.tokens_per_pass,
            model=label,
        )


def streamable(
    text: str, ask: Ask, stops: ClientStops | None, parses: Callable[[str], bool] | None = None
) -> str:
    """The part of a growing completion a stream may send now: what the finished completion
    will surely start with. Not the end that may still become a stop word; at a cursor, not
    the end that shaping may drop (trailing space, and closing brackets, quotes and separators
    that may be already after the cursor: ``stops.shape``); and in a document that parsed
    before (``parses``: whether the document parses with a completion there), only complete
    lines it parses with: shaping cuts a completion back to its longest such line prefix (a
    single line: all or nothing), which then holds at least these."""
    if stops is not None:
        text = text[: len(text) - stops.held_back(text)]
    if ask.prompt is not None:
        return text
    text = "\n".join(line.rstrip() for line in text.split("\n"))  # (as shaping leaves them)
    text = text.rstrip(" \t\r\n" + CLOSERS + QUOTES + ";,")
    if parses is None:
        return text
    end = text.rfind("\n")
    while end > 0 and not parses(text[:end]):
        end = text.rfind("\n", 0, end)
    return text[:end] if end > 0 else ""


def syntax_check(job: Job) -> Callable[[str], bool] | None:
    """For a completion at a cursor in a document that parses as it is: whether it still
    parses with a given completion there (None: shaping will not cut by syntax)."""
    cursor = job.cursor
    if not isinstance(job, CompletionJob):
        return None
    if has_syntax_error(cursor.language, cursor.prefix + cursor.suffix) is not False:
        return None
    return lambda text: (
        has_syntax_error(cursor.language, cursor.prefix + text + cursor.suffix) is False
    )
