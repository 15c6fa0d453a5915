"""What a server sends back, made safe to log and to show in every editor's status.

A server may echo the request's credentials (a careless proxy puts the whole header into its
401 page), and what it sends is cut before it is shown: a cut can leave part of the token
behind, and a part is a secret too. So every run of ``SECRET_PART`` or more characters of the
token is masked, wherever it stands, before anything is cut; and control characters (escape
sequences, bells, carriage returns that would rewrite a terminal line) become spaces.
"""

from __future__ import annotations

from ..printable import printable

# The shortest run of the token's characters that is masked. Shorter runs match ordinary text
# too often to mean anything, and tell nothing of a token of many random characters.
SECRET_PART = 4
SHOWN_CHARS = 200  # what of a server's words reaches a log line or a status message


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every run of ``SECRET_PART`` or more characters of ``secret`` replaced by
    ``<token>``."""
    if not secret or not text:
        return text
    masked = [False] * len(text)
    width = min(SECRET_PART, len(secret))
    for start in range(len(secret) - width + 1):
        piece = secret[start : start + width]
        found = text.find(piece)
        while found != -1:
            masked[found : found + width] = [True] * width
            found = text.find(piece, found + 1)
    out: list[str] = []
    for i, char in enumerate(text):
        if not masked[i]:
            out.append(char)
        elif i == 0 or not masked[i - 1]:
            out.append("<token>")
    return "".join(out)


def shown(text: str, secret: str | None) -> str:
    """A server's words as a log line or a status shows them: scrubbed of the secret, then
    printable only, then cut to ``SHOWN_CHARS``."""
    clean = printable(scrub(text, secret), " ")
    return " ".join(clean.split())[:SHOWN_CHARS]
