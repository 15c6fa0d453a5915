"""What a user can configure, declared once: each setting's default and the values it takes.

``server/config.py`` reads them from the TOML file, CLI flags and LSP initializationOptions;
``completion_options`` turns them into what one completion asks (``completion.py``), for the
daemon, ``codespec complete`` and the bench alike, so none of them restates a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (at run time only where a completion is asked: see ``completion_options``)
    from .completion import CompletionOptions


def setting(
    default: Any,
    low: float | None = None,
    high: float | None = None,
    choices: tuple[str, ...] = (),
) -> Any:
    """A setting's default and the values it takes: ``low <= value <= high`` for numbers, one
    of ``choices`` for words. Declared here once; lsp/settings.schema.json and the VS Code
    extension's contributed settings are tested against these (``tests/test_settings.py``)."""
    return field(default=default, metadata={"low": low, "high": high, "choices": choices})


@dataclass(frozen=True)
class Settings:
    """What a user can configure (see lsp/settings.schema.json)."""

    enabled: bool = setting(True)
    disabled_languages: tuple[str, ...] = setting(())
    max_tokens: int = setting(64, 1, 1024)  # multi-line completions
    line_max_tokens: int = setting(48, 1, 512)  # single-line completions
    max_lines: int = setting(24, 1, 500)
    multiline: str = setting("auto", choices=("auto", "always", "never"))
    debounce_ms: int = setting(150, 0, 5000)  # a hint for the editor plugins
    prefix_tokens: int = setting(1024, 16, 32768)
    suffix_tokens: int = setting(256, 0, 32768)
    extra_context_tokens: int = setting(1024, 0, 65536)
    stop_rules: bool = setting(True)
    speculate: bool = setting(True)
    complete_mid_word: bool = setting(False)
    # size prompt windows to a cold prefill of this long; 0: off
    prompt_seconds: float = setting(2.5, 0, 600)
    warm_ahead: bool = setting(True)  # prefill where edits settle / the cursor rests, while idle
    warm_delay_ms: int = setting(300, 0, 60000)  # how long they must rest first
    # next keystrokes computed ahead while idle (lookahead.py); 0: off
    look_ahead_keys: int = setting(8, 0, 32)
    # definitions from the workspace folders' other files in the prompt (codespec/workspace)
    workspace_context: bool = setting(True)
    # with a remote engine: the workspace's definitions go to the server too (redacted first)
    remote_workspace_context: bool = setting(True)
    # next edits asked through textDocument/copilotInlineEdit (codespec/nextedit)
    next_edit_suggestions: bool = setting(True)
    # how sure the model must be of a next edit to show it (``nextedit/edits.py``, EAGERNESS)
    next_edit_eagerness: str = setting("medium", choices=("low", "medium", "high"))


def completion_options(settings: Settings, invoked: bool = False, **own: Any) -> CompletionOptions:
    """What one completion asks, from the settings (``invoked``: the user asked explicitly,
    which widens the mode); ``own``: what this request sets itself (a forced mode, a seed)."""
    # imported here: the settings are read by every command, the relay included, which must
    # start without the model's stack (``completion.py`` brings the engine and torch)
    from .completion import CompletionOptions

    options = CompletionOptions(
        max_tokens=settings.max_tokens,
        line_max_tokens=settings.line_max_tokens,
        max_lines=settings.max_lines,
        speculate=settings.speculate,
        stop_rules=settings.stop_rules,
        invoked=invoked,
        prefix_tokens=settings.prefix_tokens,
        suffix_tokens=settings.suffix_tokens,
        extra_tokens=settings.extra_context_tokens,
        prompt_seconds=settings.prompt_seconds,
        look_ahead_keys=settings.look_ahead_keys if settings.warm_ahead else 0,
    )
    return replace(options, **own)
