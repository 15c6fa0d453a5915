"""Redaction of context bound for a remote engine: the secrets scanners recognise are gone,
and code that holds none is left exactly as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from codespec.workspace.redaction import REDACTED, redact

REPO = Path(__file__).resolve().parents[2]

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SECRETS = {
    "AKIAIOSFODNN7EXAMPLE": 'class Config:\n    aws_key = "{}"\n',
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY": 'AWS_SECRET_ACCESS_KEY = "{}"\n',
    "hunter2hunter2": 'def connect(host, password="{}"):\n    pass\n',
    "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB": '    """Log in with {} first."""\n',
    "9f8e7d6c5b4a39281706f5e4d3c2b1a0": '    api_token: str = "{}"\n',
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx": 'SLACK = "{}"\n',
    "sk-proj-abcdefghijklmnopqrstuvwxyzABCDEFGH1234567890": 'client = OpenAI(api_key="{}")\n',
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc": "stripe.api_key = '{}'\n",
    "s3cr3tpass": 'DATABASE_URL = "postgres://admin:{}@db.internal:5432/app"\n',
    "MIIEpAIBAAKCAQEA7bq9": (
        'KEY = """-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----"""\n'
    ),
    JWT: 'HEADERS = {{"Authorization": "Bearer {}"}}\n',
    # values bound to a secret's name, however plain the value; such lines in prose
    "correcthorsebattery": 'def login(user, token="{}"):\n    pass\n',
    "staplehorsebattery": 'function login(user: string, token: string = "{}") {{}}\n',
    "batterystaplehorse": 'export const config = {{ apiToken: "{}", retries: 3 }};\n',
    "horsebatterystaple": 'SETTINGS = {{"db_password": "{}"}}\n',
    "tr0ub4dor": '    """Connect to staging.\n\n    admin password: {}\n    """\n',
    "letmein-please": "// token: {}\n",
}


@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_a_recognised_secret_is_redacted_and_the_code_around_it_kept(secret):
    text = SECRETS[secret].format(secret)
    redacted = redact(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert redacted.splitlines()[0].split()[0] == text.splitlines()[0].split()[0]


@pytest.mark.parametrize(
    "folder", ["codespec", "editor-plugins/neovim", "editor-plugins/vscode/src", "scripts", "docs"]
)
def test_code_without_secrets_is_left_exactly_as_it_was(folder):
    files = [
        p
        for p in sorted((REPO / folder).rglob("*"))
        if p.suffix in (".py", ".lua", ".sh", ".ts", ".md") and "node_modules" not in p.parts
    ]
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert redact(text) == text, path
