"""Next-edit cases cut from the corpus's real code (``codespec bench --edits``).

Each case is a user's first edit and what should follow it in the window around it (Sweep's
21 lines, ``nextedit/prompt.py``):

* ``rename``: a local name renamed where it is first assigned; its later uses in the window
  should follow;
* ``parameter``: a function's parameter renamed in its header; its uses in the body that the
  window shows should follow;
* ``comment``: a comment line reworded; nothing should follow (an edit drawn here is noise).

Cases are found by patterns on lines, not by parsing: a name's uses are its whole-word
occurrences that are not an attribute (``x.name``), up to the end of its scope (by indentation
in Python, by braces elsewhere). A case is skipped where a pattern cannot tell what should
follow: the name also in the window above the edit, or quoted or in a comment in its scope.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..nextedit import prompt as nes
from ..nextedit.history import EditHistory
from .sources import Package, source_files

KINDS = ("rename", "parameter", "comment")
# the languages the bench cuts from unless told (one of each family the corpus has)
DEFAULT_LANGUAGES = ("python", "javascript", "typescript", "go", "rust", "java")
SNAKE_CASE = {"python", "rust", "ruby", "lua", "c", "cpp", "shellscript"}
NAME_LAST = {"java", "c", "cpp"}  # typed parameters written ``Type name``
INDENTED = {"python"}  # scopes by indentation (the others: by braces)
KEYWORDS = {"self", "this", "mut", "const", "let", "var", "int", "return", "None", "null", "true"}
MIN_NAME = 3

ASSIGNED = re.compile(
    r"^(\s*)(?:(?:let|const|var|local|my|auto|final|int|long|double|String|boolean)\s+)?"
    r"(?:mut\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|=)(?!=)"
)
HEADER = re.compile(r"\b(?:def|function|func|fn)\b[^(\n]*\(([^()\n]*)\)")
C_HEADER = re.compile(r"^\s*[\w<>\[\],.*& ]+?[\s*&]([A-Za-z_]\w*)\s*\(([^()\n;]*)\)\s*[{]?\s*$")
COMMENT = re.compile(r"^(\s*)(#|//|--)\s+([A-Za-z].*\S)\s*$")
COMMENT_MARK = {"python": "#", "shellscript": "#", "lua": "--"}  # others: ``//``


@dataclass(frozen=True)
class EditCase:
    language: str
    kind: str  # one of KINDS
    origin: str  # "file:line", for the report
    path: str  # the name the prompt gives the file
    text: str  # the document after the user's edit
    line: int  # the line the user edited (the cursor's)
    before: str  # the document before it
    start: int  # where the edit replaced ``removed`` with ``inserted``
    removed: str
    inserted: str
    expected: str  # the window as it should become (the current one: nothing should follow)

    def history(self) -> EditHistory:
        """The document's history as the daemon would hold it: opened, then this one edit."""
        history = EditHistory.opened(self.before)
        history.record(self.before, self.start, self.removed, self.inserted, now=0.0)
        return history

    def window(self) -> nes.Window:
        return nes.window_around(self.text, self.line)


def uses(name: str) -> re.Pattern[str]:
    """A name's whole-word occurrences that are not an attribute (``x.name``)."""
    return re.compile(rf"(?<![.\w]){re.escape(name)}(?!\w)")


def new_name(name: str, language: str) -> str:
    if "_" in name or (language in SNAKE_CASE and name.islower()):
        return name + "_value"
    return name + "Value"


def cut(
    packages: list[Package], languages: list[str], per_kind: int, seed: int
) -> tuple[list[EditCase], list[str]]:
    """Up to ``per_kind`` cases of each kind per language (one a file, files in a seeded
    order), and a line for each language the corpus lacks or that gave fewer."""
    rng = random.Random(seed)
    cases: list[EditCase] = []
    short: list[str] = []
    for language in languages:
        files = [f for p in packages if p.spec.language == language for f in source_files(p)]
        if not files:
            short.append(f"{language}: no sources")
            continue
        rng.shuffle(files)
        for kind in KINDS:
            found = 0
            for path in files:
                if found >= per_kind:
                    break
                case = case_in(path, language, kind, rng)
                if case is not None:
                    cases.append(case)
                    found += 1
            if found < per_kind:
                short.append(f"{language}: {found} of {per_kind} {kind} cases")
    return cases, short


def case_in(path: Path, language: str, kind: str, rng: random.Random) -> EditCase | None:
    """One case of ``kind`` in a file (chosen at random among the file's), or None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines(keepends=True)
    finders = {"rename": _rename, "parameter": _parameter, "comment": _comment}
    found = [c for i in range(len(lines)) if (c := finders[kind](lines, i, language))]
    if not found:
        return None
    line, start_in_line, removed, inserted, expected_from = rng.choice(found)
    start = sum(map(len, lines[:line])) + start_in_line
    edited = text[:start] + inserted + text[start + len(removed) :]
    window = nes.window_around(edited, line)
    wanted = window.text.splitlines(keepends=True)
    if expected_from is not None:
        pattern, replacement = expected_from
        end = scope_end(lines, line, language, kind)
        for k in range(line + 1 - window.first, min(len(wanted), end - window.first)):
            wanted[k] = pattern.sub(replacement, wanted[k])
    return EditCase(
        language, kind, f"{path.name}:{line + 1}", path.name, edited, line, text, start,
        removed, inserted, "".join(wanted),
    )  # fmt: skip


# (the edited line, where in it, the text removed, the text inserted, how the lines below
# should follow: a pattern and its replacement, or None for nothing)
Found = tuple[int, int, str, str, tuple[re.Pattern[str], str] | None]
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "else", "do"}


def scope_end(lines: list[str], i: int, language: str, kind: str) -> int:
    """The line after the last one the name declared on line ``i`` reaches: for a parameter
    the function's body, for a local the block it is assigned in."""
    if language in INDENTED:
        own = _indent(lines[i])
        for k in range(i + 1, len(lines)):
            if not lines[k].strip():
                continue
            indent = _indent(lines[k])
            if kind == "parameter" and indent <= own and not lines[k].lstrip().startswith(")"):
                return k
            if kind != "parameter" and (indent < own and _starts_definition(lines[k])):
                return k
        return len(lines)
    depth, opened = 0, kind != "parameter"  # (a header's body opens on its line or the next)
    for k in range(i, len(lines)):
        depth += lines[k].count("{") - lines[k].count("}")
        opened = opened or depth > 0
        if (kind == "parameter" and opened and depth <= 0) or depth < 0:
            return k + 1 if kind == "parameter" else k
    return len(lines)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _starts_definition(line: str) -> bool:
    """A line that ends a Python local's block: at the top level, or a new definition."""
    return _indent(line) == 0 or re.match(r"\s*(async\s+def|def|class|@)", line) is not None


def _renamed_in_window(lines: list[str], i: int, name: str, language: str, kind: str) -> bool:
    """Whether renaming ``name`` on line ``i`` makes a case: it is used below in the window
    within its scope, never above it in the window, and neither quoted nor in a comment in
    its scope."""
    if len(name) < MIN_NAME or name in KEYWORDS:
        return False
    pattern = uses(name)
    above = "".join(lines[max(0, i - nes.WINDOW_RADIUS) : i])
    end = min(i + 1 + nes.WINDOW_RADIUS, scope_end(lines, i, language, kind))
    below = "".join(lines[i + 1 : end])
    quoted = re.search(rf"[\"'`][^\"'`\n]*\b{re.escape(name)}\b", below)
    mark = re.escape(COMMENT_MARK.get(language, "//"))
    commented = re.search(rf"{mark}[^\n]*\b{re.escape(name)}\b", below)
    return bool(pattern.search(below)) and not (pattern.search(above) or quoted or commented)


def _rename(lines: list[str], i: int, language: str) -> Found | None:
    match = ASSIGNED.match(lines[i])
    if not match or not _renamed_in_window(lines, i, match.group(2), language, "rename"):
        return None
    name = match.group(2)
    renamed = new_name(name, language)
    return i, match.start(2), name, renamed, (uses(name), renamed)


def _parameter(lines: list[str], i: int, language: str) -> Found | None:
    line = lines[i]
    match = HEADER.search(line) if language not in NAME_LAST else C_HEADER.match(line)
    if not match or (language in NAME_LAST and match.group(1) in CONTROL):
        return None
    params_at = match.start(match.lastindex or 1)
    params = match.group(match.lastindex or 1)
    for part in params.split(","):
        names = re.findall(r"[A-Za-z_]\w*", part.split("=")[0].split(":")[0])
        names = [n for n in names if n not in KEYWORDS]
        if not names:
            continue
        name = names[-1] if language in NAME_LAST else names[0]
        if not _renamed_in_window(lines, i, name, language, "parameter"):
            continue
        at = uses(name).search(params)
        if at is None:
            continue
        renamed = new_name(name, language)
        return i, params_at + at.start(), name, renamed, (uses(name), renamed)
    return None


def _comment(lines: list[str], i: int, language: str) -> Found | None:
    match = COMMENT.match(lines[i])
    mark = COMMENT_MARK.get(language, "//")
    if not match or match.group(2) != mark or len(match.group(3).split()) < 3:
        return None
    words = match.group(3)
    reworded = "In short: " + words[0].lower() + words[1:]
    return i, match.start(3), words, reworded, None
