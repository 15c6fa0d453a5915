// The status bar item: what the extension shows of codespec's state (starting, loading, ready,
// busy, disabled, error, remote unreachable), with the last latency and tokens per target pass,
// and the same as one line of text for the status message.

import * as vscode from "vscode";

export type Status = "starting" | "loading" | "ready" | "busy" | "disabled" | "error" | "remote unreachable";

const ICONS: Record<Status, string> = {
  starting: "$(sync~spin)",
  loading: "$(sync~spin)",
  busy: "$(loading~spin)",
  ready: "$(check)",
  disabled: "$(circle-slash)",
  error: "$(error)",
  "remote unreachable": "$(debug-disconnect)",
};

/** What `codespec/status` says of the daemon's engine (lsp/PROTOCOL.md). */
export interface EngineStatus {
  state?: string;
  message?: string;
  model?: string;
}

export class StatusBar {
  status: Status = "starting";
  detail = "";
  lastLatencyMs: number | undefined;
  tokensPerPass: number | undefined;
  serverCommand: string | undefined; // the `codespec` executable this window started
  /** The daemon's engine is a remote server it cannot reach (`codespec/status`), and why. */
  remoteDown?: string;
  /** The model the daemon runs (`codespec/status`), once it has loaded. */
  model?: string;
  readonly item = vscode.window.createStatusBarItem("codespec.status", vscode.StatusBarAlignment.Right, 100);

  /** ``off``: whether completions are turned off where the user is (shown as "disabled"). */
  constructor(
    private readonly off: () => boolean,
    private readonly debug: (message: string) => void,
  ) {
    this.item.name = "codespec";
    this.item.command = "codespec.showStatus";
    this.item.show();
  }

  set(status: Status, detail = ""): void {
    this.debug(`status ${status} ${detail}`);
    this.status = status;
    this.detail = detail;
    this.render();
  }

  onEngineStatus(params: EngineStatus): void {
    this.remoteDown = params?.state === "remote unreachable" ? (params.message ?? "") : undefined;
    if (typeof params?.model === "string") {
      this.model = params.model;
    }
    this.debug(`engine ${params?.state} ${params?.message ?? ""} model ${this.model ?? "-"}`);
    if (params?.state === "switching") {
      this.set("loading", params.message ?? "");
      return;
    }
    if (params?.state === "ready" && params?.model && this.status === "loading") {
      this.set("ready"); // the model has loaded (after a switch, no progress may come)
      return;
    }
    this.render();
  }

  /** The status as shown: "ready" where completions are off is "disabled", and a remote engine
   * the daemon cannot reach outranks "ready" and "busy". */
  shown(): Status {
    if (this.status === "ready" && this.off()) {
      return "disabled";
    }
    if ((this.status === "ready" || this.status === "busy") && this.remoteDown !== undefined) {
      return "remote unreachable";
    }
    return this.status;
  }

  render(): void {
    const status = this.shown();
    const figures: string[] = [];
    if (this.lastLatencyMs !== undefined) {
      figures.push(`${Math.round(this.lastLatencyMs)} ms`);
    }
    if (this.tokensPerPass) {
      figures.push(`${this.tokensPerPass.toFixed(2)} tok/pass`);
    }
    this.item.text = `${ICONS[status]} codespec: ${status}${figures.length ? " · " + figures.join(" · ") : ""}`;
    this.item.tooltip = this.text(status);
    this.item.backgroundColor =
      status === "error"
        ? new vscode.ThemeColor("statusBarItem.errorBackground")
        : status === "remote unreachable"
          ? new vscode.ThemeColor("statusBarItem.warningBackground")
          : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }

  text(status: Status = this.status): string {
    const parts = [`codespec: ${status}`];
    if (this.detail) {
      parts.push(`(${this.detail})`);
    }
    if (status === "remote unreachable" && this.remoteDown) {
      parts.push(`(${this.remoteDown})`);
    }
    if (this.model) {
      parts.push(`model ${this.model}`);
    }
    if (this.lastLatencyMs !== undefined) {
      parts.push(`last completion ${Math.round(this.lastLatencyMs)} ms`);
    }
    if (this.tokensPerPass) {
      parts.push(`${this.tokensPerPass.toFixed(2)} tokens per target pass`);
    }
    if (this.serverCommand) {
      parts.push(`server ${this.serverCommand}`);
    }
    return parts.join(", ");
  }
}
