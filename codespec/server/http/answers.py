"""What HTTP clients read: an ``Answer`` (a finished request) in, the JSON of the endpoint it
came through out, whole or as streamed chunks, in the shapes of llama.cpp's server
(``tools/server``) and OpenAI's API; and the error object both answer with. Pure functions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Answer:
    """A finished request, as the HTTP front reports it."""

    text: str
    stop_type: str = "eos"  # llama-server's: eos | limit | word | none
    stopping_word: str = ""
    prompt_tokens: int = 0  # the prompt's tokens ...
    cached_tokens: int = 0  # ... of which reused from the cache
    predicted_tokens: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    truncated: bool = False
    tokens_per_pass: float = 0.0
    model: str = "codespec"
    created: int = field(default_factory=lambda: int(time.time()))


def llama_answer(answer: Answer, fields: tuple[str, ...] | None = None) -> dict:
    """llama-server's final object for ``/infill`` and ``/completion`` (streamed last, or the
    whole reply), projected onto ``response_fields`` when the client named them: each field a
    ``/``-separated path, the key in the reply the path itself (what llama.vim reads)."""
    whole = {
        "index": 0,
        "content": answer.text,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": answer.model,
        "tokens_predicted": answer.predicted_tokens,
        "tokens_evaluated": answer.prompt_tokens,
        "has_new_line": "\n" in answer.text,
        "truncated": answer.truncated,
        "stop_type": answer.stop_type,
        "stopping_word": answer.stopping_word,
        "tokens_cached": answer.cached_tokens,
        "timings": timings(answer),
        "codespec": {"tokens_per_pass": round(answer.tokens_per_pass, 3)},
    }
    return whole if fields is None else project(whole, fields)


def llama_chunk(text: str) -> dict:
    """One streamed piece of ``/infill`` or ``/completion``."""
    return {"index": 0, "content": text, "tokens": [], "stop": False, "id_slot": 0}


def timings(answer: Answer) -> dict:
    def per(ms: float, n: int) -> tuple[float, float]:
        return (ms / n if n else 0.0), (1000.0 * n / ms if ms > 0 else 0.0)

    computed = max(answer.prompt_tokens - answer.cached_tokens, 0)
    prompt_per_token, prompt_rate = per(answer.prompt_ms, computed)
    predicted_per_token, predicted_rate = per(answer.predicted_ms, answer.predicted_tokens)
    return {
        "cache_n": answer.cached_tokens,
        "prompt_n": computed,
        "prompt_ms": answer.prompt_ms,
        "prompt_per_token_ms": prompt_per_token,
        "prompt_per_second": prompt_rate,
        "predicted_n": answer.predicted_tokens,
        "predicted_ms": answer.predicted_ms,
        "predicted_per_token_ms": predicted_per_token,
        "predicted_per_second": predicted_rate,
    }


def project(whole: dict, fields: tuple[str, ...]) -> dict:
    """llama-server's ``response_fields``: the value at each path, keyed by the path."""
    out = {}
    for path in fields:
        value: Any = whole
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def openai_answer(answer: Answer, request_id: str, chat: bool = False) -> dict:
    """OpenAI's ``text_completion`` object, or with ``chat`` its ``chat.completion``."""
    choice: dict[str, Any] = {"index": 0, "logprobs": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": answer.text}
    else:
        choice["text"] = answer.text
    choice["finish_reason"] = finish_reason(answer.stop_type)
    return {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
        "usage": usage(answer),
    }


def usage(answer: Answer) -> dict:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.predicted_tokens,
        "total_tokens": answer.prompt_tokens + answer.predicted_tokens,
    }


def openai_chunk(
    text: str,
    request_id: str,
    model: str,
    created: int,
    chat: bool = False,
    finish: str | None = None,
) -> dict:
    """One streamed piece of ``/v1/completions`` (or, with ``chat``, of
    ``/v1/chat/completions``: its text as a ``delta``)."""
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text} if text or finish is None else {}
    else:
        choice["text"] = text
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def usage_chunk(answer: Answer, request_id: str, chat: bool = False) -> dict:
    """OpenAI's last chunk when ``stream_options.include_usage`` asks: no choices, the usage."""
    return {
        "id": request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [],
        "usage": usage(answer),
    }


def finish_reason(stop_type: str) -> str:
    """OpenAI's name for how it ended: ``length`` when a token limit cut it."""
    return "length" if stop_type == "limit" else "stop"


def error_body(message: str, status: int) -> dict:
    """The error object llama-server and OpenAI's API both answer with."""
    kinds = {401: "authentication_error", 404: "not_found_error", 503: "unavailable_error"}
    kind = kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"code": status, "message": message, "type": kind}}
