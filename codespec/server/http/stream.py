"""A completion streamed as server-sent events in the shape of the endpoint it came through
(llama-server's ``data: {content, stop}`` pieces, or OpenAI's ``text_completion`` chunks and
``[DONE]``), and the client's disconnect stopping its job, whether or not a piece is being
sent at the time."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..kinds import Job
from . import answers
from .answers import Answer
from .front import Front, streamable, syntax_check
from .wire import Ask

log = logging.getLogger("codespec.http")


def request_id() -> str:
    return "cmpl-" + secrets.token_hex(12)


async def disconnected(receive: Receive) -> None:
    """Returns when the client has gone (its body already read, nothing else will come)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(Response):
    """The response: the job's text as it grows, then how it ended."""

    media_type = "text/event-stream"

    def __init__(self, front: Front, ask: Ask, client: str) -> None:
        # (no body: the headers get no Content-Length, as a stream has none)
        self.status_code, self.background = 200, None
        self.init_headers({"cache-control": "no-cache"})
        self.front, self.ask, self.client = front, ask, client
        self.openai, self.chat = ask.openai, ask.chat
        self.id, self.created, self.model = request_id(), int(time.time()), front.model_label()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        texts: asyncio.Queue[str] = asyncio.Queue()

        def on_text(text: str) -> None:  # (on the worker's thread)
            loop.call_soon_threadsafe(texts.put_nowait, text)

        job = self.front.submit(self.ask, self.client, on_text=on_text)
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        if self.chat:  # (OpenAI's first chunk of a chat names the role that speaks)
            first = answers.openai_chunk("", self.id, self.model, self.created, chat=True)
            first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            await _event(send, first)
        sending = asyncio.ensure_future(self._send_all(job, texts, send))
        gone = asyncio.ensure_future(disconnected(receive))
        try:
            await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, gone):
                task.cancel()
        if not sending.done() or sending.cancelled() or sending.exception() is not None:
            job.signal.cancel(keep_chunk=True)  # the decode loop stops at its next pass

    async def _send_all(self, job: Job, texts: asyncio.Queue[str], send: Send) -> None:
        """Each longer text's new part as it comes (``front.streamable``: what may still
        change is held back), then the rest of the final text and how it ended."""
        sent = ""
        parses = await asyncio.to_thread(syntax_check, job)  # (parsing: off the loop)
        result = asyncio.wrap_future(job.future)
        while not result.done() or not texts.empty():
            getting = asyncio.ensure_future(texts.get())
            await asyncio.wait({getting, result}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                continue
            text = getting.result()
            while not texts.empty():  # (only the newest text matters)
                text = texts.get_nowait()
            stops = job.client_stops
            now = await asyncio.to_thread(streamable, text, self.ask, stops, parses)
            if now.startswith(sent) and len(now) > len(sent):
                await self._piece(send, now[len(sent) :])
                sent = now
        try:
            answer = self.front.answer(job, result.result())
        except Exception as exc:
            log.error("an HTTP completion failed: %s", exc)
            await _event(send, answers.error_body("the completion failed", 500))
        else:
            # (a final text that no longer starts with what was sent: shaping cut into it;
            # what was sent stands, and nothing more is added)
            rest = answer.text[len(sent) :] if answer.text.startswith(sent) else ""
            await self._end(send, answer, rest)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _piece(self, send: Send, text: str) -> None:
        if not text:
            return
        if self.openai:
            chunk = answers.openai_chunk(text, self.id, self.model, self.created, self.chat)
            await _event(send, chunk)
        else:
            await _event(send, answers.llama_chunk(text))

    async def _end(self, send: Send, answer: Answer, rest: str) -> None:
        if self.openai:
            await self._piece(send, rest)
            finish = answers.finish_reason(answer.stop_type)
            final = answers.openai_chunk("", self.id, self.model, self.created, self.chat, finish)
            await _event(send, final)
            if self.ask.include_usage:
                await _event(send, answers.usage_chunk(answer, self.id, self.chat))
            await _event(send, "[DONE]")
        else:
            answer.text = rest
            await _event(send, answers.llama_answer(answer, self.ask.response_fields))


async def _event(send: Send, payload: Any) -> None:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    message = {
        "type": "http.response.body",
        "body": f"data: {data}\n\n".encode(),
        "more_body": True,
    }
    await send(message)
