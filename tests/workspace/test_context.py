"""What a file defines (real grammars, the wheels' own tag queries) and the cross-file context
chosen for a cursor: only names the file does not define, in a stable order, within budget."""

from __future__ import annotations

import time
from pathlib import Path

from codespec.prompt import FimRequest, build_fim_prompt
from codespec.workspace.context import ContextMemory, as_files, choose_chunks
from codespec.workspace.index import WorkspaceIndex, Workspaces
from codespec.workspace.symbols import definitions

SHAPES = '''"""Shapes."""

# A shape the user draws.
class Shape:
    """A shape with sides."""

    sides: int = 0

    def __init__(self, name: str, sides: int = 0) -> None:
        self.name = name
        self.sides = sides

    def scaled(self, factor: float) -> "Shape":
        return Shape(self.name, self.sides)


def perimeter(shape: Shape, side: float) -> float:
    """The perimeter of a regular shape."""
    total = shape.sides * side
    return total
'''

MAIN = """from shapes import Shape, perimeter


def report(shape):
    length = perimeter(
"""


def index_of(tmp_path: Path, files: dict[str, str]) -> WorkspaceIndex:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    index = WorkspaceIndex(tmp_path)
    index.build()
    return index


def test_definitions_are_signatures_and_outlines_not_bodies():
    found = {d.name: d for d in definitions("python", SHAPES)}
    assert {"Shape", "__init__", "scaled", "perimeter"} <= set(found)
    perimeter = found["perimeter"].summary
    assert perimeter.startswith("def perimeter(shape: Shape, side: float) -> float:")
    assert '"""The perimeter of a regular shape."""' in perimeter and "total" not in perimeter
    shape = found["Shape"].summary
    assert shape.startswith("# A shape the user draws.\nclass Shape:")
    assert "sides: int = 0" in shape and "def scaled(self, factor: float)" in shape
    assert "self.name = name" not in shape  # the methods' bodies are left out


def test_definitions_in_other_languages():
    go = "package geo\n\n// Point is a point.\ntype Point struct {\n\tX, Y float64\n}\n\n"
    go += "func (p Point) Dist(q Point) float64 {\n\treturn 0\n}\n"
    found = {d.name: d.summary for d in definitions("go", go)}
    assert "X, Y float64" in found["Point"] and "// Point is a point." in found["Point"]
    assert found["Dist"] == "func (p Point) Dist(q Point) float64;"
    ts = "export class Store<T> {\n  add(item: T): void { this.items.push(item); }\n}\n"
    ts += "export function makeStore<T>(seed: T[]): Store<T> { return new Store(); }\n"
    found = {d.name: d.summary for d in definitions("typescript", ts)}
    assert found["makeStore"] == "export function makeStore<T>(seed: T[]): Store<T>;"
    assert "add(item: T): void;" in found["Store"]
    rust = "/// Adds.\npub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n"
    assert {d.name: d.summary for d in definitions("rust", rust)}["add"] == (
        "/// Adds.\npub fn add(a: i32, b: i32) -> i32;"
    )
    assert definitions("shellscript", "f() { :; }\n") == []  # no tag queries: nothing


def test_a_name_used_near_the_cursor_brings_its_definition(tmp_path):
    index = index_of(tmp_path, {"shapes.py": SHAPES, "main.py": MAIN})
    chunks = choose_chunks(index, "main.py", "python", MAIN, "", 2000)
    names = [c.definition.name for c in chunks]
    assert names == ["perimeter"]  # (Shape, named on the import line far above, is not near)
    assert all(c.path == "shapes.py" for c in chunks)
    files = as_files(chunks)
    assert len(files) == 1 and files[0][0] == "shapes.py"
    assert "def perimeter(shape: Shape, side: float) -> float:" in files[0][1]


def test_nothing_is_added_without_a_reason(tmp_path):
    local = "def helper(x):\n    return x\n\n\ndef run():\n    value = helper(\n"
    index = index_of(tmp_path, {"shapes.py": SHAPES, "main.py": local})
    # helper is defined in the file itself; no name near the cursor is defined elsewhere
    assert choose_chunks(index, "main.py", "python", local, "", 2000) == []
    assert choose_chunks(index, "main.py", "python", MAIN, "", 0) == []


def test_a_name_being_typed_is_looked_up_by_its_start(tmp_path):
    index = index_of(tmp_path, {"shapes.py": SHAPES, "main.py": "x = 1\n"})
    chunks = choose_chunks(index, "main.py", "python", "value = peri", "", 2000)
    assert [c.definition.name for c in chunks] == ["perimeter"]


def test_other_languages_and_ambiguous_names_stay_out(tmp_path):
    files = {"shapes.py": SHAPES, "lib.go": "package lib\n\nfunc perimeter() int { return 1 }\n"}
    files |= {f"m{n}.py": "def common():\n    pass\n" for n in range(5)}
    index = index_of(tmp_path, files)
    chunks = choose_chunks(index, None, "python", "common()\nperimeter(", "", 4000)
    assert [(c.path, c.definition.name) for c in chunks] == [("shapes.py", "perimeter")]


def test_the_chunks_keep_their_places_while_they_fit(tmp_path):
    more = "def area(shape: Shape) -> float:\n    return 0.0\n"
    index = index_of(tmp_path, {"shapes.py": SHAPES, "area.py": more, "main.py": MAIN})
    memory = ContextMemory()
    first = choose_chunks(index, "main.py", "python", "x = perimeter(", "", 4000, memory)
    second = choose_chunks(
        index, "main.py", "python", "y = area(\nx = perimeter(", "", 4000, memory
    )
    assert second[: len(first)] == first and second[-1].definition.name == "area"
    # chunks no longer wanted stay while there is room: the cached prompt stays valid
    assert choose_chunks(index, "main.py", "python", "y = area(", "", 4000, memory) == second
    # over budget, the newest wanted chunks still fit where the oldest wanted ones were
    budget = len(second[-1].definition.summary) + 1
    third = choose_chunks(index, "main.py", "python", "y = area(", "", budget, memory)
    assert [c.definition.name for c in third] == ["area"]


def test_the_prompt_shows_the_definitions_with_their_paths_before_the_file(tmp_path, tiny_manifest):
    from transformers import AutoTokenizer

    from codespec.models import load_manifest

    index = index_of(tmp_path, {"pkg/shapes.py": SHAPES, "pkg/main.py": MAIN})
    files = as_files(choose_chunks(index, "pkg/main.py", "python", MAIN, "", 2000))
    tokenizer = AutoTokenizer.from_pretrained(tiny_manifest.parent / "tiny")
    tokens = load_manifest(tiny_manifest).tokens
    request = FimRequest(MAIN, "", "pkg/main.py", "", files)
    text = tokenizer.decode(build_fim_prompt(tokenizer, tokens, request)[0])
    assert text.index("pkg/shapes.py\n") < text.index("def perimeter(") < text.index("pkg/main.py")


def test_documents_replace_what_the_disk_said_and_indexes_are_shared(tmp_path):
    index = index_of(tmp_path, {"shapes.py": SHAPES})
    index.put("shapes.py", "python", "def renamed(a):\n    pass\n")
    assert "perimeter" not in index.by_name and "renamed" in index.by_name
    index.remove("shapes.py")
    assert index.by_name == {} and index.files == {}
    workspaces = Workspaces()
    one, two = workspaces.acquire(str(tmp_path)), workspaces.acquire(str(tmp_path) + "/.")
    assert one is two and one.ready.wait(10)
    workspaces.release(one)
    assert not one.stopped
    workspaces.release(two)
    assert one.stopped and workspaces.indexes == {}
    assert workspaces.acquire(str(tmp_path / "missing")) is None


def test_a_prompt_sized_by_time_gives_its_other_files_their_share_and_no_more():
    """The same time budget either way: without other files the prefix and suffix take all of
    it; with workspace definitions the other files take the larger share they are given."""
    from codespec.completion import CompletionOptions, sized_by_time
    from codespec.workspace.context import EXTRA_SHARE_WITH_DEFINITIONS

    options = CompletionOptions(prompt_seconds=10.0)  # 1,000 tokens at 100 tokens/s
    alone = sized_by_time(options, 100.0, has_extra=False)
    usual = sized_by_time(options, 100.0)
    rich = sized_by_time(
        CompletionOptions(prompt_seconds=10.0, extra_share=EXTRA_SHARE_WITH_DEFINITIONS), 100.0
    )
    assert (alone.prefix_tokens, alone.suffix_tokens, alone.extra_tokens) == (750, 250, 0)
    assert (usual.prefix_tokens, usual.suffix_tokens, usual.extra_tokens) == (600, 200, 200)
    assert (rich.prefix_tokens, rich.suffix_tokens, rich.extra_tokens) == (450, 150, 400)
    assert sized_by_time(CompletionOptions(), 100.0) == CompletionOptions()  # no budget: as set


def test_the_root_the_home_folder_and_too_many_folders_are_not_indexed(tmp_path, monkeypatch):
    from codespec.workspace import index as index_module

    workspaces = Workspaces()
    assert workspaces.acquire("/") is None
    monkeypatch.setattr(index_module.Path, "home", lambda: tmp_path)
    assert workspaces.acquire(str(tmp_path)) is None
    folders = [tmp_path / f"p{n}" for n in range(index_module.MAX_INDEXES + 1)]
    for folder in folders:
        folder.mkdir()
    held = [workspaces.acquire(str(folder)) for folder in folders]
    assert all(held[:-1]) and held[-1] is None
    workspaces.release(held[0])
    assert workspaces.acquire(str(folders[-1])) is not None  # room again


def test_choosing_while_the_index_is_being_built_does_not_fail(tmp_path):
    """Requests choose context on the event loop while the index thread adds names: lookups by
    a name's start go through a sorted copy, never over the live dict."""
    import itertools
    import threading

    from codespec.workspace.index import NAMES_REFRESH_S, WorkspaceIndex

    index = WorkspaceIndex(tmp_path)
    stop = threading.Event()
    put = [0]

    def build():
        while not stop.is_set():
            n = put[0]
            index.put(f"m{n % 50}.py", "python", f"def perimeter_{n}(a):\n    pass\n")
            put[0] = n + 1

    thread = threading.Thread(target=build)
    thread.start()
    deadline = time.monotonic() + 60
    try:  # (at least 300 choices, and on until every one of the 50 files was put twice)
        for chosen in itertools.count():
            if chosen >= 300 and put[0] >= 100 or time.monotonic() > deadline:
                break
            choose_chunks(index, "main.py", "python", "x = perimeter_1(\ny = peri", "", 2000)
    finally:
        stop.set()
        thread.join()
    time.sleep(NAMES_REFRESH_S)  # the sorted copy catches up with the last change
    names = index.names_starting("perimeter_")
    assert len(names) == 50 and all(n.startswith("perimeter_") for n in names)  # one a file
    assert index.names_starting("zzz") == []
