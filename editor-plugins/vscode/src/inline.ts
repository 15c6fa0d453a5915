// Ghost text: an InlineCompletionItemProvider over the codespec client's connection.
//
// A request goes out after `debounceMs` of quiet; while the server streams
// `codespec/partialCompletion`, the ghost text is refreshed with what has come so far. The final
// suggestion is kept, anchored where it was asked for: as the user types through it or accepts a
// word or a line, what is left is shown without asking the server again, and a suggestion that no
// longer fits the text at the cursor is never shown or inserted. Tab accepts what is on screen
// at any moment, streamed text too; the stream goes on after what was taken. Verdicts go to the
// server as lsp/PROTOCOL.md describes ("Verdicts").
//
// While VS Code's suggest widget is open, it shows an inline item only when the item extends the
// selected suggestion (replaces the same range with a text that starts with it). So with the
// widget open the request carries the selection (LSP 3.18's `selectedCompletionInfo`), the server
// completes as if the selected item were typed, and the item replaces the item's range: both are
// shown, Tab takes the widget's item first, as with Copilot. When the widget closes, VS Code asks
// again without the selection and the same suggestion shows at the cursor.

import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import { codePoints, nextLine, nextWord, remainder } from "./pure";

/** Text anchored in a document: what the server suggested (or has streamed so far) from the
 * place it was asked for. */
interface Anchored {
  uri: string;
  anchor: number; // document offset where the text starts
  lineBefore: string; // the anchor line's text before the anchor: an edit there ends it
  text: string;
}

/** A suggestion the server made. */
interface Suggestion extends Anchored {
  id: string | undefined; // the server's suggestion id (from the item's command)
  reportedShown: boolean;
}

/** A request in flight: `text` is what has streamed so far (from the anchor: with a widget item
 * selected, it starts with that item's text), `shown` what of it was last put on screen. */
interface Pending extends Anchored {
  version: number; // the document's when asked: the server's partials for it carry it
  selected: string | undefined; // the suggest widget's selected item the request carried
  shown: string;
  taken: number; // characters of it accepted with Tab / word / line before the reply came
  started: number;
  cancel: vscode.CancellationTokenSource;
  settled: Promise<void>; // resolves when the first text or the reply arrives
  settle: () => void;
}

/** The suggest widget's selected item, when it replaces text that ends at the cursor. */
interface Selection {
  range: vscode.Range;
  text: string;
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
  askedIn: string | undefined; // the document VS Code last asked about (see `extension.ts`)

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
    const info = context.selectedCompletionInfo;
    this.log(
      `inline completion asked at ${position.line}:${position.character} (trigger ${context.triggerKind}` +
        (info ? `, widget item ${JSON.stringify(info.text)})` : ")"),
    );
    if (!this.enabledFor(document) || !this.client()) {
      return [];
    }
    this.askedIn = document.uri.toString();
    const selected = info && info.range.end.isEqual(position) ? { range: info.range, text: info.text } : undefined;
    if (info && !selected) {
      return []; // an item that replaces text after the cursor: shown once the widget closes
    }
    const rest = this.fitting(this.suggestion, document, position);
    const ready = rest !== undefined ? this.items(rest, document, position, selected) : undefined;
    if (ready) {
      return this.show(ready);
    }
    let pending = this.pending;
    if (!pending || !this.follows(pending, document, position, selected)) {
      if (context.triggerKind === vscode.InlineCompletionTriggerKind.Automatic) {
        await sleep(this.debounceMs());
        if (token.isCancellationRequested || !this.client()) {
          return []; // a newer keystroke asks instead (or the server went away meanwhile)
        }
      }
      pending = this.request(this.client()!, document, position, context.triggerKind, selected);
    }
    await settledOrCancelled(pending.settled, token);
    if (token.isCancellationRequested) {
      this.log(`cancelled at ${position.line}:${position.character}`);
      return [];
    }
    const final = this.fitting(this.suggestion, document, position);
    if (final !== undefined) {
      return this.show(this.items(final, document, position, selected));
    }
    const streamed = this.pending === pending ? this.fitting(pending, document, position) : undefined;
    const items = streamed ? this.items(streamed, document, position, selected) : undefined;
    if (items) {
      pending.shown = pending.text;
      this.log(`showing streamed ${JSON.stringify(streamed)} at ${position.line}:${position.character}`);
      void this.updateContext();
      return items.map(([text, range]) => new vscode.InlineCompletionItem(text, range));
    }
    return [];
  }

  /** The item for `rest` (what is left of a suggestion at the cursor): inserted at the cursor,
   * or, with a widget item selected, replacing that item's range, when it extends the item (else
   * none: VS Code would not show it beside the widget). */
  private items(
    rest: string,
    document: vscode.TextDocument,
    position: vscode.Position,
    selected: Selection | undefined,
  ): [string, vscode.Range][] | undefined {
    if (!rest) {
      return undefined;
    }
    if (!selected) {
      return [[rest, new vscode.Range(position, position)]];
    }
    const text = document.getText(selected.range) + rest;
    return text.startsWith(selected.text) && text.length > selected.text.length ? [[text, selected.range]] : undefined;
  }

  private show(items: [string, vscode.Range][] | undefined): vscode.InlineCompletionItem[] {
    const s = this.suggestion;
    if (!items || !s) {
      return [];
    }
    const [text, range] = items[0];
    this.log(`showing ${JSON.stringify(text)} at ${range.start.line}:${range.start.character}`);
    const item = new vscode.InlineCompletionItem(text, range, {
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

  /** Whether the request in flight answers at `position`: the text between its anchor and the
   * cursor is a beginning of what it streams (nothing typed yet, or typed or accepted through
   * it), and with a widget item selected, it was asked with that item (or one it extends). */
  private follows(pending: Pending, document: vscode.TextDocument, position: vscode.Position, selected?: Selection): boolean {
    if (this.fitting(pending, document, position) === undefined) {
      return false;
    }
    return !selected || (pending.selected !== undefined && pending.selected.startsWith(selected.text));
  }

  // -- requests ----------------------------------------------------------------------------

  private request(
    client: LanguageClient,
    document: vscode.TextDocument,
    position: vscode.Position,
    kind: vscode.InlineCompletionTriggerKind,
    selected: Selection | undefined,
  ): Pending {
    this.pending?.cancel.cancel();
    this.forget();
    let settle = () => {};
    const settled = new Promise<void>((resolve) => (settle = resolve));
    const start = selected ? selected.range.start : position;
    const pending: Pending = {
      uri: document.uri.toString(),
      version: document.version,
      anchor: document.offsetAt(start),
      lineBefore: document.lineAt(start.line).text.slice(0, start.character),
      text: selected?.text ?? "",
      selected: selected?.text,
      shown: "",
      taken: 0,
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
      context: {
        triggerKind: kind === vscode.InlineCompletionTriggerKind.Invoke ? 1 : 2,
        ...(selected && { selectedCompletionInfo: { range: client.code2ProtocolConverter.asRange(selected.range), text: selected.text } }),
      },
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
    // kept from where it was asked: `fitting` shows it only while the text there is a
    // beginning of it (a reply for text the user has changed since is never shown)
    if (text && !document.isClosed) {
      const { uri, anchor, lineBefore } = pending;
      const s: Suggestion = { uri, anchor, lineBefore, text, id: item?.command?.arguments?.[0], reportedShown: false };
      this.suggestion = s;
      if (pending.taken > 0) {
        // streamed text was accepted before its suggestion had an id: say so now
        s.reportedShown = true;
        this.report("codespec.didShow", s.id);
        this.report("codespec.didPartialAccept", s.id, pending.taken);
      }
    }
    if (pending.shown || pending.taken) {
      // streamed text is on screen: it becomes the suggestion, or goes when the reply is empty
      this.refreshSoon(pending.uri);
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
      return; // (an earlier request's, still on its way)
    }
    if (pending.selected && !params.text.startsWith(pending.selected)) {
      return; // (the server's partials start with the selected item's text, as its reply does)
    }
    pending.text = params.text;
    pending.settle();
    this.refreshSoon();
  }

  /** Ask VS Code for the ghost text again (soon, at most every REFRESH_MS) if a suggestion or
   * the stream in flight fits at the cursor, or (`uri`) whenever that document is the active one
   * (streamed text shown there must go when the reply brought none). */
  private refreshSoon(uri?: string): void {
    if (this.refreshTimer) {
      return;
    }
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      const active = vscode.window.activeTextEditor?.document.uri.toString();
      if (this.atCursor(this.suggestion) || this.atCursor(this.pending) || (uri && uri === active)) {
        void refresh();
      }
    }, REFRESH_MS);
  }

  // -- the suggestion at the cursor ----------------------------------------------------------

  /** What is left of `s` (a suggestion, or the text streamed so far) at `position`, or
   * undefined when it does not fit there: the text before its anchor on its line changed, or the
   * text from its anchor to the cursor is not a beginning of it. */
  private fitting(s: Anchored | undefined, document: vscode.TextDocument, position: vscode.Position): string | undefined {
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
    return remainder(s.text, typed);
  }

  /** What is left of `s` at the cursor of the active editor, if anything. */
  private atCursor(s: Anchored | undefined): string | undefined {
    const editor = vscode.window.activeTextEditor;
    const rest = editor && s ? this.fitting(s, editor.document, editor.selection.active) : undefined;
    return rest ? rest : undefined;
  }

  /** What is left of the suggestion at the cursor, if anything. */
  private onScreen(): string | undefined {
    return this.atCursor(this.suggestion);
  }

  /** What is left at the cursor of the streamed text last put on screen, if anything. */
  private streamedAtCursor(): string | undefined {
    const pending = this.pending;
    return pending && pending.shown ? this.atCursor({ ...pending, text: pending.shown }) : undefined;
  }

  /** Accept all, or the next word or line, of what is on screen at the cursor: the suggestion,
   * or the text streamed so far (its request goes on; the rest follows what was taken). */
  async accept(part: "all" | "word" | "line"): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const s = this.suggestion;
    const pending = this.pending; // (its reply may come while the text goes in)
    const final = this.onScreen();
    const rest = final ?? this.streamedAtCursor();
    if (!editor || rest === undefined) {
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
    if (final === undefined) {
      this.log(`took ${JSON.stringify(take)} of the streamed text`);
      pending!.taken += codePoints(take);
      await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
      await this.updateContext();
      await refresh();
    } else if (take === rest) {
      this.accepted(s!.id);
      await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
    } else {
      this.report("codespec.didPartialAccept", s!.id, codePoints(take));
      await refresh();
    }
  }

  /** Whether a request for a suggestion waits for its reply. */
  asking(): boolean {
    return this.pending !== undefined;
  }

  /** Whether a suggestion of ours is on screen at the cursor (as the context key says). */
  shownNow(): boolean {
    return this.contextShown;
  }

  /** Keep the `codespec.suggestionShown` context key (our keys' `when`) true only while a
   * suggestion of ours, or text streamed for one, fits at the cursor. */
  async updateContext(): Promise<void> {
    const fits = this.onScreen() !== undefined || this.streamedAtCursor() !== undefined;
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

  /** Escape: bound while our suggestion is shown or VS Code shows ghost text at all, since the
   * context key we set reaches the workbench after the ghost text it belongs to (an Escape in
   * between would hide it behind our back and leave us thinking it shown). */
  async dismiss(): Promise<void> {
    const s = this.suggestion;
    this.log("dismissed");
    if (s && this.onScreen() !== undefined) {
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
