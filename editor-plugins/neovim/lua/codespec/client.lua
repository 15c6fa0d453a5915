-- The one LSP client: `codespec lsp` (a relay to the shared daemon), found, started, asked.
--
-- Everything that talks to the server goes through here; what the answers mean is the other
-- modules' business (they pass the handlers `start` wires in).

local compat = require("codespec.compat")
local config = require("codespec.config")

local M = {}
local client_id = nil

--- The server command: the `cmd` option, else `codespec` on PATH, else the .venv of the
--- checkout this plugin is in (the README's set-up), else the user's own bin folders (where
--- pipx and the set-up's link put it: $PIPX_BIN_DIR, ~/.local/bin), which a Neovim started
--- from a desktop launcher does not always have on its PATH.
function M.find_server(options)
  options = options or config.options
  if options.cmd then
    return options.cmd
  end
  local on_path = vim.fn.exepath("codespec")
  if on_path ~= "" then
    return { on_path, "lsp" }
  end
  local here = debug.getinfo(1, "S").source:sub(2)
  local root = vim.fn.fnamemodify(here, ":p:h:h:h:h:h") -- lua/codespec/client.lua -> checkout
  local candidates = { root .. "/.venv/bin/codespec" }
  if vim.env.PIPX_BIN_DIR and vim.env.PIPX_BIN_DIR ~= "" then
    table.insert(candidates, vim.env.PIPX_BIN_DIR .. "/codespec")
  end
  if vim.env.HOME and vim.env.HOME ~= "" then
    table.insert(candidates, vim.env.HOME .. "/.local/bin/codespec")
  end
  for _, candidate in ipairs(candidates) do
    if vim.fn.executable(candidate) == 1 then
      return { candidate, "lsp" }
    end
  end
  return nil
end

M.command = nil -- the command the running client was started with
-- what to do when `find_server` finds none (the plugin's message and :checkhealth say it)
M.NOT_FOUND = "`codespec` not found on PATH, in this plugin's checkout (.venv) or ~/.local/bin:"
  .. " run the README's set-up (scripts/setup.sh), or set `cmd` in setup()"

--- The running client, or nil.
function M.get()
  return client_id and vim.lsp.get_client_by_id(client_id) or nil
end

function M.id()
  return client_id
end

--- The running client when completions are on in ``bufnr`` and it is attached there, or nil.
function M.serving(bufnr)
  local c = M.get()
  if not c or not config.enabled_in(bufnr) or not compat.attached(c, bufnr) then
    return nil
  end
  return c
end

--- Start the client (once) and attach ``bufnr``. ``on``: partial(result), progress(value),
--- engine(result) for `codespec/status`, init(), exit(code). Returns false when no server command was found.
function M.start(bufnr, on)
  local cmd = M.find_server()
  if not cmd then
    return false
  end
  M.command = cmd
  client_id = compat.start_client({
    name = "codespec",
    cmd = cmd,
    root_dir = vim.fn.getcwd(),
    init_options = config.options.settings,
    flags = { debounce_text_changes = 0 }, -- the server must see an edit before the request
    offset_encoding = "utf-8",
    capabilities = {
      general = { positionEncodings = { "utf-8" } },
      window = { workDoneProgress = true },
      experimental = { codespecVerdicts = true },
    },
    handlers = {
      ["codespec/partialCompletion"] = function(_, result)
        on.partial(result)
      end,
      ["$/progress"] = function(_, result)
        on.progress(result and result.value or {})
      end,
      ["codespec/status"] = function(_, result)
        on.engine(result or {})
      end,
    },
    on_init = function()
      on.init()
    end,
    on_exit = function(code)
      client_id = nil
      on.exit(code)
    end,
  }, bufnr, client_id)
  return true
end

function M.stop()
  local c = M.get()
  if c then
    c.stop()
  end
  client_id = nil
end

--- Send a request; returns ok, request_id (see compat.request).
function M.request(method, params, handler, bufnr)
  local c = M.get()
  if not c then
    return false, nil
  end
  return compat.request(c, method, params, handler, bufnr)
end

function M.notify(method, params)
  local c = M.get()
  if c then
    compat.notify(c, method, params)
  end
end

function M.cancel(request_id)
  local c = M.get()
  if c then
    compat.cancel(c, request_id)
  end
end

--- Report what was done with a suggestion (lsp/PROTOCOL.md, "Verdicts").
function M.report(command, ...)
  M.request("workspace/executeCommand", { command = command, arguments = { ... } }, function() end)
end

return M
