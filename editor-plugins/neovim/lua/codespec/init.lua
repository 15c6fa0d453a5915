-- codespec for Neovim: ghost-text completions from the local codespec daemon.
--
-- One LSP client (`codespec lsp`, which relays to the shared daemon) per Neovim. While you
-- type, a debounced `textDocument/inlineCompletion` request asks for a suggestion; it is drawn
-- as ghost text (virtual text on the cursor line, virtual lines below) and grows with the
-- server's `codespec/partialCompletion` notifications. Tab accepts it, <M-Right> accepts the
-- next word, <M-Down> the next line, <C-]> dismisses it (all configurable); streamed text can be
-- accepted before the reply. While a completion menu is open, its keys stay its own and the
-- ghost text hides until it closes (`hide_during_completion`). What you did with a suggestion
-- is reported with the commands in lsp/PROTOCOL.md ("Verdicts"). Where the cursor rests is sent
-- as `codespec/cursor`, so the daemon can warm the prompt there. Once an edit settles in Normal
-- mode, the next edit it calls for is asked and shown where it is (`nextedit`): Tab jumps to it
-- and applies it, Esc dismisses it.
--
-- The rooms (as copilot.lua splits its plugin): `config` (options), `client` (the LSP client),
-- `suggestion` (asking, drawing through `ghost`, accepting), `menu` (completion menus),
-- `nextedit` (next edits), `status` (status line, stats); this file wires them to Neovim's
-- events, keys and commands.
-- Works on Neovim 0.7.2 (Debian 12) and newer: APIs that differ are wrapped in `compat`.

local client = require("codespec.client")
local config = require("codespec.config")
local ghost = require("codespec.ghost")
local menu = require("codespec.menu")
local nextedit = require("codespec.nextedit")
local status = require("codespec.status")
local suggestion = require("codespec.suggestion")

local M = {}

M.find_server = client.find_server
M.request = suggestion.request
M.accept = suggestion.accept
M.dismiss = suggestion.dismiss
M.visible = suggestion.visible
M.next_edit = nextedit.current
M.status_text = status.text
M.stats = status.stats

--- The ghost text now shown (for tests and statuslines), or nil.
function M.ghost_text()
  return ghost.text()
end

function M.toggle(filetype)
  config.toggle(filetype)
  suggestion.clear()
  local which = filetype and filetype ~= "" and (" (" .. filetype .. " toggled)") or ""
  status.notify(status.text() .. which)
end

--- Change server settings (keys of lsp/settings.schema.json) for this session, now.
function M.configure(settings)
  local all = config.merge_settings(settings)
  client.notify("workspace/didChangeConfiguration", { settings = { codespec = all } })
end

-- -- the server's events -----------------------------------------------------------------------

local events = {
  partial = suggestion.on_partial,
  engine = status.engine,
  progress = function(value)
    if value.kind == "begin" and not status.state.last_latency_ms then
      status.set("loading", value.message)
    elseif value.kind == "end" then
      status.set("ready")
      -- typed while it loaded: complete at the cursor now, not at the next keystroke
      if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" and suggestion.idle() then
        suggestion.request(false)
      end
    end
  end,
  init = function()
    if status.state.status ~= "loading" then
      status.set("ready")
    end
  end,
  exit = function(code)
    suggestion.reset()
    nextedit.clear()
    vim.schedule(function()
      status.set("error", "server exited (" .. tostring(code) .. ")")
    end)
  end,
}

local function start(bufnr)
  if vim.bo[bufnr].buftype ~= "" or vim.api.nvim_buf_get_name(bufnr) == "" then
    return
  end
  if not client.start(bufnr, events) and status.state.status ~= "error" then
    status.set("error", "server not found")
    status.notify(client.NOT_FOUND, vim.log.levels.WARN)
  end
end

function M.restart()
  client.stop()
  vim.defer_fn(function()
    start(vim.api.nvim_get_current_buf())
  end, 200)
end

--- Tell the server where the cursor rests, so that it warms the prompt there (`codespec/cursor`).
local function cursor_rested()
  local bufnr = vim.api.nvim_get_current_buf()
  if not client.serving(bufnr) then
    return
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  client.notify("codespec/cursor", {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = cursor[1] - 1, character = cursor[2] },
  })
end

-- -- setup -------------------------------------------------------------------------------------

--- What ``lhs`` did in ``mode`` before codespec mapped it: that mapping kept under a <Plug>
--- name (fed with remapping), else the key itself.
local function previous(lhs, mode)
  local old = vim.fn.maparg(lhs, mode, false, true)
  if type(old) ~= "table" or vim.tbl_isempty(old) or old.desc == "codespec" then
    return lhs, "n"
  end
  local plug = "<Plug>(codespec-before-" .. mode .. "-" .. lhs:gsub("[<>]", "") .. ")"
  local rhs = old.callback or old.rhs
  vim.keymap.set(mode, plug, rhs, { expr = old.expr == 1, remap = old.noremap ~= 1, silent = old.silent == 1 })
  return plug, "m"
end

--- Map ``lhs`` in ``mode`` (Insert unless given) to ``fn``; where ``fn`` returns false the key
--- does what it did before.
local function map(lhs, fn, mode)
  mode = mode or "i"
  if not lhs or lhs == "" then
    return
  end
  local fallback, feed_mode = previous(lhs, mode)
  vim.keymap.set(mode, lhs, function()
    if not fn() then
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(fallback, true, false, true), feed_mode, false)
    end
  end, { silent = true, desc = "codespec" })
end

local rest_timer = nil

local function autocommands()
  local group = vim.api.nvim_create_augroup("codespec", { clear = true })
  local function on(event, callback)
    vim.api.nvim_create_autocmd(event, { group = group, callback = callback })
  end
  on({ "BufEnter", "FileType" }, function(args)
    start(args.buf)
  end)
  on("TextChangedI", suggestion.on_text_changed)
  on({ "InsertLeave", "BufLeave" }, suggestion.abandon)
  -- next edits: asked once an edit settles in Normal mode, over as soon as typing starts
  local tick_at_insert = nil
  on("InsertEnter", function(args)
    tick_at_insert = vim.b[args.buf].changedtick
    nextedit.on_typing()
  end)
  on("InsertLeave", function(args)
    if tick_at_insert ~= vim.b[args.buf].changedtick then
      nextedit.on_edit()
    end
  end)
  on("TextChanged", nextedit.on_edit) -- (a change made in Normal mode)
  on("BufLeave", nextedit.on_typing)
  on("TextChangedP", suggestion.on_text_changed) -- (the menu changed the text)
  on("CursorMovedI", suggestion.on_cursor_moved)
  menu.watch(group, suggestion.on_menu)
  rest_timer = rest_timer or vim.loop.new_timer()
  on({ "CursorMoved", "CursorMovedI", "BufEnter" }, function()
    rest_timer:stop()
    rest_timer:start(300, 0, vim.schedule_wrap(cursor_rested))
  end)
end

local function keymaps()
  local keys = config.options.keymaps
  map(keys.accept, function()
    return suggestion.accept("all")
  end)
  map(keys.accept_word, function()
    return suggestion.accept("word")
  end)
  map(keys.accept_line, function()
    return suggestion.accept("line")
  end)
  map(keys.dismiss, suggestion.dismiss)
  map(keys.trigger, function()
    suggestion.request(true)
    return true
  end)
  local next_edits = config.options.next_edits
  map(next_edits.accept, nextedit.accept, "n")
  map(next_edits.dismiss, nextedit.dismiss, "n")
end

local function commands()
  vim.api.nvim_create_user_command("CodespecStatus", function()
    status.notify(status.text():sub(11))
  end, {})
  vim.api.nvim_create_user_command("CodespecStats", function()
    status.stats()
  end, {})
  vim.api.nvim_create_user_command("CodespecToggle", function(args)
    M.toggle(args.args)
  end, { nargs = "?" })
  vim.api.nvim_create_user_command("CodespecRestart", M.restart, {})
  vim.api.nvim_create_user_command("CodespecModel", function(args)
    status.choose_model(args.args)
  end, { nargs = "?" })
end

function M.setup(options)
  config.setup(options)
  autocommands()
  keymaps()
  commands()
  start(vim.api.nvim_get_current_buf())
end

return M
