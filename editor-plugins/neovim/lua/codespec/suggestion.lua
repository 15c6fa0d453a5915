-- The suggestion: ask for it after a pause in typing, draw it as it streams, accept it whole or
-- a word or a line at a time, dismiss it; report each verdict to the server.
--
-- What is on screen can be accepted at any moment: the final suggestion, or the text streamed so
-- far (the request goes on, and what comes after the accepted part is drawn after it). While a
-- completion menu is open the ghost text is hidden (``hide_during_completion``) and drawn again
-- when the menu closes.

local client = require("codespec.client")
local config = require("codespec.config")
local ghost = require("codespec.ghost")
local menu = require("codespec.menu")
local status = require("codespec.status")

local M = {}

-- the suggestion answered: { id, text, bufnr, row, col, tick, shown }
local current = nil
-- the request in flight: { request_id, bufnr, row, col, tick, started, streamed, taken }; row,
-- col and tick follow the cursor as streamed text is accepted (``taken``: what was accepted of
-- it, ``streamed``: all the server has sent)
local pending = nil
local timer = nil

--- Whether the cursor is still where ``p`` was asked for or drawn, in the same text.
local function still_fits(p)
  if vim.api.nvim_get_current_buf() ~= p.bufnr or vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    return false
  end
  local cursor = vim.api.nvim_win_get_cursor(0)
  return cursor[1] - 1 == p.row and cursor[2] == p.col and vim.b[p.bufnr].changedtick == p.tick
end

--- What of the streamed text is left to show after what was accepted of it ("" for none).
local function streamed_rest(p)
  local streamed, taken = p.streamed or "", p.taken or ""
  if streamed:sub(1, #taken) ~= taken then
    return ""
  end
  return streamed:sub(#taken + 1)
end

--- Draw ``text`` at ``p`` unless a completion menu is open and hides it.
local function draw(p, text)
  if config.options.hide_during_completion and menu.visible() then
    ghost.clear()
    return
  end
  ghost.draw(p.bufnr, p.row, p.col, text)
end

function M.clear()
  ghost.clear()
  current = nil
end

local function show(suggestion)
  current = suggestion
  draw(suggestion, suggestion.text)
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

--- The reply for ``p``: the suggestion (what is left of it after what was accepted while it
--- streamed), shown where the cursor is.
local function answered(p, result)
  local text, id = first_item(result)
  local taken = p.taken or ""
  if not text or text:sub(1, #taken) ~= taken then
    M.clear()
    return
  end
  if taken ~= "" and id then
    -- accepted while it streamed, before it had an id: say so now
    client.report("codespec.didShow", id)
    local verdict = #taken == #text and "codespec.didAccept" or "codespec.didPartialAccept"
    client.report(verdict, id, vim.fn.strchars(taken))
  end
  if #taken == #text then
    M.clear()
    return
  end
  show({ id = id, text = text:sub(#taken + 1), bufnr = p.bufnr, row = p.row, col = p.col, tick = p.tick, shown = taken ~= "" })
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
      if not current then
        ghost.clear() -- (streamed text that led nowhere)
      end
      return
    end
    answered(p, result)
  end, bufnr)
  if ok then
    p.request_id = request_id
    pending = p
  end
end

--- A `codespec/partialCompletion` notification: draw what has streamed so far.
function M.on_partial(result)
  local p = pending
  if not p or not result or result.id ~= p.request_id or type(result.text) ~= "string" then
    return
  end
  p.streamed = result.text
  local rest = streamed_rest(p)
  if rest ~= "" and not current and still_fits(p) then
    draw(p, rest) -- streamed: not a suggestion yet
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
--- asked for (the server infers the verdict). Our own insertion (an accept) keeps it, and the
--- stream it was taken from.
function M.on_text_changed()
  if (current and still_fits(current)) or (pending and still_fits(pending)) then
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

--- A completion menu opened or closed: hide the ghost text while it is open (see
--- ``hide_during_completion``), draw it again once it closes, or ask anew if the menu changed
--- the text meanwhile.
function M.on_menu(open)
  if not config.options.hide_during_completion or vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    return
  end
  if open then
    ghost.clear()
  elseif current and still_fits(current) then
    draw(current, current.text)
  elseif pending and still_fits(pending) then
    local rest = streamed_rest(pending)
    if rest ~= "" then
      draw(pending, rest)
    end
  elseif not pending then
    M.clear()
    M.schedule()
  end
end

--- Insert ``text`` at ``(row, col)`` of ``bufnr`` and put the cursor after it; returns the
--- cursor's new row and col.
local function insert(bufnr, row, col, text)
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row, col, row, col, lines)
  local new_row = row + #lines - 1
  local new_col = (#lines == 1 and col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { new_row + 1, new_col })
  return new_row, new_col
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

--- Accept ``part`` of what is on screen ("all", "word" or "line"): the suggestion, or the text
--- streamed so far. Returns false when none shows (or a completion menu has the key).
function M.accept(part)
  if menu.visible() then
    return false -- the menu keeps its keys
  end
  local s = current
  if s and still_fits(s) then
    local take = part_of(s.text, part)
    ghost.clear()
    local row, col = insert(s.bufnr, s.row, s.col, take)
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
  local p = pending
  local shown = p and not current and still_fits(p) and ghost.text() or nil
  if not shown or shown == "" then
    M.clear()
    return false
  end
  -- streamed text: take what is drawn (the request goes on; the rest is drawn after it)
  local take = part_of(shown, part)
  ghost.clear()
  p.taken = (p.taken or "") .. take
  p.row, p.col = insert(p.bufnr, p.row, p.col, take)
  p.tick = vim.b[p.bufnr].changedtick
  local rest = streamed_rest(p)
  if rest ~= "" then
    draw(p, rest)
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

--- Whether nothing is shown or on its way (the model became ready: ask at the cursor).
function M.idle()
  return current == nil and pending == nil
end

return M
