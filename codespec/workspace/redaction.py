"""Secrets taken out of context before it leaves the machine.

With a remote engine, the definitions of files the user never opened and the snippets of other
open documents go to a server with each prompt. What secret scanners recognise there is
replaced by ``REDACTED`` first:

* the well-known key and token formats, from detect-secrets' detectors (AWS, GitHub, GitLab,
  Slack, Stripe, OpenAI, npm, PyPI, JWTs, Basic-auth URLs and the rest of its list: a list
  kept up to date there), and a few newer formats it lacks (OpenAI's and Anthropic's ``sk-``
  keys, Google API keys, Hugging Face tokens); where a pattern captures the secret itself (not
  a short prefix of it), only that is replaced, else the whole match;
* private key blocks, from their ``BEGIN`` line to their ``END`` line (the detector finds the
  header only);
* a quoted value assigned to a name that says it is secret (``*key*``, ``*token*``,
  ``*secret*``, ``*passw*``, ``*credential*``, ``auth``): detect-secrets' keyword detector, and
  the same for annotated assignments it does not read (``api_token: str = "…"``), when the value
  looks generated (8 or more characters, letters and digits mixed);
* any quoted value of one word (8 or more characters, not a dotted name, a path, a placeholder
  or an environment variable's name) bound to a name that *ends* in a secret's word
  (``password``, ``token``, ``secret``, ``api_key``, ``authToken``, ...): a parameter's default
  (``def f(token="...")``, ``function f(token: string = "...")``), a keyword argument, an
  object's key;
* the value of a ``password: ...`` or ``token = ...`` line in a comment or a docstring (a label
  of up to two words before it, one word of 6 or more characters after it).

Entropy alone is not used: on code it flags every identifier. Redaction is a net, not a
guarantee: ``lsp/PROTOCOL.md`` says what leaves the machine.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Any

REDACTED = "<redacted>"
PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"
    r".*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
    re.DOTALL,
)
SECRET_NAMED = re.compile(
    r"(?i)\b\w*(?:key|token|secret|passw\w*|credential|auth)\w*"  # the name
    r"\s*(?::\s*[\w\[\]., |]+?)?\s*(?:=|:)\s*"  # an annotation, then = or :
    r"(?P<quote>['\"`])(?P<value>[^'\"`\s]{8,})(?P=quote)"
)
# A secret's word, ending a name (joined to the rest of it by _ or -, or as a camelCase part):
# ``token_type`` and ``key_name`` do not end in one, and ``key`` alone says too little.
_SECRET_WORD = (
    r"(?:passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credentials?)"
)
SECRET_BOUND = re.compile(
    r"(?:(?<![\w-])|(?<=[a-z0-9_-]))"  # a name's start, or a later part's
    r"(?i:" + _SECRET_WORD + r")(?![\w-])['\"`]?"  # the name's end (a quoted key's quote)
    r"\s*(?::\s*[\w\[\]., |]+?)?\s*(?:=|:)\s*"  # an annotation, then = or :
    r"(?P<quote>['\"`])(?P<value>[^'\"`\s]{8,})(?P=quote)"
)
SECRET_LINE = re.compile(
    r"^\s*(?:#+|//+|/?\*+|--|;+|\"\"\"|''')?\s*"  # a comment's or a docstring's start
    r"(?:[\w-]+\s+){0,2}"  # a label ("admin", "staging db")
    r"(?i:" + _SECRET_WORD + r")\s*[:=]\s*"
    r"(?P<value>[^\s'\"`]{6,}?)[.,;]?\s*(?:\"\"\"|'''|\*/)?\s*$"
)
# What a secret's name is bound to in code that holds none: a dotted name, a path or URL, a
# placeholder (``<token>``, ``${TOKEN}``, ``%s``, ``{}``) or an environment variable's name.
NOT_A_VALUE = re.compile(r"[./\\<>{}$%()\[\]]|^[A-Z0-9_]+$")
NEWER_FORMATS = [
    re.compile(r"\bsk-(?:proj-|ant-(?:api\d\d-)?|svcacct-)?[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
]
NOT_SECRETS = {"Public IP (ipv4)", "Base64 High Entropy String", "Hex High Entropy String"}


@cache
def _detectors() -> tuple[list[re.Pattern[str]], Any]:
    """detect-secrets' regular expressions for the known formats, and its keyword detector."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.keyword import KeywordDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    patterns = list(NEWER_FORMATS)
    for name, plugin in get_mapping_from_secret_type_to_class().items():
        if name in NOT_SECRETS or plugin is PrivateKeyDetector:
            continue
        if issubclass(plugin, RegexBasedDetector):
            patterns += plugin().denylist
    return patterns, KeywordDetector()


def looks_generated(value: str) -> bool:
    """Letters and digits mixed, as keys and most passwords are (a name such as
    ``"model.embed_tokens.weight"`` or ``"codespec/authRefused"`` has no digits)."""
    return any(c.isalpha() for c in value) and any(c.isdigit() for c in value)


@lru_cache(maxsize=1024)  # (the same files' context comes back keystroke after keystroke)
def redact(text: str) -> str:
    """``text`` with what looks like a secret replaced by ``REDACTED`` (the module's docstring)."""
    text = PRIVATE_KEY_BLOCK.sub(REDACTED, text)
    patterns, keyword = _detectors()
    return "\n".join(_redact_line(line, patterns, keyword) for line in text.split("\n"))


def _redact_line(line: str, patterns: list[re.Pattern[str]], keyword: Any) -> str:
    spans: list[tuple[int, int]] = []
    for pattern in patterns:
        for match in pattern.finditer(line):
            group = match.lastindex or 0  # the secret itself where the pattern captures it
            if group and match.end(group) - match.start(group) < 8:  # (a prefix: "ghp")
                group = 0
            start, end = match.span(group)
            while end < len(line) and (line[end].isalnum() or line[end] in "_-"):
                end += 1  # (to the end of the token: a format's length may have grown)
            spans.append((start, end))
    for match in SECRET_NAMED.finditer(line):
        if looks_generated(match.group("value")):
            spans.append(match.span("value"))
    for match in SECRET_BOUND.finditer(line):
        if not NOT_A_VALUE.search(match.group("value")):
            spans.append(match.span("value"))
    if (match := SECRET_LINE.match(line)) and not NOT_A_VALUE.search(match.group("value")):
        spans.append(match.span("value"))
    values = {s.secret_value for s in keyword.analyze_line(filename="x", line=line)}
    for value in values:
        if value and len(value) >= 6:
            start = line.find(value)
            while start >= 0:
                spans.append((start, start + len(value)))
                start = line.find(value, start + 1)
    if not spans:
        return line
    out, at = [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        out.append(line[at : max(start, at)])
        out.append(REDACTED)
        at = end
    return "".join(out) + line[at:]
