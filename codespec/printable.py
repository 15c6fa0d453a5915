"""Text from outside made safe to show: a model file's metadata, a model store's file names, a
client's labels. Such text may hold terminal escapes (``ESC ] 0 ; … BEL`` retitles a window,
``ESC [ 2 J`` clears it), a carriage return that overwrites what was printed, or a line break
that forges a second log line; everything Python does not count as printable (controls,
format characters such as bidi overrides, separators other than the space) is replaced
before it reaches a terminal, a log or an editor's status."""

from __future__ import annotations

import logging


def printable(text: object, replacement: str = "?") -> str:
    """``text`` as a string with every non-printable character replaced."""
    return "".join(c if c.isprintable() else replacement for c in str(text))


class PrintableFormatter(logging.Formatter):
    """A log line's message made printable (its traceback, when it has one, stays as Python
    wrote it: that is codespec's own text)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  (logging's name)
        record.message = printable(record.message)
        return super().formatMessage(record)
