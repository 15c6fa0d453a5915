// The acceptance stats page (`codespec: Show Stats`): the daemon's `codespec/stats` report as
// a table in a webview that runs no script.

export interface StatsGroup {
  key: string;
  shown: number;
  accepted: number;
  partial: number;
  rejected: number;
  acceptance_rate: number | null;
  tokens_per_pass: number | null;
  latency_ms?: { total_ms?: { p50?: number | null } };
}
export interface StatsReport {
  total?: StatsGroup;
  groups?: StatsGroup[];
  daemon?: { tokens_per_pass?: number | null };
}

function escapeHtml(value: unknown): string {
  return String(value ?? "").replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

export function statsPage(report: StatsReport): string {
  const percent = (x: number | null | undefined) => (typeof x === "number" ? `${(100 * x).toFixed(0)}%` : "–");
  const number = (x: number | null | undefined, digits = 0) => (typeof x === "number" ? x.toFixed(digits) : "–");
  const rows = [...(report.groups ?? []), ...(report.total ? [{ ...report.total, key: "all" }] : [])]
    .map(
      (g) =>
        `<tr><td>${escapeHtml(g.key)}</td><td>${g.shown}</td><td>${g.accepted}</td><td>${g.partial}</td>` +
        `<td>${g.rejected}</td><td>${percent(g.acceptance_rate)}</td><td>${number(g.tokens_per_pass, 2)}</td>` +
        `<td>${number(g.latency_ms?.total_ms?.p50)}</td></tr>`,
    )
    .join("");
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<style>body{font-family:var(--vscode-font-family);color:var(--vscode-foreground)}
table{border-collapse:collapse}td,th{padding:4px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
tr{border-bottom:1px solid var(--vscode-panel-border)}</style></head><body>
<h2>codespec acceptance (all time)</h2>
<table><tr><th>language</th><th>shown</th><th>accepted</th><th>partial</th><th>rejected</th><th>acceptance</th><th>tokens/pass</th><th>p50 ms</th></tr>
${rows || '<tr><td colspan="8">nothing recorded yet</td></tr>'}</table></body></html>`;
}
