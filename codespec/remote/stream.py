"""One streamed completion from one server: an OpenAI-compatible ``POST /v1/completions``.

It runs on the remote engine's event loop and hands what it reads to the worker thread as
events on a queue: ``("text", text, finish_reason)``, ``("meta", event)`` for an event with
usage, timings or metrics, ``("end", None)`` and ``("fault", StreamFault)``. Cancelling its task
closes the HTTP stream at once: that is how a stop rule, a cancel and a timeout end it.
"""

from __future__ import annotations

import email.utils
import json
import queue
import time

import httpx

from .sse import SseParser, StreamFault

ERROR_BODY_BYTES = 2048  # what is read of an error reply (for its one log line)


def retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def fault_for_status(status: int, headers: httpx.Headers, body: bytes) -> StreamFault:
    """What an error status means for the URL: down (5xx, 429, 408; and 401, 403: it refuses
    the token, so every request would fail alike) or a request it refuses."""
    # (not cut here: the engine masks the token in it first, then cuts: ``secrets.shown``)
    detail = body[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    reason = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status in (401, 403):
        return StreamFault("the server refuses codespec's token: " + reason)
    if status == 429 or status == 408 or status >= 500:
        return StreamFault(reason, retry_after(headers.get("retry-after")))
    return StreamFault(reason, retry=False)


def choice_text(event: dict) -> tuple[str, str | None]:
    """The text and finish reason of a completions chunk; a chunk of another shape is a fault
    (a server that answers in a format we do not read must not be shown as text)."""
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise StreamFault("a stream event without choices", retry=False)
    if not choices:
        return "", None  # (the usage chunk)
    choice = choices[0]
    text = choice.get("text") if isinstance(choice, dict) else None
    if not isinstance(text, str):
        raise StreamFault("a stream event whose choice has no text", retry=False)
    finish = choice.get("finish_reason")
    return text, finish if isinstance(finish, str) else None


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    body: dict,
    headers: dict[str, str],
    limit: int,
    events: queue.Queue,
) -> None:
    """Stream one completion from ``url`` into ``events``; faults go there too."""
    try:
        async with client.stream(
            "POST", f"{url}/v1/completions", json=body, headers=headers
        ) as response:
            if response.status_code != 200:
                error = b""
                async for chunk in response.aiter_raw():
                    error += chunk
                    if len(error) >= ERROR_BODY_BYTES:
                        break
                raise fault_for_status(response.status_code, response.headers, error)
            if "json" in response.headers.get("content-type", ""):
                await _whole_reply(response, limit, events)  # a server that does not stream
                return
            parser = SseParser(limit)
            async for chunk in response.aiter_raw():
                for data in parser.feed(chunk):
                    if _deliver(data, events):
                        return
            for data in parser.close():
                if _deliver(data, events):
                    return
            raise StreamFault("the stream ended before its end ([DONE])")
    except StreamFault as fault:
        events.put(("fault", fault))
    except httpx.ConnectTimeout:
        events.put(("fault", StreamFault("connection timed out", hangs=True)))
    except httpx.ConnectError as exc:
        events.put(("fault", StreamFault(f"cannot connect ({_short(exc)})")))
    except httpx.TimeoutException:
        events.put(("fault", StreamFault("the server stopped sending", hangs=True)))
    except httpx.HTTPError as exc:  # a cut connection, a protocol error
        events.put(("fault", StreamFault(f"the stream broke ({_short(exc)})")))


async def _whole_reply(response: httpx.Response, limit: int, events: queue.Queue) -> None:
    """A completion answered whole (a server that ignores ``stream``): read as one event."""
    body = b""
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > limit:
            raise StreamFault(f"a reply larger than {limit} bytes", retry=False)
    if not _deliver(body.decode("utf-8", "replace"), events):
        events.put(("end", None))


def _deliver(data: str, events: queue.Queue) -> bool:
    """Put one event's data on the queue; True at the stream's end."""
    if data.strip() == "[DONE]":
        events.put(("end", None))
        return True
    try:
        event = json.loads(data)
    except ValueError:
        raise StreamFault("a stream event that is not JSON", retry=False) from None
    except RecursionError:
        raise StreamFault("a stream event nested too deeply to read", retry=False) from None
    if not isinstance(event, dict):
        raise StreamFault("a stream event that is not a JSON object", retry=False)
    if "error" in event and "choices" not in event:
        message = event["error"]
        if isinstance(message, dict):
            message = message.get("message", "")
        raise StreamFault(f"the server reported an error: {message}")
    text, finish = choice_text(event)
    if text or finish:
        events.put(("text", text, finish))
    if any(key in event for key in ("usage", "timings", "metrics")):
        events.put(("meta", event))
    return False


def _short(exc: Exception) -> str:
    lines = (str(exc) or type(exc).__name__).splitlines()
    return lines[0] if lines else type(exc).__name__
