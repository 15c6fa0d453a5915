// Next edits on VS Code's stable API: after an edit, once typing pauses and no ghost text is
// shown, ask the server for the edit the recent ones call for nearby
// (`textDocument/copilotInlineEdit`, lsp/PROTOCOL.md "Next edits") and draw it where it is, as
// Continue draws its next edits with decorations: the lines it changes with the deleted-line
// colour and a gutter mark, their new text after them. Tab jumps to it, Tab again applies it;
// Escape dismisses it; any other edit of the document drops it (the server reads that as a
// rejection). (VS Code's own inline-edit API is proposed, closed to marketplace extensions.)

import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import { changedRuns } from "./pure";

const ASK_AFTER_MS = 500; // the pause after an edit before asking
const SHOWN_CONTEXT = "codespec.nextEditShown";

interface WireEdit {
  text: string;
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
  textDocument?: { uri: string; version?: number };
  command?: { command: string; arguments?: unknown[] };
}

interface Shown {
  editor: vscode.TextEditor;
  version: number;
  range: vscode.Range;
  text: string;
  command: WireEdit["command"];
}

export class NextEdits implements vscode.Disposable {
  private shown: Shown | undefined;
  private timer: NodeJS.Timeout | undefined;
  private cancel: vscode.CancellationTokenSource | undefined;
  private readonly deleted: vscode.TextEditorDecorationType;
  private readonly added = vscode.window.createTextEditorDecorationType({});

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly wanted: (document: vscode.TextDocument) => boolean,
    private readonly ghostShown: () => boolean, // ghost text shown or asked for
    private readonly log: (message: string) => void,
    extensionUri: vscode.Uri,
  ) {
    this.deleted = vscode.window.createTextEditorDecorationType({
      isWholeLine: true,
      backgroundColor: new vscode.ThemeColor("diffEditor.removedLineBackground"),
      gutterIconPath: vscode.Uri.joinPath(extensionUri, "media", "next-edit.svg"),
      gutterIconSize: "contain",
      overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.modifiedForeground"),
      overviewRulerLane: vscode.OverviewRulerLane.Right,
    });
  }

  /** A document changed: what was shown is over; ask again once typing pauses. */
  onChange(event: vscode.TextDocumentChangeEvent): void {
    const editor = vscode.window.activeTextEditor;
    if (!editor || event.document !== editor.document || event.contentChanges.length === 0) {
      return;
    }
    this.clear();
    this.stopAsking();
    if (!this.wanted(event.document)) {
      return;
    }
    const version = event.document.version;
    this.timer = setTimeout(() => void this.ask(editor, version), ASK_AFTER_MS);
  }

  private stopAsking(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.cancel?.cancel();
    this.cancel = undefined;
  }

  private async ask(editor: vscode.TextEditor, version: number): Promise<void> {
    const client = this.client();
    const document = editor.document;
    if (!client || document.version !== version || vscode.window.activeTextEditor !== editor) {
      return;
    }
    if (this.ghostShown()) {
      // ghost text first (shown, or asked for): ask once it is gone (taken, dismissed) and the
      // document unchanged
      this.timer = setTimeout(() => void this.ask(editor, version), ASK_AFTER_MS);
      return;
    }
    const cancel = new vscode.CancellationTokenSource();
    this.cancel = cancel;
    const position = editor.selection.active;
    let result: { edits?: WireEdit[] } | undefined;
    try {
      result = await client.sendRequest<{ edits?: WireEdit[] }>(
        "textDocument/copilotInlineEdit",
        {
          textDocument: { uri: document.uri.toString(), version },
          position: { line: position.line, character: position.character },
        },
        cancel.token,
      );
    } catch (error) {
      this.log(`next edit failed: ${(error as Error)?.message ?? error}`);
      return;
    }
    const edit = result?.edits?.[0];
    if (cancel.token.isCancellationRequested || !edit || document.version !== version) {
      return; // nothing to suggest, or the document moved on
    }
    if (vscode.window.activeTextEditor !== editor || this.ghostShown()) {
      return;
    }
    this.show(editor, version, edit);
  }

  private show(editor: vscode.TextEditor, version: number, edit: WireEdit): void {
    const document = editor.document;
    const first = edit.range.start.line;
    const end = Math.min(edit.range.end.line, document.lineCount);
    const range = new vscode.Range(first, 0, edit.range.end.line, edit.range.end.character);
    const oldLines: string[] = [];
    for (let line = first; line < end; line++) {
      oldLines.push(document.lineAt(line).text);
    }
    const newLines = edit.text.split("\n");
    if (newLines[newLines.length - 1] === "") {
      newLines.pop(); // (the text ends with a line break)
    }
    const deleted: vscode.Range[] = [];
    const added: vscode.DecorationOptions[] = [];
    for (const run of changedRuns(oldLines, newLines)) {
      for (let k = 0; k < run.oldCount; k++) {
        deleted.push(document.lineAt(first + run.oldStart + k).range);
      }
      // each new line after an old line of its run (the last one takes the rest); lines only
      // added go after the line before them
      run.lines.forEach((line, k) => {
        const row =
          run.oldCount > 0 ? first + run.oldStart + Math.min(k, run.oldCount - 1) : first + run.oldStart - 1;
        added.push({
          range: document.lineAt(Math.max(0, Math.min(row, document.lineCount - 1))).range,
          renderOptions: {
            after: {
              contentText: `  ⇢ ${line.trim() === "" ? "(blank line)" : line}`,
              color: new vscode.ThemeColor("gitDecoration.addedResourceForeground"),
              backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
            },
          },
        });
      });
    }
    this.shown = { editor, version, range, text: edit.text, command: edit.command };
    editor.setDecorations(this.deleted, deleted);
    editor.setDecorations(this.added, added);
    void vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, true);
    this.client()?.sendNotification("textDocument/didShowInlineEdit", { item: { command: edit.command } });
    this.log(`next edit shown ${first}-${edit.range.end.line} ${JSON.stringify(edit.text)}`);
  }

  clear(): void {
    if (!this.shown) {
      return;
    }
    this.shown.editor.setDecorations(this.deleted, []);
    this.shown.editor.setDecorations(this.added, []);
    this.shown = undefined;
    void vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, false);
  }

  /** Tab: jump to the edit, or apply it when the cursor is on it. */
  async accept(): Promise<void> {
    const shown = this.shown;
    const editor = vscode.window.activeTextEditor;
    if (!shown || editor !== shown.editor || editor.document.version !== shown.version) {
      this.clear();
      return;
    }
    const line = editor.selection.active.line;
    const onIt = line >= shown.range.start.line && line <= Math.max(shown.range.end.line - 1, shown.range.start.line);
    if (!onIt) {
      const at = new vscode.Position(shown.range.start.line, 0);
      editor.selection = new vscode.Selection(at, at);
      editor.revealRange(shown.range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      this.log("next edit: jumped");
      return;
    }
    this.clear();
    const applied = await editor.edit((builder) => builder.replace(shown.range, shown.text));
    this.log(`next edit ${applied ? "applied" : "not applied"}`);
    if (applied && shown.command) {
      await this.report(shown.command.command, shown.command.arguments ?? []);
    }
  }

  /** Escape: drop the edit shown. */
  async dismiss(): Promise<void> {
    const id = this.shown?.command?.arguments?.[0];
    this.clear();
    if (id !== undefined) {
      await this.report("codespec.didDismiss", [id]);
    }
  }

  private async report(command: string, args: unknown[]): Promise<void> {
    try {
      await this.client()?.sendRequest("workspace/executeCommand", { command, arguments: args });
    } catch (error) {
      this.log(`verdict not sent: ${(error as Error)?.message ?? error}`);
    }
  }

  dispose(): void {
    this.stopAsking();
    this.clear();
    this.deleted.dispose();
    this.added.dispose();
  }
}
