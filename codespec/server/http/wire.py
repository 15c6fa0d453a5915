"""What HTTP clients send: llama-server's ``/infill``, ``/completion``, ``/tokenize`` and
``/detokenize``, OpenAI's ``/v1/completions`` and ``/v1/chat/completions``. Pure functions: a
request body in, an ``Ask`` out (or ``BadRequest``, one line naming the field); what clients
read back is ``answers.py``.

The field names, defaults and response shapes follow llama.cpp's server (``tools/server``) and
what llama.vim (``autoload/llama.vim``) and llama.vscode (``src/llama-server.ts``) send and read;
docs/http.md lists what is honoured and what is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...numbers import finite_number
from ..documents import MAX_DOCUMENT_CHARS

MAX_PREDICT = 1024  # the most tokens one request may ask for (n_predict, max_tokens)
MAX_EXTRA_CHUNKS = 64  # input_extra entries read; later ones are left out
MAX_TEXT_CHARS = MAX_DOCUMENT_CHARS  # prefix, suffix or prompt: larger is refused, as a document
MAX_STOP_WORDS = 16
MAX_STOP_WORD_CHARS = 256
MAX_MESSAGES = 256  # a chat's messages read; more is refused
CHAT_ROLES = ("system", "user", "assistant")
MAX_TOKEN_IDS = 1 << 20  # ids one /detokenize may name


class BadRequest(ValueError):
    """A request codespec will not run; the message is one line for the client."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Ask:
    """What one HTTP request asks, whichever endpoint it came through."""

    endpoint: str  # "infill" | "completion" | "v1/completions" | "v1/chat/completions"
    prefix: str = ""  # a completion at a cursor: the text before it ...
    suffix: str = ""  # ... and after it
    prompt: str | None = None  # else a prompt the client built, continued as it is
    extra_files: tuple[tuple[str, str], ...] = ()  # (name, text): other files' chunks
    max_tokens: int | None = None  # None: codespec's own limits
    stop_words: tuple[str, ...] = ()
    min_indent: int = 0  # llama-server's n_indent
    predict_s: float = 0.0  # llama-server's t_max_predict_ms, in seconds (0: none)
    temperature: float = 0.0  # greedy unless the client names a temperature
    seed: int | None = None
    stream: bool = False
    response_fields: tuple[str, ...] | None = None  # llama-server's projection of the answer
    prepare_only: bool = False  # n_predict 0: compute the prompt ahead, answer nothing
    language: str = ""  # codespec's own fields: the current file's languageId ...
    path: str = ""  # ... and its name (llama's clients send neither)
    messages: tuple[tuple[str, str], ...] = ()  # a chat's (role, content), before its prompt
    include_usage: bool = False  # OpenAI's stream_options: a last chunk with the usage

    @property
    def openai(self) -> bool:
        """Answered in OpenAI's shapes (else llama-server's)."""
        return self.endpoint.startswith("v1/")

    @property
    def chat(self) -> bool:
        return self.endpoint == "v1/chat/completions"


# -- reading requests ---------------------------------------------------------------------------


def read_infill(body: Any) -> Ask:
    """llama-server's ``POST /infill``: ``input_prefix`` + ``prompt`` before the cursor,
    ``input_suffix`` after it, ``input_extra`` chunks of other files."""
    body = _object(body)
    language, path = _codespec_fields(body)
    return replace(
        _llama_limits(body, "infill"),
        prefix=_text(body, "input_prefix") + _text(body, "prompt"),
        suffix=_text(body, "input_suffix"),
        extra_files=_extra(body.get("input_extra")),
        language=language,
        path=path,
    )


def read_completion(body: Any) -> Ask:
    """llama-server's ``POST /completion``: a prompt continued as it is."""
    body = _object(body)
    if "prompt" not in body:
        raise BadRequest("prompt is required")
    return replace(_llama_limits(body, "completion"), prompt=_prompt(body.get("prompt")))


def read_openai(body: Any) -> Ask:
    """OpenAI's ``POST /v1/completions``: ``prompt`` continued, or with ``suffix`` a completion
    between the two (OpenAI's insert mode, codespec's FIM path)."""
    body = _object(body)
    if "prompt" not in body:
        raise BadRequest("prompt is required")
    prompt = _prompt(body.get("prompt"))
    if body.get("echo") not in (None, False):
        raise BadRequest("echo is not supported")
    if body.get("best_of") not in (None, 1):
        raise BadRequest("best_of must be 1")
    if body.get("logprobs") not in (None, 0):
        raise BadRequest("logprobs is not supported (codespec reports no token probabilities)")
    ask = _openai_limits(body, "v1/completions", prompt)
    if body.get("suffix") is None:
        return ask
    language, path = _codespec_fields(body)
    return replace(
        ask, prompt=None, prefix=prompt, suffix=_text(body, "suffix"), language=language, path=path
    )


def read_chat(body: Any) -> Ask:
    """OpenAI's ``POST /v1/chat/completions``: ``messages`` of ``system``, ``user`` and
    ``assistant`` text, answered by the model's own chat template (``chat.py``)."""
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"messages holds at most {MAX_MESSAGES} messages", status=413)
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") not in (None, 0):
        raise BadRequest("logprobs is not supported (codespec reports no token probabilities)")
    if body.get("tools") or body.get("tool_choice") not in (None, "none"):
        raise BadRequest("tools are not supported (codespec answers with text only)")
    if body.get("response_format") not in (None, {"type": "text"}):
        raise BadRequest("response_format is not supported (codespec answers with plain text)")
    read = tuple(_message(i, message) for i, message in enumerate(messages))
    if sum(len(content) for _, content in read) > MAX_TEXT_CHARS:
        raise BadRequest(f"messages hold more than {MAX_TEXT_CHARS} characters", status=413)
    return replace(_openai_limits(body, "v1/chat/completions", ""), messages=read)


def _message(i: int, message: Any) -> tuple[str, str]:
    """One chat message's (role, content); content may be OpenAI's array of text parts."""
    if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
        raise BadRequest(f"messages[{i}] must be an object whose role is one of {CHAT_ROLES}")
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
            raise BadRequest(f"messages[{i}].content: only text parts are supported")
        content = "".join(str(t) for t in texts)
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise BadRequest(f"messages[{i}].content must be a string or an array of text parts")
    return message["role"], content


def _openai_limits(body: dict, endpoint: str, prompt: str) -> Ask:
    """The generation fields OpenAI's two endpoints share."""
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise BadRequest("n must be 1 (codespec answers one completion per request)")
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _predict(body, key)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    return Ask(
        endpoint=endpoint,
        prompt=prompt,
        max_tokens=max_tokens or None,
        prepare_only=max_tokens == 0,
        stop_words=_stops(body.get("stop")),
        temperature=_temperature(body),
        seed=_seed(body),
        stream=_flag(body, "stream"),
        include_usage=_flag(options or {}, "include_usage"),
    )


def read_tokenize(body: Any) -> tuple[str, bool, bool, bool]:
    """llama-server's ``POST /tokenize``: (content, add_special, parse_special, with_pieces)."""
    body = _object(body)
    return (
        _text(body, "content"),
        _flag(body, "add_special"),
        _flag(body, "parse_special", True),
        _flag(body, "with_pieces"),
    )


def read_detokenize(body: Any, vocabulary: int) -> list[int]:
    """llama-server's ``POST /detokenize``: ``tokens``, ids of this model's vocabulary."""
    tokens = _object(body).get("tokens", [])
    if not isinstance(tokens, list) or len(tokens) > MAX_TOKEN_IDS:
        raise BadRequest(f"tokens must be an array of at most {MAX_TOKEN_IDS} token ids")
    for i, token in enumerate(tokens):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocabulary:
            raise BadRequest(f"tokens[{i}] must be a token id from 0 to {vocabulary - 1}")
    return tokens


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _text(body: dict, key: str) -> str:
    value = body.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    if len(value) > MAX_TEXT_CHARS:
        raise BadRequest(f"{key} is longer than {MAX_TEXT_CHARS} characters", status=413)
    return value


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]  # OpenAI's one-prompt batch
    if isinstance(value, list):
        raise BadRequest("prompt must be one string (token ids and batches are not accepted)")
    if not isinstance(value, str):
        raise BadRequest("prompt must be a string")
    if len(value) > MAX_TEXT_CHARS:
        raise BadRequest(f"prompt is longer than {MAX_TEXT_CHARS} characters", status=413)
    return value


def _extra(value: Any) -> tuple[tuple[str, str], ...]:
    """``input_extra``: ``[{"filename": ..., "text": ...}]``, as llama.vim's ring buffer and
    llama.vscode's chunks send it."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadRequest("input_extra must be an array of {filename, text} objects")
    chunks = []
    for i, chunk in enumerate(value[:MAX_EXTRA_CHUNKS]):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str):
            raise BadRequest(f"input_extra[{i}] must be an object with a text string")
        name = chunk.get("filename", "")
        if not isinstance(name, str):
            raise BadRequest(f"input_extra[{i}].filename must be a string")
        text = chunk.get("text", "")
        if len(text) > MAX_TEXT_CHARS:
            raise BadRequest(f"input_extra[{i}].text is too long", status=413)
        if text:
            chunks.append((name[:512] or f"chunk{i}", text))
    return tuple(chunks)


def _llama_limits(body: dict, endpoint: str) -> Ask:
    """The generation fields ``/infill`` and ``/completion`` share."""
    if body.get("n_probs") not in (None, 0):
        raise BadRequest("n_probs is not supported (codespec reports no token probabilities)")
    n_predict = _predict(body, "n_predict")
    return Ask(
        endpoint=endpoint,
        max_tokens=n_predict or None,
        prepare_only=n_predict == 0,
        stop_words=_stops(body.get("stop")),
        min_indent=_whole(body, "n_indent", 0, 1000),
        predict_s=_whole(body, "t_max_predict_ms", 0, 3_600_000) / 1000,
        temperature=_temperature(body),
        seed=_seed(body),
        stream=_flag(body, "stream"),
        response_fields=_fields(body.get("response_fields")),
    )


def _codespec_fields(body: dict) -> tuple[str, str]:
    """codespec's own optional fields: the current file's ``language`` (an LSP languageId) and
    ``filename``, which choose its syntax rules and name the file in the prompt."""
    language, path = body.get("language", ""), body.get("filename", "")
    if not isinstance(language, str) or not isinstance(path, str):
        raise BadRequest("language and filename must be strings")
    return language[:64], path[:512]


def _predict(body: dict, key: str) -> int | None:
    """A token limit: -1 or absent means codespec's own (None), 0 means none to generate."""
    value = body.get(key)
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise BadRequest(f"{key} must be a whole number from -1 up")
    return min(value, MAX_PREDICT)


def _whole(body: dict, key: str, low: int, high: int) -> int:
    return int(_number(body, key, low, high))


def _number(body: dict, key: str, low: float, high: float) -> float:
    """A number field, clamped to ``[low, high]`` before it is converted (``numbers.py``);
    absent or null is ``low``."""
    value = body.get(key, low)
    if value is None:
        return low
    number = finite_number(value)
    if number is None:
        raise BadRequest(f"{key} must be a number")
    return min(max(number, low), high)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise BadRequest("stop must be a string or an array of strings")
    if len(value) > MAX_STOP_WORDS or any(len(w) > MAX_STOP_WORD_CHARS for w in value):
        raise BadRequest(
            f"stop holds at most {MAX_STOP_WORDS} strings of {MAX_STOP_WORD_CHARS} characters"
        )
    return tuple(w for w in value if w)


def _temperature(body: dict) -> float:
    return float(_number(body, "temperature", 0.0, 2.0))


def _seed(body: dict) -> int | None:
    value = body.get("seed")
    if value is None or value == -1:  # llama-server: -1 is a random seed
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest("seed must be a whole number")
    return value % (1 << 32)


def _flag(body: dict, key: str, default: bool = False) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false")
    return value


def _fields(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise BadRequest("response_fields must be an array of strings")
    return tuple(value[:64])


def fim_parts(prompt: str, prefix_mark: str, suffix_mark: str, middle_mark: str):
    """(prefix, suffix) when ``prompt`` is a bare fill-in-the-middle prompt in the model's own
    markers, ``PRE{prefix}SUF{suffix}MID`` (what Zed sends for a Qwen model), else None: such a
    prompt is completed at a cursor, with codespec's prompt and stop rules."""
    if not (prefix_mark and suffix_mark and middle_mark):
        return None
    if not (prompt.startswith(prefix_mark) and prompt.endswith(middle_mark)):
        return None
    body = prompt[len(prefix_mark) : len(prompt) - len(middle_mark)]
    before, found, after = body.partition(suffix_mark)
    markers = (prefix_mark, suffix_mark, middle_mark)
    if not found or any(m in before or m in after for m in markers):
        return None
    return before, after
