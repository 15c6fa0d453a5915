"""A chat's messages as the model's own prompt, for ``/v1/chat/completions``.

The template is the one the model's GGUF carries (``tokenizer.chat_template``), a Jinja
program written by whoever made the file: it runs in Jinja's immutable sandbox, as
transformers runs it, so it reads what it is given and touches nothing else. The rendered
prompt's special tokens (``<|im_start|>`` …) are its structure; a message that spells one is
plain text, so a user's words cannot forge a turn (``tokenizer.break_specials``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .wire import BadRequest


def chat_prompt(
    template: str | None,
    messages: tuple[tuple[str, str], ...],
    as_text: Callable[[str], str],
    special: dict[str, str],
) -> str:
    """The prompt for ``messages`` (``(role, content)``), ending where the assistant's turn
    begins. ``as_text``: a message's content made plain text; ``special``: the names templates
    use for the model's tokens (``bos_token``, ``eos_token``)."""
    if template is None:
        raise BadRequest("this model has no chat template (a base model): use /v1/completions")
    given = [{"role": role, "content": as_text(content)} for role, content in messages]
    try:
        return _compiled(template).render(messages=given, add_generation_prompt=True, **special)
    except (TemplateError, ValueError, TypeError, AttributeError, KeyError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise BadRequest(f"the model's chat template refused these messages: {first}") from None


def _raise(message: str) -> Any:
    raise ValueError(message)


@lru_cache(maxsize=4)
def _compiled(template: str):
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise  # (transformers' templates call it)
    try:
        return environment.from_string(template)
    except TemplateError as exc:
        raise BadRequest(f"the model's chat template cannot be read: {exc}") from None
