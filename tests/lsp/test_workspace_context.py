"""Workspace context over real JSON-RPC against the shared daemon (tiny model): a session that
declares a folder gets the definitions its other files hold in its prompts, and the stats say
so (``codespec/stats`` by context); a session that turned it off, an untrusted folder, a
document outside the folder or a folder that is not a local path get none."""

from __future__ import annotations

import time

import pytest
from lsp_helpers import SOCKET
from rpc import RawClient, did_open, folder_session, inline_request

pytestmark = pytest.mark.usefixtures("daemon")
OPTIONS = {"stopRules": False, "maxTokens": 4, "warmAhead": False}
TAX = 'def compute_total(items, tax_rate):\n    """Sum the items, with tax."""\n    return 0\n'
MAIN = "from tax import compute_total\n\n\ndef run(items):\n    return compute_total(\n"


def session(folders: list[str], options: dict = OPTIONS, **capabilities) -> RawClient:
    return folder_session(SOCKET, folders, options, **capabilities)


def counts(client: RawClient) -> dict[str, int]:
    """Requests so far per "language context" group of the daemon's stats."""
    client.send(
        {"jsonrpc": "2.0", "id": "st", "method": "codespec/stats", "params": {"by": "context"}}
    )
    reply = client.reply_to("st")["result"]
    return {g["key"]: g["requests"] for g in reply.get("groups", [])}


def with_definitions(counts: dict[str, int]) -> int:
    """Requests whose prompt held workspace definitions (beside other sources or not)."""
    return sum(n for key, n in counts.items() if "workspace" in key.split(" ", 1)[1])


def counted(client: RawClient, total: int, timeout: float = 10.0) -> dict[str, int]:
    """The stats' counts once they hold ``total`` requests (a request's row lands after its
    reply): a check that nothing changed can then fail, since the request was counted."""
    deadline = time.monotonic() + timeout
    while sum((now := counts(client)).values()) < total:
        assert time.monotonic() < deadline, f"the stats never counted {total} requests: {now}"
        time.sleep(0.1)
    return now


def ask(client: RawClient, uri: str, n: int) -> None:
    client.send(inline_request(f"q{n}", uri, 4, len("    return compute_total(")))
    assert "result" in client.reply_to(f"q{n}")


def test_definitions_from_the_folder_reach_the_prompt_only_where_allowed(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "tax.py").write_text(TAX, encoding="utf-8")
    main = project / "main.py"
    main.write_text(MAIN, encoding="utf-8")
    outside = tmp_path / "elsewhere.py"

    client = session([project.as_uri()])
    client.send(did_open(main.as_uri(), MAIN))
    before = with_definitions(counts(client))
    deadline = time.monotonic() + 30  # the index is built in the background
    n = 0
    while with_definitions(counts(client)) == before:
        assert time.monotonic() < deadline, "no request got workspace context"
        ask(client, main.as_uri(), n := n + 1)
        time.sleep(0.2)

    def no_context(client: RawClient, uri: str, text: str = MAIN) -> None:
        client.send(did_open(uri, text))
        start = counts(client)
        for m in range(2):
            ask(client, uri, 100 + m)
        end = counts(client)
        assert with_definitions(end) == with_definitions(start)
        assert len(end) and sum(end.values()) == sum(start.values()) + 2

    no_context(client, outside.as_uri())  # not below the declared folder
    off = session([project.as_uri()], {**OPTIONS, "workspaceContext": False})
    no_context(off, main.as_uri())
    untrusted = session([project.as_uri()], experimental={"codespecWorkspaceTrusted": False})
    no_context(untrusted, main.as_uri())
    remote = session(["vscode-remote://ssh-remote+host" + str(project), "file://otherhost/x"])
    no_context(remote, main.as_uri())


BILLING = (
    "import ledger\n\n\n"
    "def charge(customer, invoice, gateway):\n"
    "    receipt = gateway.capture(invoice.total, customer.card)\n"
    "    ledger.record(customer, invoice, receipt)\n"
    "    return receipt\n"
)
REFUND = (
    "def refund(customer, invoice, gateway):\n"
    "    receipt = gateway.reverse(invoice.total, customer.card)\n"
    "    ledger.record(customer, invoice, receipt)\n"
    "    \n"
)


def test_a_similar_open_document_reaches_the_prompt_as_a_snippet(tmp_path):
    """No folder needed: another open document whose code is like the code above the cursor
    is shown (the stats say "neighbours"); one with nothing alike is not."""
    client = session([])
    billing, refund = (tmp_path / "billing.py").as_uri(), (tmp_path / "refund.py").as_uri()
    client.send(did_open(refund, REFUND))
    client.send(inline_request("alone", refund, 3, 4))
    assert "result" in client.reply_to("alone")
    start = counts(client)
    client.send(did_open((tmp_path / "unlike.py").as_uri(), "x = 1\ny = 2\n"))
    client.send(inline_request("unlike", refund, 3, 4))
    assert "result" in client.reply_to("unlike")
    client.send(did_open(billing, BILLING))
    client.send(inline_request("like", refund, 3, 4))
    assert "result" in client.reply_to("like")
    deadline = time.monotonic() + 10  # (the stats row is written after the reply)
    while sum((end := counts(client)).values()) < sum(start.values()) + 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert end.get("python neighbours", 0) == start.get("python neighbours", 0) + 1
    assert end.get("python in-file", 0) == start.get("python in-file", 0) + 1


def test_a_hostile_folder_neither_stalls_other_sessions_nor_its_own_index(tmp_path):
    """A .gitignore of wildcards written to backtrack (against names of many ``a``) and files
    that parse into trees a tags query crawls for long (hundreds of thousands of ``(``): each
    name and each file costs a bounded time, and the sessions keep their turn meanwhile (both
    were matched or queried in one C call holding the interpreter, seconds per item)."""
    project = tmp_path / "hostile"
    project.mkdir()
    (project / ".gitignore").write_text("*a" * 14 + "*b\n" + "a*a*a*a*a*a*a*a*a*a*a*c/\n")
    for n in range(12):
        (project / ("a" * 40 + f"{n}.py")).write_text(f"X{n} = 1\n", encoding="utf-8")
        (project / ("a" * 40 + str(n))).mkdir()
    (project / "aa_parens.py").write_text("(" * 200_000, encoding="utf-8")
    (project / "aa_braces.js").write_text("{" * 200_000, encoding="utf-8")
    (project / "tax.py").write_text(TAX, encoding="utf-8")  # sorted after the hostile files
    main = project / "main.py"
    main.write_text(MAIN, encoding="utf-8")

    bystander = session([])
    bystander.send(did_open("file:///tmp/bystander.py", "def f(x):\n    \n"))
    client = session([project.as_uri()])
    client.send(did_open(main.as_uri(), MAIN))
    slowest, n = 0.0, 0
    deadline = time.monotonic() + 40
    while with_definitions(counts(client)) == 0:
        assert time.monotonic() < deadline, "the hostile folder's index never got to tax.py"
        t0 = time.monotonic()
        bystander.send(inline_request(f"b{n}", "file:///tmp/bystander.py", 1, 4))
        assert "result" in bystander.reply_to(f"b{n}")
        slowest = max(slowest, time.monotonic() - t0)
        ask(client, main.as_uri(), n := n + 1)
        time.sleep(0.1)
    assert slowest < 3.0, f"another session waited {slowest:.1f} s while the folder was read"


def test_folders_added_and_removed_later_are_followed(tmp_path):
    """``changeNotifications`` is advertised: a folder the client adds after ``initialize``
    gives definitions like a declared one, and once removed it gives none."""
    project = tmp_path / "later"
    project.mkdir()
    (project / "tax.py").write_text(TAX, encoding="utf-8")
    main = project / "main.py"
    main.write_text(MAIN, encoding="utf-8")
    client = session([])
    client.send(did_open(main.as_uri(), MAIN))

    def folders_changed(added: list[str], removed: list[str]) -> None:
        client.send(
            {
                "jsonrpc": "2.0",
                "method": "workspace/didChangeWorkspaceFolders",
                "params": {
                    "event": {
                        "added": [{"uri": uri, "name": "w"} for uri in added],
                        "removed": [{"uri": uri, "name": "w"} for uri in removed],
                    }
                },
            }
        )

    first = counts(client)
    before = with_definitions(first)
    ask(client, main.as_uri(), 0)
    assert with_definitions(counted(client, sum(first.values()) + 1)) == before  # no folder yet
    folders_changed([project.as_uri(), "https://example.com/not-local"], [])
    deadline, n = time.monotonic() + 30, 0
    while with_definitions(counts(client)) == before:
        assert time.monotonic() < deadline, "the added folder gave no context"
        ask(client, main.as_uri(), n := n + 1)
        time.sleep(0.2)
    folders_changed([], [project.as_uri()])
    time.sleep(0.5)  # (the stats rows of the requests before land)
    removed = counts(client)
    for m in range(2):
        ask(client, main.as_uri(), 200 + m)
    after = counted(client, sum(removed.values()) + 2)  # both counted, neither with definitions
    assert with_definitions(after) == with_definitions(removed)
