"""Incremental parsing: ``languages.parse`` gives the tree a fresh parse gives, edit after edit."""

import random
import sysconfig
import threading
import tomllib
from pathlib import Path

import pytest

from codespec.languages import LANGUAGES, has_syntax_error, parse

DATA = Path(__file__).parent / "data" / "syntax"
SNIPPETS = [
    "x",
    "\n",
    "    ",
    "(",
    ")",
    "{",
    "}",
    '"',
    "'",
    "# é λ 漢\n",
    "/* ",
    " */",
    "if a:",
    ";",
]


def nodes(tree) -> list[tuple]:
    """Every node's type, bytes and (row, column) points, in order."""
    out, cursor = [], tree.walk()
    while True:
        node = cursor.node
        out.append((node.type, node.start_byte, node.end_byte, node.start_point, node.end_point))
        if cursor.goto_first_child() or cursor.goto_next_sibling():
            continue
        while cursor.goto_parent():
            if cursor.goto_next_sibling():
                break
        else:
            return out


def fresh(language, text: str) -> list[tuple]:
    """The nodes of a parse from scratch."""
    return nodes(language.parser.parse(text.encode("utf-8")))


def sources(language_name: str) -> str:
    """Real code in the language: the syntax cases' sources joined (the cursor mark dropped)."""
    name = {"typescriptreact": "tsx", "shellscript": "bash"}.get(language_name, language_name)
    spec = tomllib.loads((DATA / f"{name}.toml").read_text(encoding="utf-8"))
    return "\n".join(case["source"].replace("⎀", "") for case in spec["case"])


def random_edit(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text) + 1)
    if rng.random() < 0.5 or not text:
        return text[:at] + rng.choice(SNIPPETS) + text[at:]
    return text[:at] + text[at + rng.randrange(1, 40) :]


@pytest.mark.parametrize("name", ["python", "rust", "typescriptreact", "go", "c", "shellscript"])
def test_edit_after_edit_the_tree_equals_a_fresh_parse(name):
    language = LANGUAGES[name]
    if language.parser is None:
        pytest.skip(f"no grammar for {name}")
    rng = random.Random(name)
    text = sources(name)
    for step in range(150):
        text = random_edit(rng, text)
        if step % 50 == 49:
            text = sources(name)[::-1][:200]  # an unrelated text (another document)
        tree = parse(language, text)
        assert nodes(tree) == fresh(language, text), f"step {step}"
        assert has_syntax_error(language, text) is tree.root_node.has_error


def test_a_tree_handed_out_is_not_changed_by_later_parses():
    python = LANGUAGES["python"]
    text = Path(sysconfig.get_paths()["stdlib"], "textwrap.py").read_text()
    tree = parse(python, text)
    before = nodes(tree)
    middle = text.index("\n", len(text) // 2) + 1
    for i in range(5):
        parse(python, text[:middle] + "def f(:\n" * i + text[middle:])
    assert nodes(tree) == before
    assert tree.root_node.end_byte == len(text.encode("utf-8"))


def test_threads_parsing_at_once_each_get_their_own_text_s_tree():
    python = LANGUAGES["python"]
    base = sources("python")
    errors = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        text = base
        for _ in range(40):
            text = random_edit(rng, text)
            if nodes(parse(python, text)) != fresh(python, text):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
