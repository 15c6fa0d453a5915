-- codespec for Neovim: ghost-text completions from the local codespec daemon.
--
-- One LSP client (`codespec lsp`, which relays to the shared daemon) per Neovim. While you
-- type, a debounced `textDocument/inlineCompletion` request asks for a suggestion; it is drawn
-- as ghost text (virtual text on the cursor line, virtual lines below) and grows with the
-- server's `codespec/partialCompletion` notifications. Tab accepts it, <M-Right> accepts the
-- next word, <M-Down> the next line, <C-]> dismisses it (all configurable). What you did with
-- a suggestion is reported with the commands in lsp/PROTOCOL.md ("Verdicts"). Where the cursor
-- rests is sent as `codespec/cursor`, so the daemon can warm the prompt there.
--
-- Works on Neovim 0.7.2 (Debian 12) and newer: APIs that differ are wrapped in `compat`.

local compat = require("codespec.compat")
local ghost = require("codespec.ghost")

local M = {}

M.defaults = {
  cmd = nil, -- { "/path/to/codespec", "lsp" }; default: found by `find_server`
  debounce_ms = 150, -- settings.debounceMs, when given, wins
  enabled = true,
  disabled_filetypes = {},
  filetypes = nil, -- nil: every buffer with a file
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-Down>",
    dismiss = "<C-]>",
    trigger = "<M-\\>",
  },
  settings = {}, -- passed as initializationOptions (keys of lsp/settings.schema.json)
}

M.config = vim.deepcopy(M.defaults)
M.state = {
  client_id = nil,
  status = "stopped", -- stopped | loading | ready | busy | disabled | error
  message = nil,
  last_latency_ms = nil,
  tokens_per_pass = nil, -- the daemon's, asked at most every 5 s after a completion
  stats_asked = nil, -- vim.loop.now() of the last ask
  suggestion = nil, -- { id, text, bufnr, row, col, tick, shown }
  pending = nil, -- { request_id, bufnr, tick, row, col, started }
  timer = nil,
}

local function notify(message, level)
  vim.notify("codespec: " .. message, level or vim.log.levels.INFO)
end

--- The server command: the `cmd` option, else `codespec` on PATH, else a checkout's .venv.
function M.find_server(config)
  config = config or M.config
  if config.cmd then
    return config.cmd
  end
  if vim.fn.executable("codespec") == 1 then
    return { "codespec", "lsp" }
  end
  local here = debug.getinfo(1, "S").source:sub(2)
  local root = vim.fn.fnamemodify(here, ":p:h:h:h:h:h") -- lua/codespec/init.lua -> checkout
  local venv = root .. "/.venv/bin/codespec"
  if vim.fn.executable(venv) == 1 then
    return { venv, "lsp" }
  end
  return nil
end

local function client()
  return M.state.client_id and vim.lsp.get_client_by_id(M.state.client_id) or nil
end

local function set_status(status, message)
  M.state.status = status
  M.state.message = message
  pcall(vim.api.nvim_exec_autocmds, "User", { pattern = "CodespecStatus" })
end

local function language_enabled(bufnr)
  local ft = vim.bo[bufnr].filetype
  if not M.config.enabled or vim.tbl_contains(M.config.disabled_filetypes, ft) then
    return false
  end
  return M.config.filetypes == nil or vim.tbl_contains(M.config.filetypes, ft)
end

-- -- verdicts ----------------------------------------------------------------------------

local function report(command, ...)
  local c = client()
  if c then
    compat.request(c, "workspace/executeCommand", { command = command, arguments = { ... } }, function() end)
  end
end

-- -- showing and clearing --------------------------------------------------------------------

function M.clear()
  ghost.clear()
  M.state.suggestion = nil
end

local function show(suggestion)
  M.state.suggestion = suggestion
  ghost.draw(suggestion.bufnr, suggestion.row, suggestion.col, suggestion.text)
  if not suggestion.shown and suggestion.id then
    suggestion.shown = true
    report("codespec.didShow", suggestion.id)
  end
end

--- Whether the cursor is still where the request was made, in the same text.
local function still_fits(p)
  if vim.api.nvim_get_current_buf() ~= p.bufnr or vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    return false
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  return cursor[1] - 1 == p.row and cursor[2] == p.col and vim.b[p.bufnr].changedtick == p.tick
end

-- -- requests ----------------------------------------------------------------------------

function M.request(invoked, retried)
  local c = client()
  local bufnr = vim.api.nvim_get_current_buf()
  if not c or not language_enabled(bufnr) or not compat.attached(c, bufnr) then
    return
  end
  if M.state.pending then
    compat.cancel(c, M.state.pending.request_id)
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  local p = {
    bufnr = bufnr,
    row = cursor[1] - 1,
    col = cursor[2], -- bytes: the session speaks utf-8 positions
    tick = vim.b[bufnr].changedtick,
    started = vim.loop.hrtime(),
    retried = retried,
  }
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = p.row, character = p.col },
    context = { triggerKind = invoked and 1 or 2 },
  }
  set_status("busy")
  local ok, request_id = compat.request(c, "textDocument/inlineCompletion", params, function(err, result)
    if M.state.pending ~= p then
      return -- superseded
    end
    M.state.pending = nil
    M.state.last_latency_ms = (vim.loop.hrtime() - p.started) / 1e6
    M.ask_tokens_per_pass()
    set_status("ready")
    if err and err.code == -32602 and not p.retried and still_fits(p) then
      -- the client sends didOpen once it is initialized: a first request can overtake it
      vim.defer_fn(function()
        if still_fits(p) and not M.state.pending then
          M.request(invoked, true)
        end
      end, 300)
      return
    end
    if err or not result or not still_fits(p) then
      if err and err.code ~= -32800 then
        set_status("error", err.message)
      end
      return
    end
    local item = (result.items or result)[1]
    if not item or not item.insertText or item.insertText == "" then
      M.clear()
      return
    end
    local id = item.command and item.command.arguments and item.command.arguments[1]
    show({ id = id, text = item.insertText, bufnr = p.bufnr, row = p.row, col = p.col, tick = p.tick })
  end, bufnr)
  if ok then
    p.request_id = request_id
    M.state.pending = p
  end
end

local function on_partial(_, result)
  local p = M.state.pending
  if not p or not result or result.id ~= p.request_id or not still_fits(p) then
    return
  end
  if type(result.text) == "string" and result.text ~= "" then
    ghost.draw(p.bufnr, p.row, p.col, result.text) -- streamed: not a suggestion yet
  end
end

--- Tell the server where the cursor rests, so that it warms the prompt there (`codespec/cursor`).
local function cursor_rested()
  local c = client()
  local bufnr = vim.api.nvim_get_current_buf()
  if not c or not language_enabled(bufnr) or not compat.attached(c, bufnr) then
    return
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  compat.notify(c, "codespec/cursor", {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = cursor[1] - 1, character = cursor[2] },
  })
end

function M.schedule()
  if M.state.timer then
    M.state.timer:stop()
  end
  M.state.timer = M.state.timer or vim.loop.new_timer()
  local debounce = tonumber((M.config.settings or {}).debounceMs) or M.config.debounce_ms
  M.state.timer:start(debounce, 0, vim.schedule_wrap(function()
    if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" then
      M.request(false)
    end
  end))
end

-- -- accepting -------------------------------------------------------------------------------

local function insert(text)
  local s = M.state.suggestion
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(s.bufnr, s.row, s.col, s.row, s.col, lines)
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  return row, col
end

--- Accept ``part`` of the suggestion: "all", "word" or "line". Returns false when none shows.
function M.accept(part)
  local s = M.state.suggestion
  if not s or not still_fits(s) then
    M.clear()
    return false
  end
  local text = s.text
  local take = text
  if part == "word" then
    take = text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text:match("^%s+") or text
  elseif part == "line" then
    take = text:match("^[^\n]*\n") or text
  end
  ghost.clear()
  local row, col = insert(take)
  local rest = text:sub(#take + 1)
  if rest == "" then
    M.state.suggestion = nil
    if s.id then
      report("codespec.didAccept", s.id)
    end
  else
    if s.id then
      report("codespec.didPartialAccept", s.id, vim.fn.strchars(take))
    end
    s.text, s.row, s.col, s.tick = rest, row, col, vim.b[s.bufnr].changedtick
    show(s)
  end
  return true
end

function M.dismiss()
  local s = M.state.suggestion
  if not s then
    return false
  end
  M.clear()
  if s.id then
    report("codespec.didDismiss", s.id)
  end
  return true
end

function M.visible()
  return M.state.suggestion ~= nil
end

--- The ghost text now shown (for tests and statuslines), or nil.
function M.ghost_text()
  return ghost.text()
end

-- -- commands --------------------------------------------------------------------------------

function M.status_text()
  local s = M.state
  local text = "codespec: " .. s.status
  local off_here = s.status == "ready" and not language_enabled(vim.api.nvim_get_current_buf())
  if not M.config.enabled or off_here then
    text = "codespec: disabled"
  end
  if s.message then
    text = text .. " (" .. s.message .. ")"
  end
  if s.last_latency_ms then
    text = text .. string.format(", last %.0f ms", s.last_latency_ms)
  end
  if s.tokens_per_pass then
    text = text .. string.format(", %.2f tokens per target pass", s.tokens_per_pass)
  end
  return text
end

function M.toggle(filetype)
  if filetype and filetype ~= "" then
    local list = M.config.disabled_filetypes
    if vim.tbl_contains(list, filetype) then
      M.config.disabled_filetypes = vim.tbl_filter(function(f) return f ~= filetype end, list)
    else
      table.insert(list, filetype)
    end
  else
    M.config.enabled = not M.config.enabled
  end
  M.clear()
  notify(M.status_text() .. (filetype and filetype ~= "" and (" (" .. filetype .. " toggled)") or ""))
end

--- The daemon's tokens per target pass for the status (`codespec/stats`), at most every 5 s.
function M.ask_tokens_per_pass()
  local c, now = client(), vim.loop.now()
  if not c or (M.state.stats_asked and now - M.state.stats_asked < 5000) then
    return
  end
  M.state.stats_asked = now
  compat.request(c, "codespec/stats", { since = "30m" }, function(err, result)
    local tpp = not err and result and result.daemon and result.daemon.tokens_per_pass
    if type(tpp) == "number" then
      M.state.tokens_per_pass = tpp
    else
      M.state.stats_asked = nil -- nothing counted yet: ask again after the next completion
    end
  end)
end

function M.stats(callback)
  local c = client()
  if not c then
    notify("not running", vim.log.levels.WARN)
    return
  end
  compat.request(c, "codespec/stats", {}, function(err, result)
    if callback then
      return callback(err, result)
    end
    if err or not result then
      return notify("stats failed: " .. (err and err.message or "no result"), vim.log.levels.WARN)
    end
    local lines = { "language    shown  accepted  partial  tok/pass" }
    for _, g in ipairs(result.groups or {}) do
      local rate = g.acceptance_rate ~= vim.NIL and g.acceptance_rate or 0
      local tpp = g.tokens_per_pass ~= vim.NIL and g.tokens_per_pass or 0
      table.insert(lines, string.format("%-10s %6d %8.0f%% %8d %9.2f", g.key, g.shown, 100 * rate, g.partial, tpp))
    end
    if #lines == 1 then
      table.insert(lines, "(nothing recorded yet)")
    end
    vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
  end)
end

--- Change server settings (keys of lsp/settings.schema.json) for this session, now.
function M.configure(settings)
  M.config.settings = vim.tbl_deep_extend("force", M.config.settings or {}, settings or {})
  local c = client()
  if c then
    compat.notify(c, "workspace/didChangeConfiguration", { settings = { codespec = M.config.settings } })
  end
end

-- -- starting --------------------------------------------------------------------------------

local function start(bufnr)
  if vim.bo[bufnr].buftype ~= "" or vim.api.nvim_buf_get_name(bufnr) == "" then
    return
  end
  local cmd = M.find_server()
  if not cmd then
    if M.state.status ~= "error" then
      set_status("error", "server not found")
      notify(
        "`codespec` not found: install it (see the codespec README) or set `cmd` in setup()",
        vim.log.levels.WARN
      )
    end
    return
  end
  local id = compat.start_client({
    name = "codespec",
    cmd = cmd,
    root_dir = vim.fn.getcwd(),
    init_options = M.config.settings,
    flags = { debounce_text_changes = 0 }, -- the server must see an edit before the request
    offset_encoding = "utf-8",
    capabilities = {
      general = { positionEncodings = { "utf-8" } },
      window = { workDoneProgress = true },
      experimental = { codespecVerdicts = true },
    },
    handlers = {
      ["codespec/partialCompletion"] = on_partial,
      ["$/progress"] = function(_, result)
        local value = result and result.value or {}
        if value.kind == "begin" and not M.state.last_latency_ms then
          set_status("loading", value.message)
        elseif value.kind == "end" then
          set_status("ready")
        end
      end,
    },
    on_init = function()
      if M.state.status ~= "loading" then
        set_status("ready")
      end
    end,
    on_exit = function(code)
      M.state.client_id = nil
      M.state.pending = nil
      vim.schedule(function()
        M.clear()
        set_status("error", "server exited (" .. tostring(code) .. ")")
      end)
    end,
  }, bufnr, M.state.client_id)
  M.state.client_id = id
end

function M.restart()
  local c = client()
  if c then
    c.stop()
  end
  M.state.client_id = nil
  vim.defer_fn(function()
    start(vim.api.nvim_get_current_buf())
  end, 200)
end

local function map(lhs, fn, fallback)
  if not lhs or lhs == "" then
    return
  end
  vim.keymap.set("i", lhs, function()
    if not fn() then
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(fallback or lhs, true, false, true), "n", false)
    end
  end, { silent = true, desc = "codespec" })
end

function M.setup(options)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), options or {})
  local group = vim.api.nvim_create_augroup("codespec", { clear = true })
  vim.api.nvim_create_autocmd({ "BufEnter", "FileType" }, {
    group = group,
    callback = function(args)
      start(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd("TextChangedI", {
    group = group,
    callback = function()
      local s = M.state.suggestion
      if s and still_fits(s) then
        return -- our own insertion (a partial accept): the rest stays
      end
      M.clear() -- a suggestion that no longer fits is never kept (the server infers the verdict)
      M.schedule()
    end,
  })
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    callback = function()
      M.clear()
      local c, p = client(), M.state.pending
      if p then -- nobody waits for it any more
        M.state.pending = nil
        if c then
          compat.cancel(c, p.request_id)
        end
        set_status("ready")
      end
    end,
  })
  vim.api.nvim_create_autocmd("CursorMovedI", {
    group = group,
    callback = function()
      local s = M.state.suggestion
      if s and not still_fits(s) then
        M.clear()
      end
    end,
  })
  M.state.rest_timer = M.state.rest_timer or vim.loop.new_timer()
  vim.api.nvim_create_autocmd({ "CursorMoved", "CursorMovedI", "BufEnter" }, {
    group = group,
    callback = function()
      M.state.rest_timer:stop()
      M.state.rest_timer:start(300, 0, vim.schedule_wrap(cursor_rested))
    end,
  })
  local keys = M.config.keymaps
  map(keys.accept, function() return M.accept("all") end)
  map(keys.accept_word, function() return M.accept("word") end)
  map(keys.accept_line, function() return M.accept("line") end)
  map(keys.dismiss, M.dismiss)
  map(keys.trigger, function()
    M.request(true)
    return true
  end)
  vim.api.nvim_create_user_command("CodespecStatus", function()
    notify(M.status_text():sub(11))
  end, {})
  vim.api.nvim_create_user_command("CodespecStats", function()
    M.stats()
  end, {})
  vim.api.nvim_create_user_command("CodespecToggle", function(args)
    M.toggle(args.args)
  end, { nargs = "?" })
  vim.api.nvim_create_user_command("CodespecRestart", M.restart, {})
  local current = vim.api.nvim_get_current_buf()
  start(current)
end

return M
