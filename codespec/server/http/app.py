"""The Starlette application of ``codespec serve --http``: who is let in, the routes, and
streaming with a client's disconnect stopping its job.

Admission, before a body is read:

* the ``Host`` header must name the address listened on (a loopback name when on loopback):
  a web page that re-binds a DNS name to 127.0.0.1 is refused;
* a browser's cross-site request (an ``Origin`` that is not this server's) is refused, and a
  POST must say ``Content-Type: application/json`` (which a page cannot send without asking);
* with an API key, ``Authorization: Bearer KEY`` is compared in constant time;
* a body past ``MAX_BODY_BYTES`` is refused while it is read;
* at most ``MAX_REQUESTS`` requests run at once (``RequestLimit``): requests are counted, not
  connections (``guard.py`` bounds those), and the start-up checks are never refused.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ...files import parse_json
from ...tokenizer import Tokenizer, plain_ids
from ..lifecycle import plain_strings
from ..worker import ModelUnavailable
from . import answers, wire
from .front import Front, client_name
from .stream import EventStream, disconnected, request_id
from .wire import Ask, BadRequest

log = logging.getLogger("codespec.http")
MAX_BODY_BYTES = 16 << 20  # a request's body; llama.vim's largest (256 prefix lines, 64
# suffix lines, 16 ring chunks of 64 lines) is far smaller
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]", "::1"}
BODY_TIMEOUT_S = 10.0
# llama-server's clients send one request at a time each; more at once than this are answered
# 503 with a message rather than queued without bound
MAX_REQUESTS = 64
# what editors ask at start-up and while the model loads: cheap, never refused
START_UP_CHECKS = frozenset({"/health", "/v1/health", "/props", "/models", "/v1/models"})


@dataclass(frozen=True)
class Admission:
    """Who may use the front: the host names it answers to (None: any) and its API key."""

    hosts: frozenset[str] | None
    api_key: str | None = None

    def refusal(self, request: Request) -> Response | None:
        host = request.headers.get("host", "").lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.hosts is not None and name not in self.hosts:
            return error("this server answers to its own address only (Host refused)", 403)
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1].lower() != host:
            return error("cross-origin requests are refused", 403)
        if self.api_key is not None and not self.key_matches(request):
            return error("a valid API key is required (Authorization: Bearer KEY)", 401)
        if request.method == "POST":
            kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/json":
                return error("send the body as Content-Type: application/json", 415)
        return None

    def key_matches(self, request: Request) -> bool:
        assert self.api_key is not None
        offered = request.headers.get("authorization", "")
        scheme, _, key = offered.partition(" ")
        if scheme.lower() != "bearer":
            key = request.headers.get("x-api-key", "")
        return hmac.compare_digest(key.strip().encode(), self.api_key.encode())


class RequestLimit:
    """ASGI middleware: requests in flight at most ``limit`` (a stream counts until it ends);
    past that, a 503 that says so."""

    def __init__(self, app: ASGIApp, limit: int = MAX_REQUESTS) -> None:
        self.app = app
        self.limit = limit
        self.running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in START_UP_CHECKS:
            await self.app(scope, receive, send)
            return
        if self.running >= self.limit:
            busy = error(f"more than {self.limit} requests at once; try again shortly", 503)
            await busy(scope, receive, send)
            return
        self.running += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.running -= 1


def error(message: str, status: int) -> JSONResponse:
    return JSONResponse(answers.error_body(message, status), status_code=status)


def build_app(front: Front, admission: Admission) -> Starlette:
    """The application: llama-server's endpoints, OpenAI's, and the start-up checks."""

    def admitted(handler: Callable) -> Callable:
        async def endpoint(request: Request) -> Response:
            refused = admission.refusal(request)
            if refused is not None:
                return refused
            try:
                return await handler(request)
            except BadRequest as exc:
                return error(str(exc), exc.status)
            except ModelUnavailable as exc:
                return error(str(exc), 503)

        return endpoint

    async def health(request: Request) -> Response:
        if not front.model_ready.is_set():
            return error("Loading model", 503)
        if front.loaded() is None:
            return error("the model failed to load", 503)
        return JSONResponse({"status": "ok"})

    async def props(request: Request) -> Response:
        pair = front.loaded()
        context = pair.context_tokens if pair is not None else 0
        return JSONResponse(
            {
                "default_generation_settings": {"n_ctx": context, "params": {}},
                "total_slots": 1,
                "model_path": front.model_label(),
                "n_ctx": context,
                "build_info": "codespec",
            }
        )

    async def models(request: Request) -> Response:
        label = front.model_label()
        entry = {"id": label, "object": "model", "created": 0, "owned_by": "codespec"}
        return JSONResponse({"object": "list", "data": [entry]})

    def tokenizer() -> Tokenizer:
        pair = front.loaded()
        if pair is None:
            raise ModelUnavailable("the model is not loaded yet (GET /health says when)")
        return pair.tokenizer

    async def tokenize(request: Request) -> Response:
        """llama-server's: the content's token ids (special tokens parsed unless
        ``parse_special`` is false), or with ``with_pieces`` each id with its text. Off the
        event loop: megabytes of text take a while, and the loop serves every session."""
        content, add_special, parse_special, with_pieces = wire.read_tokenize(
            await json_body(request)
        )
        vocabulary = tokenizer()

        def ids_and_pieces() -> list:
            if parse_special:
                ids = vocabulary.encode(content, add_special_tokens=add_special)
            else:
                ids = plain_ids(vocabulary, content)
            if not with_pieces:
                return ids
            return [{"id": i, "piece": vocabulary.decode([i])} for i in ids]

        return JSONResponse({"tokens": await asyncio.to_thread(ids_and_pieces)})

    async def detokenize(request: Request) -> Response:
        vocabulary = tokenizer()
        size = vocabulary.vocab_size + len(vocabulary.get_added_vocab())
        ids = wire.read_detokenize(await json_body(request), size)
        return JSONResponse({"content": await asyncio.to_thread(vocabulary.decode, ids)})

    def completion_endpoint(read: Callable[[Any], Ask]) -> Callable:
        async def handle(request: Request) -> Response:
            # (off the loop: a chat's template renders megabytes of messages)
            ask = await asyncio.to_thread(front.resolve, read(await json_body(request)))
            client = client_name(request.headers.get("user-agent"), ask.endpoint)
            if ask.prepare_only:
                front.prepare(ask, client)
                nothing = answers.Answer("", model=front.model_label())
                if ask.openai:
                    return JSONResponse(answers.openai_answer(nothing, request_id(), ask.chat))
                return JSONResponse(answers.llama_answer(nothing, ask.response_fields))
            if ask.stream:
                return EventStream(front, ask, client)
            return await answer_whole(front, ask, client, request.receive)

        return handle

    routes = [
        Route("/health", admitted(health)),
        Route("/v1/health", admitted(health)),
        Route("/props", admitted(props)),
        Route("/models", admitted(models)),
        Route("/v1/models", admitted(models)),
        Route("/infill", admitted(completion_endpoint(wire.read_infill)), methods=["POST"]),
        Route("/completion", admitted(completion_endpoint(wire.read_completion)), methods=["POST"]),
        Route(
            "/completions", admitted(completion_endpoint(wire.read_completion)), methods=["POST"]
        ),
        Route("/v1/completions", admitted(completion_endpoint(wire.read_openai)), methods=["POST"]),
        Route(
            "/v1/chat/completions",
            admitted(completion_endpoint(wire.read_chat)),
            methods=["POST"],
        ),
        Route("/tokenize", admitted(tokenize), methods=["POST"]),
        Route("/detokenize", admitted(detokenize), methods=["POST"]),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return error("no such endpoint" if status == 404 else str(exc), status)

    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        middleware=[Middleware(RequestLimit)],
    )


async def json_body(request: Request) -> Any:
    """The body as JSON, refused past ``MAX_BODY_BYTES`` before more of it is read, and when it
    does not arrive within ``BODY_TIMEOUT_S`` (a client trickling bytes holds a connection of
    the few there are). Lone surrogates in its strings become U+FFFD, as on the LSP path."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes", status=413)
    body: list[bytes] = []

    async def read() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BadRequest(f"the body is larger than {MAX_BODY_BYTES} bytes", status=413)
            body.append(chunk)

    try:
        await asyncio.wait_for(read(), BODY_TIMEOUT_S)
    except TimeoutError:
        raise BadRequest(f"the body did not arrive within {BODY_TIMEOUT_S:g} s", 408) from None
    try:
        return plain_strings(parse_json(b"".join(body)))
    except ValueError:
        raise BadRequest("the body is not valid JSON") from None


async def answer_whole(front: Front, ask: Ask, client: str, receive: Receive) -> Response:
    """A request answered in one reply; the client closing the connection stops its job."""
    job = front.submit(ask, client, on_text=None)
    result = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not result.done():  # the client left: the decode loop stops at its next pass
        job.signal.cancel(keep_chunk=True)
        result.cancel()
        return Response(status_code=499)
    try:
        answer = front.answer(job, result.result())
    except ModelUnavailable:
        raise
    except Exception:
        log.exception("an HTTP completion failed")
        return error("the completion failed (details in the daemon log)", 500)
    if ask.openai:
        return JSONResponse(answers.openai_answer(answer, request_id(), ask.chat))
    return JSONResponse(answers.llama_answer(answer, ask.response_fields))
