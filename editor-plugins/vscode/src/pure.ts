// Pure helpers of the extension (no `vscode` import, so `node --test` runs them): where the
// server is, which settings go to it, how a suggestion is cut into a word or a line, and what is
// left of a suggestion once the user typed or accepted the start of it.

import * as fs from "node:fs";
import * as path from "node:path";

/** Keys of lsp/settings.schema.json: the settings the server takes (the rest are the client's). */
export const SERVER_SETTINGS = [
  "enabled",
  "disabledLanguages",
  "maxTokens",
  "lineMaxTokens",
  "maxLines",
  "multiline",
  "debounceMs",
  "prefixTokens",
  "suffixTokens",
  "extraContextTokens",
  "promptSeconds",
  "warmAhead",
  "warmDelayMs",
  "lookAheadKeys",
  "stopRules",
  "speculate",
  "completeMidWord",
  "workspaceContext",
  "remoteWorkspaceContext",
  "nextEditSuggestions",
  "nextEditEagerness",
] as const;

/** The server's settings out of the `codespec.*` configuration (`get` reads one key). */
export function serverSettings(get: (key: string) => unknown): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const key of SERVER_SETTINGS) {
    const value = get(key);
    if (value !== undefined && value !== null) {
      settings[key] = value;
    }
  }
  return settings;
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The command that starts `codespec lsp`, and where it was found: the `codespec.serverPath`
 * setting (an executable, or a codespec checkout whose `.venv/bin/codespec` the README's set-up
 * made), else `codespec` on PATH, else `.venv/bin/codespec` in a workspace folder (a codespec
 * checkout), else in the user's own bin folders (`userBins`: where pipx, `pip install --user`
 * and the README's set-up put it, `~/.local/bin`), which an editor started from a desktop
 * launcher does not always have on its PATH. Undefined when there is none.
 */
export function findServer(
  serverPath: string,
  serverArgs: readonly string[],
  pathVariable: string,
  workspaceFolders: readonly string[],
  userBins: readonly string[] = [],
): { command: string; args: string[] } | undefined {
  const args = ["lsp", ...serverArgs];
  if (serverPath) {
    const inCheckout = path.join(serverPath, ".venv", "bin", "codespec");
    const command = isExecutable(serverPath) ? serverPath : isExecutable(inCheckout) ? inCheckout : undefined;
    return command ? { command, args } : undefined;
  }
  const candidates = [
    ...pathVariable.split(path.delimiter).filter((dir) => dir).map((dir) => path.join(dir, "codespec")),
    ...workspaceFolders.map((folder) => path.join(folder, ".venv", "bin", "codespec")),
    ...userBins.filter((dir) => dir).map((dir) => path.join(dir, "codespec")),
  ];
  const command = candidates.find(isExecutable);
  return command ? { command, args } : undefined;
}

/** The user's own bin folders, where pipx and the README's set-up put `codespec`. */
export function userBinFolders(env: NodeJS.ProcessEnv, home: string): string[] {
  return [env.PIPX_BIN_DIR ?? "", home ? path.join(home, ".local", "bin") : ""].filter((dir) => dir);
}

/** The next word of `text`: leading blanks, then a run of word characters or of other marks. */
export function nextWord(text: string): string {
  const match = /^\s*[\p{L}\p{N}_]+/u.exec(text) ?? /^\s*[^\p{L}\p{N}_\s]+/u.exec(text) ?? /^\s+/.exec(text);
  return match ? match[0] : text;
}

/** The next line of `text`, with its line break. */
export function nextLine(text: string): string {
  const end = text.indexOf("\n");
  return end < 0 ? text : text.slice(0, end + 1);
}

/** Characters (code points, as the server counts them) in `text`. */
export function codePoints(text: string): number {
  return [...text].length;
}

/**
 * What is left to show of a suggestion `text` made at `anchor` (an offset in the document), when
 * the document now holds `typed` between the anchor and the cursor: the rest of the text, or
 * undefined when what was typed is not a beginning of it (the suggestion no longer fits).
 */
export function remainder(text: string, typed: string): string | undefined {
  if (!text.startsWith(typed)) {
    return undefined;
  }
  return text.slice(typed.length);
}

/** A row of `codespec/models` (the rows `codespec models --json` prints). */
export interface ModelRow {
  name: string;
  store: string;
  label?: string;
  description?: string;
  architecture?: string;
  parameters?: number;
  quantization?: string;
  fim?: boolean;
  draft?: string | null;
  error?: string;
  running?: boolean;
}

/** What the model picker shows beside a model's name. */
export function modelDescription(row: ModelRow): string {
  if (row.description) {
    return `${row.store}: ${row.description}${row.running ? " (running)" : ""}`;
  }
  const parts = [row.store];
  if (row.parameters) {
    parts.push(`${(row.parameters / 1e9).toFixed(1)}B`);
  }
  if (row.quantization) {
    parts.push(row.quantization);
  }
  parts.push(row.fim === false ? "prefix only" : "fill-in-the-middle");
  if (row.draft) {
    parts.push(`draft ${row.draft}`);
  }
  if (row.running) {
    parts.push("(running)");
  }
  return parts.join(" · ");
}

/** A run of lines an edit changes: old lines `[oldStart, oldStart + oldCount)` of the edit's
 * range become `lines` (new lines; none: deleted; `oldCount` 0: added before `oldStart`). */
export interface ChangedRun {
  oldStart: number;
  oldCount: number;
  lines: string[];
}

/** Where `newLines` differ from `oldLines` (a longest common subsequence of whole lines), as
 * runs: what a next edit draws, so that the unchanged lines between its changes stay plain. */
export function changedRuns(oldLines: string[], newLines: string[]): ChangedRun[] {
  const n = oldLines.length;
  const m = newLines.length;
  // common[i][j]: the longest common subsequence of oldLines[i:] and newLines[j:]
  const common: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      common[i][j] =
        oldLines[i] === newLines[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const runs: ChangedRun[] = [];
  let run: ChangedRun | undefined;
  let i = 0;
  let j = 0;
  const open = () => (run ??= { oldStart: i, oldCount: 0, lines: [] });
  while (i < n || j < m) {
    if (i < n && j < m && oldLines[i] === newLines[j]) {
      if (run) {
        runs.push(run);
        run = undefined;
      }
      i++;
      j++;
    } else if (j < m && (i >= n || common[i][j + 1] >= common[i + 1][j])) {
      open().lines.push(newLines[j++]);
    } else {
      open().oldCount++;
      i++;
    }
  }
  if (run) {
    runs.push(run);
  }
  return runs;
}
