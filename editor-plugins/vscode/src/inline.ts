// Ghost text: an InlineCompletionItemProvider over the codespec client's connection.
//
// A request goes out after `debounceMs` of quiet; while the server streams
// `codespec/partialCompletion`, the ghost text is refreshed with what has come so far. The final
// suggestion is kept, anchored where it was asked for: as the user types through it or accepts a
// word or a line, what is left is shown without asking the server again, and a suggestion that no
// longer fits the text at the cursor is never shown or inserted. Verdicts go to the server as
// lsp/PROTOCOL.md describes ("Verdicts").

import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import { codePoints, nextLine, nextWord, remainder } from "./pure";

/** A suggestion the server made, anchored at the place it was asked for. */
interface Suggestion {
  id: string | undefined; // the server's suggestion id (from the item's command)
  uri: string;
  anchor: number; // document offset where the suggestion starts
  lineBefore: string; // the anchor line's text before the anchor: an edit there ends it
  text: string;
  reportedShown: boolean;
}

/** A request in flight, and the text streamed for it so far. */
interface Pending {
  uri: string;
  version: number;
  offset: number;
  text: string;
  started: number;
  cancel: vscode.CancellationTokenSource;
  settled: Promise<void>; // resolves when the first text or the reply arrives
  settle: () => void;
}

export interface Events {
  busy(): void;
  done(latencyMs: number | undefined, error?: string): void;
}

const REFRESH_MS = 100;

export class GhostText implements vscode.InlineCompletionItemProvider {
  private suggestion: Suggestion | undefined;
  private pending: Pending | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private contextShown = false;

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly enabledFor: (document: vscode.TextDocument) => boolean,
    private readonly debounceMs: () => number,
    private readonly events: Events,
    private readonly log: (message: string) => void,
  ) {}

  // -- the provider ------------------------------------------------------------------------

  async provideInlineCompletionItems(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.InlineCompletionItem[]> {
    this.log(`inline completion asked at ${position.line}:${position.character} (trigger ${context.triggerKind})`);
    if (!this.enabledFor(document) || !this.client()) {
      return [];
    }
    const rest = this.fitting(document, position);
    if (rest !== undefined) {
      return this.show(rest, position);
    }
    const uri = document.uri.toString();
    const offset = document.offsetAt(position);
    let pending = this.pending;
    const same = pending && pending.uri === uri && pending.version === document.version && pending.offset === offset;
    if (!same) {
      if (context.triggerKind === vscode.InlineCompletionTriggerKind.Automatic) {
        await sleep(this.debounceMs());
        if (token.isCancellationRequested || !this.client()) {
          return []; // a newer keystroke asks instead (or the server went away meanwhile)
        }
      }
      pending = this.request(this.client()!, document, position, context.triggerKind);
    }
    await settledOrCancelled(pending!.settled, token);
    if (token.isCancellationRequested) {
      this.log(`cancelled at ${position.line}:${position.character}`);
      return [];
    }
    const final = this.fitting(document, position);
    if (final !== undefined) {
      return this.show(final, position);
    }
    if (this.pending === pending && pending!.text) {
      return [new vscode.InlineCompletionItem(pending!.text, new vscode.Range(position, position))];
    }
    return [];
  }

  private show(text: string, position: vscode.Position): vscode.InlineCompletionItem[] {
    const s = this.suggestion!;
    this.log(`showing ${JSON.stringify(text)} at ${position.line}:${position.character}`);
    const item = new vscode.InlineCompletionItem(text, new vscode.Range(position, position), {
      title: "codespec: accepted",
      command: "codespec.accepted",
      arguments: [s.id],
    });
    if (!s.reportedShown) {
      s.reportedShown = true;
      this.report("codespec.didShow", s.id);
    }
    void this.updateContext();
    return [item];
  }

  // -- requests ----------------------------------------------------------------------------

  private request(
    client: LanguageClient,
    document: vscode.TextDocument,
    position: vscode.Position,
    kind: vscode.InlineCompletionTriggerKind,
  ): Pending {
    this.pending?.cancel.cancel();
    this.forget();
    let settle = () => {};
    const settled = new Promise<void>((resolve) => (settle = resolve));
    const pending: Pending = {
      uri: document.uri.toString(),
      version: document.version,
      offset: document.offsetAt(position),
      text: "",
      started: Date.now(),
      cancel: new vscode.CancellationTokenSource(),
      settled,
      settle,
    };
    this.pending = pending;
    this.events.busy();
    const params = {
      textDocument: { uri: client.code2ProtocolConverter.asUri(document.uri) },
      position: { line: position.line, character: position.character },
      context: { triggerKind: kind === vscode.InlineCompletionTriggerKind.Invoke ? 1 : 2 },
    };
    client.sendRequest<InlineCompletionResult>("textDocument/inlineCompletion", params, pending.cancel.token).then(
      (result) => this.answered(document, pending, result),
      (error: { code?: number; message?: string }) => {
        this.log(`request failed: ${error?.code} ${error?.message}`);
        if (this.pending === pending) {
          this.pending = undefined;
          const cancelled = error?.code === -32800 || pending.cancel.token.isCancellationRequested;
          this.events.done(undefined, cancelled ? undefined : String(error?.message ?? error));
        }
        pending.settle();
      },
    );
    return pending;
  }

  private answered(document: vscode.TextDocument, pending: Pending, result: InlineCompletionResult): void {
    if (this.pending !== pending) {
      return pending.settle(); // superseded
    }
    this.pending = undefined;
    this.events.done(Date.now() - pending.started);
    this.log(`answered in ${Date.now() - pending.started} ms: ${JSON.stringify(result).slice(0, 200)}`);
    const items = Array.isArray(result) ? result : (result?.items ?? []);
    const item = items[0];
    const text = typeof item?.insertText === "string" ? item.insertText : item?.insertText?.value;
    // the version check: a reply for text the user has changed since is never shown
    if (text && document.version === pending.version && !document.isClosed) {
      const anchor = document.positionAt(pending.offset);
      this.suggestion = {
        id: item?.command?.arguments?.[0],
        uri: pending.uri,
        anchor: pending.offset,
        lineBefore: document.lineAt(anchor.line).text.slice(0, anchor.character),
        text,
        reportedShown: false,
      };
    }
    if (pending.text) {
      // streamed text is on screen: it becomes the suggestion, or goes when the reply is empty
      this.refreshSoon(pending);
    }
    pending.settle();
  }

  /** A `codespec/partialCompletion` notification: the text so far of the request in flight. */
  onPartial(params: { uri?: string; version?: number; text?: string }): void {
    const pending = this.pending;
    if (!pending || typeof params?.text !== "string" || !params.text) {
      return;
    }
    const client = this.client();
    const uri = client ? client.protocol2CodeConverter.asUri(String(params.uri)).toString() : params.uri;
    if (uri !== pending.uri || (typeof params.version === "number" && params.version !== pending.version)) {
      return;
    }
    pending.text = params.text;
    pending.settle();
    this.refreshSoon(pending);
  }

  /** Ask VS Code for the ghost text again (soon, at most every REFRESH_MS) if the cursor is
   * still where `pending` was asked. */
  private refreshSoon(pending: Pending): void {
    if (this.refreshTimer) {
      return;
    }
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      const editor = vscode.window.activeTextEditor;
      if (
        editor &&
        editor.document.uri.toString() === pending.uri &&
        editor.document.version === pending.version &&
        editor.document.offsetAt(editor.selection.active) === pending.offset
      ) {
        void refresh();
      }
    }, REFRESH_MS);
  }

  // -- the suggestion at the cursor ----------------------------------------------------------

  /** What is left of the suggestion at `position`, or undefined when none fits there. */
  private fitting(document: vscode.TextDocument, position: vscode.Position): string | undefined {
    const s = this.suggestion;
    if (!s || s.uri !== document.uri.toString()) {
      return undefined;
    }
    const anchor = document.positionAt(s.anchor); // clamped to the document's end
    if (document.offsetAt(anchor) !== s.anchor || document.offsetAt(position) < s.anchor) {
      return undefined;
    }
    if (document.lineAt(anchor.line).text.slice(0, anchor.character) !== s.lineBefore) {
      return undefined;
    }
    const typed = document.getText(new vscode.Range(anchor, position)).replace(/\r\n/g, "\n");
    const rest = remainder(s.text, typed);
    return rest ? rest : undefined;
  }

  /** Accept all, or the next word or line, of the suggestion at the cursor. */
  async accept(part: "all" | "word" | "line"): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const s = this.suggestion;
    const rest = editor && s ? this.fitting(editor.document, editor.selection.active) : undefined;
    if (!editor || !s || rest === undefined) {
      await this.updateContext();
      // none of ours fits here any more: what the key does without codespec
      const builtin = { all: "tab", word: "cursorWordEndRight", line: "scrollLineDown" }[part];
      await vscode.commands.executeCommand(builtin);
      return;
    }
    const take = part === "word" ? nextWord(rest) : part === "line" ? nextLine(rest) : rest;
    const at = editor.selection.active;
    const ok = await editor.edit((edit) => edit.insert(at, take), { undoStopBefore: true, undoStopAfter: false });
    if (!ok) {
      return;
    }
    const lines = take.split("\n");
    const end =
      lines.length === 1
        ? at.translate(0, take.length)
        : new vscode.Position(at.line + lines.length - 1, lines[lines.length - 1].length);
    editor.selection = new vscode.Selection(end, end);
    if (take === rest) {
      this.accepted(s.id);
      await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
    } else {
      this.report("codespec.didPartialAccept", s.id, codePoints(take));
      await refresh();
    }
  }

  /** Keep the `codespec.suggestionShown` context key (our keys' `when`) true only while a
   * suggestion of ours fits at the cursor. */
  async updateContext(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const fits = !!editor && this.fitting(editor.document, editor.selection.active) !== undefined;
    if (fits !== this.contextShown) {
      this.contextShown = fits;
      await vscode.commands.executeCommand("setContext", "codespec.suggestionShown", fits);
    }
  }

  /** The item's command: VS Code accepted the whole (rest of the) suggestion. */
  accepted(id: string | undefined): void {
    if (this.suggestion && this.suggestion.id === id) {
      this.forget();
    }
    this.report("codespec.didAccept", id);
  }

  async dismiss(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const s = this.suggestion;
    if (editor && s && this.fitting(editor.document, editor.selection.active) !== undefined) {
      this.report("codespec.didDismiss", s.id);
    }
    this.pending?.cancel.cancel();
    this.pending = undefined;
    this.forget();
    await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
  }

  /** Drop the suggestion (disabled, restarted); the server infers its verdict. */
  forget(): void {
    this.suggestion = undefined;
    void this.updateContext();
  }

  private report(command: string, id: string | undefined, ...rest: unknown[]): void {
    this.log(`verdict ${command} ${id} ${rest.join(" ")}`);
    const client = this.client();
    if (client && id !== undefined) {
      client.sendRequest("workspace/executeCommand", { command, arguments: [id, ...rest] }).then(undefined, () => {});
    }
  }
}

type InlineItem = {
  insertText?: string | { value: string };
  command?: { arguments?: string[] };
};
type InlineCompletionResult = { items?: InlineItem[] } | InlineItem[] | null;

/**
 * Show the provider's current text again. VS Code reuses the result of an explicit request at
 * the same place and version, so a second trigger alone would not ask again: hide first.
 */
async function refresh(): Promise<void> {
  await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
  await vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `token` is cancelled or `done` settles, whichever is first. */
async function settledOrCancelled(done: Promise<void>, token: vscode.CancellationToken): Promise<void> {
  let listener: vscode.Disposable | undefined;
  const cancelled = new Promise<void>((resolve) => {
    listener = token.onCancellationRequested(() => resolve());
    if (token.isCancellationRequested) {
      resolve();
    }
  });
  try {
    await Promise.race([done, cancelled]);
  } finally {
    listener?.dispose();
  }
}
