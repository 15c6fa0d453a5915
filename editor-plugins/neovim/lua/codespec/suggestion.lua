-- The suggestion: ask for it after a pause in typing, draw it as it streams, accept it whole or
-- a word or a line at a time, dismiss it; report each verdict to the server.

local client = require("codespec.client")
local config = require("codespec.config")
local ghost = require("codespec.ghost")
local status = require("codespec.status")

local M = {}

local current = nil -- the suggestion shown: { id, text, bufnr, row, col, tick, shown }
local pending = nil -- the request in flight: { request_id, bufnr, row, col, tick, started }
local timer = nil

--- Whether the cursor is still where ``p`` was asked for or drawn, in the same text.
local function still_fits(p)
  if vim.api.nvim_get_current_buf() ~= p.bufnr or vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    return false
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  return cursor[1] - 1 == p.row and cursor[2] == p.col and vim.b[p.bufnr].changedtick == p.tick
end

function M.clear()
  ghost.clear()
  current = nil
end

local function show(suggestion)
  current = suggestion
  ghost.draw(suggestion.bufnr, suggestion.row, suggestion.col, suggestion.text)
  if not suggestion.shown and suggestion.id then
    suggestion.shown = true
    client.report("codespec.didShow", suggestion.id)
  end
end

--- The suggestion's first item from an inlineCompletion result, or nil.
local function first_item(result)
  local item = (result.items or result)[1]
  if not item or not item.insertText or item.insertText == "" then
    return nil
  end
  local id = item.command and item.command.arguments and item.command.arguments[1]
  return item.insertText, id
end

--- Ask for a suggestion at the cursor (``invoked``: by the user's key, not by typing).
function M.request(invoked, retried)
  local bufnr = vim.api.nvim_get_current_buf()
  if not client.serving(bufnr) then
    return
  end
  if pending then
    client.cancel(pending.request_id)
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  local p = {
    bufnr = bufnr,
    row = cursor[1] - 1,
    col = cursor[2], -- bytes: the session speaks utf-8 positions
    tick = vim.b[bufnr].changedtick,
    started = vim.loop.hrtime(),
  }
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = p.row, character = p.col },
    context = { triggerKind = invoked and 1 or 2 },
  }
  status.set("busy")
  local ok, request_id = client.request("textDocument/inlineCompletion", params, function(err, result)
    if pending ~= p then
      return -- superseded
    end
    pending = nil
    status.completed((vim.loop.hrtime() - p.started) / 1e6)
    if err and err.code == -32602 and not retried and still_fits(p) then
      -- the client sends didOpen once it is initialized: a first request can overtake it
      vim.defer_fn(function()
        if still_fits(p) and not pending then
          M.request(invoked, true)
        end
      end, 300)
      return
    end
    if err or not result or not still_fits(p) then
      if err and err.code ~= -32800 then
        status.set("error", err.message)
      end
      return
    end
    local text, id = first_item(result)
    if not text then
      M.clear()
      return
    end
    show({ id = id, text = text, bufnr = p.bufnr, row = p.row, col = p.col, tick = p.tick })
  end, bufnr)
  if ok then
    p.request_id = request_id
    pending = p
  end
end

--- A `codespec/partialCompletion` notification: draw what has streamed so far.
function M.on_partial(result)
  local p = pending
  if not p or not result or result.id ~= p.request_id or not still_fits(p) then
    return
  end
  if type(result.text) == "string" and result.text ~= "" then
    ghost.draw(p.bufnr, p.row, p.col, result.text) -- streamed: not a suggestion yet
  end
end

--- Ask after the debounce, if still in insert mode then.
function M.schedule()
  timer = timer or vim.loop.new_timer()
  timer:stop()
  timer:start(config.debounce_ms(), 0, vim.schedule_wrap(function()
    if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" then
      M.request(false)
    end
  end))
end

--- Nobody waits for the request in flight any more (insert mode or the buffer was left).
function M.abandon()
  M.clear()
  if pending then
    client.cancel(pending.request_id)
    pending = nil
    status.set("ready")
  end
end

--- The server went away: nothing in flight or shown survives it (called from the client's
--- exit callback, where the screen cannot be touched until scheduled).
function M.reset()
  pending = nil
  vim.schedule(M.clear)
end

--- The buffer changed in insert mode: a suggestion that no longer fits goes, and a new one is
--- asked for (the server infers the verdict). Our own insertion (a partial accept) keeps it.
function M.on_text_changed()
  if current and still_fits(current) then
    return
  end
  M.clear()
  M.schedule()
end

function M.on_cursor_moved()
  if current and not still_fits(current) then
    M.clear()
  end
end

local function insert(text)
  local s = current
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(s.bufnr, s.row, s.col, s.row, s.col, lines)
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  return row, col
end

--- The part of ``text`` that accepting ``part`` ("all", "word" or "line") takes.
local function part_of(text, part)
  if part == "word" then
    return text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text:match("^%s+") or text
  elseif part == "line" then
    return text:match("^[^\n]*\n") or text
  end
  return text
end

--- Accept ``part`` of the suggestion: "all", "word" or "line". Returns false when none shows.
function M.accept(part)
  local s = current
  if not s or not still_fits(s) then
    M.clear()
    return false
  end
  local take = part_of(s.text, part)
  ghost.clear()
  local row, col = insert(take)
  local rest = s.text:sub(#take + 1)
  if rest == "" then
    current = nil
    if s.id then
      client.report("codespec.didAccept", s.id)
    end
  else
    if s.id then
      client.report("codespec.didPartialAccept", s.id, vim.fn.strchars(take))
    end
    s.text, s.row, s.col, s.tick = rest, row, col, vim.b[s.bufnr].changedtick
    show(s)
  end
  return true
end

function M.dismiss()
  local s = current
  if not s then
    return false
  end
  M.clear()
  if s.id then
    client.report("codespec.didDismiss", s.id)
  end
  return true
end

function M.visible()
  return current ~= nil
end

return M
