"""What of a workspace reaches a remote server, over real JSON-RPC to a daemon decoding on a
real llama-cpp-python server behind a proxy that keeps every request body: the definitions of
a file the user never opened go there with recognised secrets redacted, and none at all with
``remoteWorkspaceContext`` off."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from remote_helpers import daemon_on_a_remote_engine, needs_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lsp"))
from rpc import did_open, folder_session, inline_request  # noqa: E402

pytestmark = needs_server
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
PASSWORD = "hunter2hunter2"
ADMIN_PASSWORD = "tr0ub4dor-staging"  # (in a docstring line, "admin password: ...")
TOKEN = "correcthorsebattery"  # (a plain default argument: no digits, nothing generated)
SECRETS = (AWS_KEY, PASSWORD, ADMIN_PASSWORD, TOKEN)
SETTINGS = (
    "class Settings:\n"
    f'    aws_key = "{AWS_KEY}"\n\n'
    f'    def connect(self, host, password="{PASSWORD}", token="{TOKEN}"):\n'
    '        """Open the billing database.\n\n'
    f"        admin password: {ADMIN_PASSWORD}\n"
    '        """\n'
    "        return host\n"
)
MAIN = (
    "from settings import Settings\n\n\ndef run():\n    config = Settings()\n    config.connect(\n"
)


def prompts_sent(proxy, since: int) -> list[str]:
    prompts = []
    for body in proxy.bodies[since:]:
        try:
            prompts.append(json.loads(body)["prompt"])
        except (ValueError, KeyError):
            pass
    return prompts


def test_unopened_files_reach_the_server_redacted_or_not_at_all(tiny_manifest, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "settings.py").write_text(SETTINGS, encoding="utf-8")
    options = {"stopRules": False, "maxTokens": 4, "warmAhead": False}
    with daemon_on_a_remote_engine(tiny_manifest, tmp_path) as (_, proxy, socket_path):
        client = folder_session(socket_path, [project.as_uri()], options)
        deadline, n, with_context = time.monotonic() + 30, 0, []
        while not with_context:  # the folder is indexed in the background
            assert time.monotonic() < deadline, "no prompt held the folder's definitions"
            since = len(proxy.bodies)
            # (a new document each time: a document's prompt is kept while it is typed at)
            uri = (project / f"main{(n := n + 1)}.py").as_uri()
            client.send(did_open(uri, MAIN))
            client.send(inline_request(n, uri, 5, 19))
            assert "result" in client.reply_to(n)
            with_context = [p for p in prompts_sent(proxy, since) if "def connect" in p]
            time.sleep(0.2)
        prompt = with_context[0]
        assert "settings.py" in prompt and "<redacted>" in prompt
        assert not [secret for secret in SECRETS if secret in prompt], prompt

        off = folder_session(
            socket_path, [project.as_uri()], {**options, "remoteWorkspaceContext": False}
        )
        since = len(proxy.bodies)
        for m in range(2):
            uri = (project / f"off{m}.py").as_uri()
            off.send(did_open(uri, MAIN))
            off.send(inline_request(f"off{m}", uri, 5, 19))
            assert "result" in off.reply_to(f"off{m}")
        sent = prompts_sent(proxy, since)
        assert sent and not any("def connect" in p or AWS_KEY in p for p in sent)
