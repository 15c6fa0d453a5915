// codespec for VS Code: ghost-text completions from the local codespec daemon.
//
// The extension starts `codespec lsp` (which relays to the shared daemon, starting it when none
// runs) through vscode-languageclient, which keeps the documents in sync. Completions come from
// our own InlineCompletionItemProvider (inline.ts) over that connection, so that streamed text,
// accept word / line and the verdicts of lsp/PROTOCOL.md work on the stable VS Code API. A status
// bar item shows loading / ready / busy / disabled / error with the last latency and tokens per
// target pass (status.ts); the palette has enable/disable (globally or for a language), restart,
// choosing a model and the stats page (stats.ts).

import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  LanguageClient,
  State,
  WorkDoneProgress,
  type LanguageClientOptions,
  type ServerOptions,
  type StaticFeature,
} from "vscode-languageclient/node";
import { GhostText } from "./inline";
import { NextEdits } from "./nextedit";
import { findServer, modelDescription, type ModelRow, serverSettings, userBinFolders } from "./pure";
import { statsPage, type StatsReport } from "./stats";
import { StatusBar } from "./status";
const SCHEMES = ["file", "untitled"]; // the documents codespec completes (and the client syncs)

class Codespec {
  client: LanguageClient | undefined;
  private statsAsked = 0;
  private inFlight = false; // a completion request waits for its reply
  readonly output = vscode.window.createOutputChannel("codespec", { log: true });
  readonly bar = new StatusBar(
    () => {
      const language = vscode.window.activeTextEditor?.document.languageId;
      return !config().get<boolean>("enabled", true) || (language !== undefined && !this.enabledFor(language));
    },
    (message) => this.debug(message),
  );
  readonly ghost = new GhostText(
    () => this.running(),
    (document) => this.enabledFor(document.languageId),
    () => config().get<number>("debounceMs", 150),
    {
      busy: () => {
        this.inFlight = true;
        if (this.bar.status !== "loading") {
          this.bar.set("busy");
        }
      },
      done: (latencyMs, error) => {
        this.inFlight = false;
        if (latencyMs !== undefined) {
          this.bar.lastLatencyMs = latencyMs;
          this.askTokensPerPass();
        }
        this.bar.set(error ? "error" : "ready", error ?? "");
      },
    },
    (message) => this.debug(message),
  );

  /** Debug lines: the output channel, and the file named by CODESPEC_VSCODE_LOG (for tests). */
  debug(message: string): void {
    this.output.debug(message);
    const file = process.env.CODESPEC_VSCODE_LOG;
    if (file) {
      fs.appendFileSync(file, `${new Date().toISOString()} ${message}\n`);
    }
  }

  /** The client, while it runs. */
  running(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  enabledFor(languageId: string): boolean {
    const c = config();
    return c.get<boolean>("enabled", true) && !c.get<string[]>("disabledLanguages", []).includes(languageId);
  }

  /** The daemon's tokens per target pass, asked at most every 5 s after a completion. */
  private askTokensPerPass(): void {
    const now = Date.now();
    if (!this.client || now - this.statsAsked < 5000) {
      return;
    }
    this.statsAsked = now;
    this.client.sendRequest<StatsReport>("codespec/stats", { since: "30m" }).then(
      (report) => {
        const tpp = report?.daemon?.tokens_per_pass;
        if (typeof tpp === "number") {
          this.bar.tokensPerPass = tpp;
          this.bar.render();
        } else {
          this.statsAsked = 0; // nothing counted yet: ask again after the next completion
        }
      },
      () => (this.statsAsked = 0),
    );
  }

  // -- the server -----------------------------------------------------------------------------

  async start(): Promise<void> {
    const c = config();
    const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
    const userBins = userBinFolders(process.env, os.homedir());
    const server = findServer(c.get("serverPath", ""), c.get<string[]>("serverArgs", []), process.env.PATH ?? "", folders, userBins);
    this.bar.serverCommand = server?.command;
    if (!server) {
      this.bar.set("error", "server not found");
      const where = c.get("serverPath", "")
        ? `\`codespec.serverPath\` (${c.get("serverPath")}) is neither an executable nor a checkout with .venv/bin/codespec`
        : `\`codespec\` was not found on PATH, in a workspace's .venv or in ${userBins.join(", ")}`;
      const choice = await vscode.window.showErrorMessage(
        `codespec: ${where}. Set codespec.serverPath to your checkout's .venv/bin/codespec (the README's set-up), or install it (see the codespec README).`,
        "Open Settings",
      );
      if (choice) {
        await vscode.commands.executeCommand("workbench.action.openSettings", "codespec.serverPath");
      }
      return;
    }
    this.debug(`starting ${server.command} ${server.args.join(" ")}`);
    const serverOptions: ServerOptions = { command: server.command, args: server.args };
    const clientOptions: LanguageClientOptions = {
      documentSelector: SCHEMES.map((scheme) => ({ scheme })),
      initializationOptions: serverSettings((key) => c.get(key)),
      outputChannel: this.output,
      // vscode-languageclient has an inline completion provider of its own; ours (inline.ts)
      // replaces it, so that two providers never ask the server for the same place
      middleware: { provideInlineCompletionItems: () => undefined },
    };
    const client = new LanguageClient("codespec", "codespec", serverOptions, clientOptions);
    client.registerFeature(verdictsCapability);
    client.onNotification("codespec/partialCompletion", (params) => this.ghost.onPartial(params));
    client.onNotification("codespec/status", (params) => this.bar.onEngineStatus(params));
    client.onDidChangeState((event) => {
      if (event.newState === State.Stopped && this.client === client) {
        this.ghost.forget();
        this.bar.set("error", "server stopped");
      }
    });
    this.client = client;
    this.bar.set("starting");
    try {
      await client.start();
    } catch (error) {
      this.bar.set("error", String((error as Error)?.message ?? error));
      return;
    }
    // the daemon reports loading the model with work-done progress: show it here
    client.onRequest("window/workDoneProgress/create", (params: { token: string | number }) => {
      client.onProgress(WorkDoneProgress.type, params.token, (value) => {
        if (value.kind === "end") {
          this.bar.set(this.inFlight ? "busy" : "ready");
          this.completeWhereAsked();
        } else {
          this.bar.set("loading", value.message ?? (value.kind === "begin" ? value.title : ""));
        }
      });
      return null;
    });
    if (this.bar.status === "starting") {
      this.bar.set("ready");
    }
  }

  /** The model is loaded: if the user was typing in the active editor meanwhile and nothing is
   * on its way, complete at the cursor now rather than at the next keystroke. */
  private completeWhereAsked(): void {
    const editor = vscode.window.activeTextEditor;
    if (editor && !this.inFlight && this.ghost.askedIn === editor.document.uri.toString()) {
      this.debug("the model is ready: completing at the cursor");
      void vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.ghost.forget();
    if (client) {
      try {
        await client.stop(2000);
      } catch {
        // a server that does not stop in time is killed by the client
      }
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  configurationChanged(event: vscode.ConfigurationChangeEvent): void {
    if (!event.affectsConfiguration("codespec")) {
      return;
    }
    this.debug("settings changed");
    if (event.affectsConfiguration("codespec.serverPath") || event.affectsConfiguration("codespec.serverArgs")) {
      void this.restart();
      return;
    }
    const c = config();
    const client = this.running();
    if (client) {
      void client.sendNotification("workspace/didChangeConfiguration", {
        settings: { codespec: serverSettings((key) => c.get(key)) },
      });
    }
    if (!c.get<boolean>("enabled", true)) {
      this.ghost.forget();
    }
    this.bar.render();
  }

  /** Where the cursor rests, so that the daemon warms the prompt there (`codespec/cursor`). */
  cursorRested(editor: vscode.TextEditor): void {
    const client = this.running();
    if (client && this.enabledFor(editor.document.languageId) && SCHEMES.includes(editor.document.uri.scheme)) {
      const p = editor.selection.active;
      void client.sendNotification("codespec/cursor", {
        textDocument: { uri: client.code2ProtocolConverter.asUri(editor.document.uri) },
        position: { line: p.line, character: p.character },
      });
    }
  }

  // -- commands -------------------------------------------------------------------------------

  async setEnabled(enabled: boolean): Promise<void> {
    await config().update("enabled", enabled, vscode.ConfigurationTarget.Global);
  }

  async toggleLanguage(): Promise<void> {
    const language = vscode.window.activeTextEditor?.document.languageId;
    if (!language) {
      return;
    }
    const list = config().get<string[]>("disabledLanguages", []);
    const next = list.includes(language) ? list.filter((l) => l !== language) : [...list, language];
    await config().update("disabledLanguages", next, vscode.ConfigurationTarget.Global);
    vscode.window.showInformationMessage(`codespec: ${language} ${next.includes(language) ? "disabled" : "enabled"}`);
  }

  async showStatus(): Promise<void> {
    const enabled = config().get<boolean>("enabled", true);
    const choice = await vscode.window.showInformationMessage(
      this.bar.text(),
      "Show Stats",
      enabled ? "Disable" : "Enable",
      "Restart",
    );
    if (choice === "Show Stats") {
      await this.showStats();
    } else if (choice === "Disable" || choice === "Enable") {
      await this.setEnabled(choice === "Enable");
    } else if (choice === "Restart") {
      await this.restart();
    }
  }

  /** Switch the daemon to another of the models it lists (`codespec/chooseModel`). */
  async chooseModel(): Promise<void> {
    const client = this.running();
    if (!client) {
      vscode.window.showWarningMessage("codespec: the server is not running");
      return;
    }
    let rows: ModelRow[];
    try {
      rows = (await client.sendRequest<{ models: ModelRow[] }>("codespec/models", {})).models ?? [];
    } catch (error) {
      vscode.window.showWarningMessage(`codespec: cannot list models: ${(error as Error)?.message ?? error}`);
      return;
    }
    const items = rows
      .filter((row) => row.error === undefined)
      .map((row) => ({ label: row.name, description: modelDescription(row), picked: row.running === true }));
    const chosen = await vscode.window.showQuickPick(items, { placeHolder: "The model codespec runs" });
    if (!chosen) {
      return;
    }
    try {
      await client.sendRequest("codespec/chooseModel", { name: chosen.label });
      this.bar.set("loading", `switching to ${chosen.label}`);
    } catch (error) {
      vscode.window.showWarningMessage(`codespec: ${(error as Error)?.message ?? error}`);
    }
  }

  async showStats(): Promise<void> {
    const client = this.running();
    if (!client) {
      vscode.window.showWarningMessage("codespec: the server is not running");
      return;
    }
    let report: StatsReport;
    try {
      report = await client.sendRequest<StatsReport>("codespec/stats", { by: "language" });
    } catch (error) {
      vscode.window.showWarningMessage(`codespec: stats failed: ${String((error as Error)?.message ?? error)}`);
      return;
    }
    const panel = vscode.window.createWebviewPanel("codespec.stats", "codespec: acceptance", vscode.ViewColumn.Beside, {});
    panel.webview.html = statsPage(report);
  }
}

// -- helpers --------------------------------------------------------------------------------

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration("codespec");
}

/** Tell the server this client reports `codespec.didShow` (lsp/PROTOCOL.md, "Verdicts"). */
const verdictsCapability: StaticFeature = {
  fillClientCapabilities(capabilities) {
    capabilities.experimental = {
      ...(capabilities.experimental as object | undefined),
      codespecVerdicts: true,
      // an untrusted workspace's files are not read (lsp/PROTOCOL.md, "What the daemon reads")
      codespecWorkspaceTrusted: vscode.workspace.isTrusted,
    };
  },
  initialize() {},
  getState() {
    return { kind: "static" };
  },
  clear() {},
};

// -- activation -----------------------------------------------------------------------------

let codespec: Codespec | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const cs = (codespec = new Codespec());
  let restTimer: NodeJS.Timeout | undefined;
  const nextEdits = new NextEdits(
    () => cs.running(),
    (document) =>
      SCHEMES.includes(document.uri.scheme) &&
      cs.enabledFor(document.languageId) &&
      config().get<boolean>("nextEditSuggestions", true),
    () => cs.ghost.shownNow() || cs.ghost.asking(),
    (message) => cs.debug(message),
    context.extensionUri,
  );
  context.subscriptions.push(
    nextEdits,
    vscode.commands.registerCommand("codespec.nextEditAccept", () => nextEdits.accept()),
    vscode.commands.registerCommand("codespec.nextEditDismiss", () => nextEdits.dismiss()),
    vscode.workspace.onDidChangeTextDocument((event) => nextEdits.onChange(event)),
    cs.bar,
    cs.output,
    vscode.languages.registerInlineCompletionItemProvider({ pattern: "**" }, cs.ghost),
    vscode.commands.registerCommand("codespec.accepted", (id?: string) => cs.ghost.accepted(id)),
    vscode.commands.registerCommand("codespec.acceptAll", () => cs.ghost.accept("all")),
    vscode.commands.registerCommand("codespec.acceptWord", () => cs.ghost.accept("word")),
    vscode.commands.registerCommand("codespec.acceptLine", () => cs.ghost.accept("line")),
    vscode.commands.registerCommand("codespec.dismiss", () => cs.ghost.dismiss()),
    vscode.commands.registerCommand("codespec.trigger", () => vscode.commands.executeCommand("editor.action.inlineSuggest.trigger")),
    vscode.commands.registerCommand("codespec.enable", () => cs.setEnabled(true)),
    vscode.commands.registerCommand("codespec.disable", () => cs.setEnabled(false)),
    vscode.commands.registerCommand("codespec.toggle", () => cs.setEnabled(!config().get<boolean>("enabled", true))),
    vscode.commands.registerCommand("codespec.toggleLanguage", () => cs.toggleLanguage()),
    vscode.commands.registerCommand("codespec.restart", () => cs.restart()),
    vscode.commands.registerCommand("codespec.showStats", () => cs.showStats()),
    vscode.commands.registerCommand("codespec.showStatus", () => cs.showStatus()),
    vscode.commands.registerCommand("codespec.chooseModel", () => cs.chooseModel()),
    vscode.workspace.onDidChangeConfiguration((event) => cs.configurationChanged(event)),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void cs.restart()), // now its files may be read
    vscode.window.onDidChangeActiveTextEditor(() => cs.bar.render()),
    vscode.window.onDidChangeTextEditorSelection((event) => {
      void cs.ghost.updateContext();
      clearTimeout(restTimer);
      restTimer = setTimeout(() => cs.cursorRested(event.textEditor), 300);
    }),
    { dispose: () => clearTimeout(restTimer) },
  );
  await cs.start();
}

export async function deactivate(): Promise<void> {
  await codespec?.stop();
}
