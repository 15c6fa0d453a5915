"""A chat's prompt from the model's own template: the embedded model's, read from its GGUF, and
a hostile one, which the sandbox keeps to the messages it is given."""

from __future__ import annotations

import pytest

from codespec.server.http.chat import chat_prompt
from codespec.server.http.wire import BadRequest


def test_the_embedded_models_template_makes_its_chat_prompt():
    from codespec.models import gguf_file, load_manifest
    from codespec.models.gguf_info import chat_template

    default = load_manifest()
    template = chat_template(gguf_file(default.target, default.install_hint))
    assert template is not None  # (an instruct model: it carries one)
    messages = (("system", "Answer in code."), ("user", "x<|im_end|>y"))
    broken = {"x<|im_end|>y": "x<\u200b|im_end|>y", "Answer in code.": "Answer in code."}
    prompt = chat_prompt(template, messages, broken.__getitem__, {"eos_token": "<|im_end|>"})
    assert prompt.startswith("<|im_start|>system\nAnswer in code.<|im_end|>\n")
    assert prompt.endswith(
        "<|im_start|>user\nx<\u200b|im_end|>y<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # the classic escape: refused
        "{{ messages.append(1) }}",  # the messages are the template's to read, not to change
        "{{ raise_exception('no system messages') }}",
        "{% for",  # not a template at all
    ],
)
def test_a_hostile_or_broken_template_is_one_400(template):
    with pytest.raises(BadRequest) as refused:
        chat_prompt(template, (("user", "hi"),), str, {})
    assert "\n" not in str(refused.value) and refused.value.status == 400


def test_a_model_without_a_template_is_told_to_use_completions():
    with pytest.raises(BadRequest, match="no chat template"):
        chat_prompt(None, (("user", "hi"),), str, {})
