// Unit tests of the pure helpers (`npm test`); the extension itself is tested in code-server by
// tests/editors/test_vscode.py.

import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import {
  SERVER_SETTINGS,
  changedRuns,
  codePoints,
  findServer,
  modelDescription,
  nextLine,
  nextWord,
  remainder,
  serverSettings,
  userBinFolders,
} from "../pure";

const root = path.resolve(__dirname, "..", "..");

test("the server settings are exactly the keys of lsp/settings.schema.json", () => {
  const schema = JSON.parse(fs.readFileSync(path.join(root, "..", "..", "lsp", "settings.schema.json"), "utf8"));
  assert.deepEqual([...SERVER_SETTINGS].sort(), Object.keys(schema.properties).sort());
  const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
  const contributed = pkg.contributes.configuration.properties;
  for (const [key, spec] of Object.entries(schema.properties) as [string, { default: unknown }][]) {
    assert.deepEqual(contributed[`codespec.${key}`]?.default, spec.default, key);
  }
});

test("serverSettings leaves out the client's own keys and unset values", () => {
  const values: Record<string, unknown> = { maxTokens: 12, serverPath: "/x", enabled: false, stopRules: null };
  assert.deepEqual(serverSettings((key) => values[key]), { maxTokens: 12, enabled: false });
});

test("words and lines of a suggestion", () => {
  assert.equal(nextWord("  width * height"), "  width");
  assert.equal(nextWord(" * height"), " *");
  assert.equal(nextWord("   "), "   ");
  assert.equal(nextWord("größe)"), "größe");
  assert.equal(nextLine("a\n  b\n"), "a\n");
  assert.equal(nextLine("last"), "last");
  assert.equal(codePoints("a😀b"), 3);
});

test("what is left of a suggestion after typing", () => {
  assert.equal(remainder("width * height", ""), "width * height");
  assert.equal(remainder("width * height", "wid"), "th * height");
  assert.equal(remainder("width * height", "wix"), undefined);
  assert.equal(remainder("ab", "ab"), "");
});

test("the server is the setting (or a checkout), else PATH, a workspace's .venv, the user's bin", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "codespec-find-"));
  const bin = path.join(dir, "bin");
  const venv = path.join(dir, "ws", ".venv", "bin");
  fs.mkdirSync(bin, { recursive: true });
  fs.mkdirSync(venv, { recursive: true });
  for (const file of [path.join(bin, "codespec"), path.join(venv, "codespec")]) {
    fs.writeFileSync(file, "#!/bin/sh\n", { mode: 0o755 });
  }
  fs.writeFileSync(path.join(dir, "not-executable"), "", { mode: 0o644 });
  assert.deepEqual(findServer("", ["--tcp", "1"], `/nonexistent:${bin}`, []), {
    command: path.join(bin, "codespec"),
    args: ["lsp", "--tcp", "1"],
  });
  assert.equal(findServer("", [], "/nonexistent", [path.join(dir, "ws")])?.command, path.join(venv, "codespec"));
  assert.equal(findServer("", [], "/nonexistent", [dir]), undefined);
  assert.equal(findServer(path.join(dir, "not-executable"), [], bin, []), undefined);
  assert.equal(findServer(bin, [], bin, []), undefined); // a directory is not a server
  // the setting may name a checkout the README's set-up prepared
  assert.equal(findServer(path.join(dir, "ws"), [], "", [])?.command, path.join(venv, "codespec"));
  // where pipx and the set-up put it, for an editor whose PATH lacks it; PATH comes first
  assert.equal(findServer("", [], "/nonexistent", [], ["", venv])?.command, path.join(venv, "codespec"));
  assert.equal(findServer("", [], bin, [], [venv])?.command, path.join(bin, "codespec"));
  assert.deepEqual(userBinFolders({ PIPX_BIN_DIR: "/p" }, "/home/u"), ["/p", "/home/u/.local/bin"]);
  assert.deepEqual(userBinFolders({}, ""), []);
});

test("the model picker describes each model codespec/models lists", () => {
  assert.equal(
    modelDescription({ name: "qwen2.5-coder-1.5b", store: "embedded", description: "the embedded pair", running: true }),
    "embedded: the embedded pair (running)",
  );
  assert.equal(
    modelDescription({
      name: "ollama:qwen2.5-coder:7b",
      store: "ollama",
      parameters: 7.6e9,
      quantization: "Q4_K_M",
      fim: true,
      draft: "qwen2.5-coder-0.5b",
    }),
    "ollama · 7.6B · Q4_K_M · fill-in-the-middle · draft qwen2.5-coder-0.5b",
  );
  assert.equal(modelDescription({ name: "/m/x.gguf", store: "path", fim: false }), "path · prefix only");
});

test("a next edit's changed runs leave the lines between its changes alone", () => {
  const old = ["a = 1", "k = 0", "b = a", "c = 2"];
  assert.deepEqual(changedRuns(old, ["a_v = 1", "k = 0", "b = a_v", "c = 2"]), [
    { oldStart: 0, oldCount: 1, lines: ["a_v = 1"] },
    { oldStart: 2, oldCount: 1, lines: ["b = a_v"] },
  ]);
  assert.deepEqual(changedRuns(old, ["a = 1", "b = a", "c = 2"]), [{ oldStart: 1, oldCount: 1, lines: [] }]);
  assert.deepEqual(changedRuns(old, ["a = 1", "k = 0", "new", "b = a", "c = 2"]), [
    { oldStart: 2, oldCount: 0, lines: ["new"] },
  ]);
  assert.deepEqual(changedRuns([], ["x"]), [{ oldStart: 0, oldCount: 0, lines: ["x"] }]);
  assert.deepEqual(changedRuns(old, old), []);
});
