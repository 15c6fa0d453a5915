-- Next edits: after you edit and pause in Normal mode, ask the server for the edit your recent
-- ones call for nearby (`textDocument/copilotInlineEdit`, lsp/PROTOCOL.md "Next edits") and
-- show it where it is: the lines it changes highlighted as deleted, their new text as virtual
-- lines below them. The accept key (Tab) jumps to it, a second press applies it; the dismiss
-- key (Esc) drops it. Any edit of the buffer drops it too (the server reads that as a
-- rejection). Shown, accepted and dismissed edits are reported as for completions.

local client = require("codespec.client")
local config = require("codespec.config")

local M = {}
M.ns = vim.api.nvim_create_namespace("codespec_next_edit")

-- the edit shown: { bufnr, tick, first, last (0-based rows of its old lines, last exclusive),
-- text, range, command, id }
local shown = nil
-- the request in flight: { request_id, bufnr, tick }
local pending = nil
local timer = nil

local function diff(a, b)
  local differ = (vim.text and vim.text.diff) or vim.diff
  return differ(a, b, { result_type = "indices" })
end

function M.visible()
  return shown ~= nil
end

--- The edit shown (for tests and statuslines): { first, last, text } or nil.
function M.current()
  return shown and { first = shown.first, last = shown.last, text = shown.text } or nil
end

function M.clear()
  if shown and vim.api.nvim_buf_is_valid(shown.bufnr) then
    vim.api.nvim_buf_clear_namespace(shown.bufnr, M.ns, 0, -1)
  end
  shown = nil
end

local function cancel_pending()
  if pending then
    client.cancel(pending.request_id)
    pending = nil
  end
end

--- Draw the edit: each changed run of old lines as deleted, the new lines after it.
local function draw(edit)
  local bufnr, first = edit.bufnr, edit.first
  local old = vim.api.nvim_buf_get_lines(bufnr, first, edit.last, false)
  local new = vim.split(edit.text, "\n", { plain = true })
  if new[#new] == "" then
    table.remove(new) -- (the text ends with a line break)
  end
  local old_text = #old > 0 and (table.concat(old, "\n") .. "\n") or ""
  local new_text = #new > 0 and (table.concat(new, "\n") .. "\n") or ""
  for _, hunk in ipairs(diff(old_text, new_text)) do
    local a_start, a_count, b_start, b_count = hunk[1], hunk[2], hunk[3], hunk[4]
    local lines = vim.api.nvim_buf_line_count(bufnr)
    for row = first + a_start - 1, first + a_start + a_count - 2 do
      -- the whole line: to the next line's start, or on the last line to its end
      local last_line = row + 1 >= lines
      local end_col = last_line and #(vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or "") or 0
      vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, 0, {
        end_row = last_line and row or row + 1,
        end_col = end_col,
        hl_group = "DiffDelete",
        hl_eol = true,
      })
    end
    local added = {}
    for i = b_start, b_start + b_count - 1 do
      table.insert(added, { { new[i], "DiffAdd" } })
    end
    if #added > 0 then
      -- after the deleted run (or, for lines only added, after line ``a_start``; before the
      -- edit's first line when that is 0); never past the buffer's last line
      local below = first + (a_count > 0 and (a_start + a_count - 1) or a_start) - 1
      local row, above = math.min(math.max(below, first), lines - 1), below < first
      if below < first and first >= lines then
        above = false -- (lines added after the buffer's end: below its last line)
      end
      vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, 0, { virt_lines = added, virt_lines_above = above })
    end
  end
end

--- Show ``edit`` (a `copilotInlineEdit` answer's edit) in ``bufnr`` as of ``tick``.
function M.show(bufnr, tick, edit)
  M.clear()
  bufnr = bufnr == 0 and vim.api.nvim_get_current_buf() or bufnr
  local range = edit.range
  if range.start.line > vim.api.nvim_buf_line_count(bufnr) or range["end"].line < range.start.line then
    return "the edit is not inside the buffer"
  end
  shown = {
    bufnr = bufnr,
    tick = tick,
    first = range.start.line,
    last = range["end"].line,
    text = edit.text,
    range = range,
    command = edit.command,
    id = edit.command and edit.command.arguments and edit.command.arguments[1],
  }
  local drawn, problem = pcall(draw, shown)
  if not drawn then -- (an edit that does not fit the buffer: nothing is shown)
    M.clear()
    return problem
  end
  client.notify("textDocument/didShowInlineEdit", { item = { command = edit.command } })
end

--- Ask for the next edit at the cursor (Normal mode, the buffer as it is now).
function M.request()
  local bufnr = vim.api.nvim_get_current_buf()
  if not client.serving(bufnr) or not config.options.next_edits.enabled then
    return
  end
  cancel_pending()
  local cursor = vim.api.nvim_win_get_cursor(0)
  local tick = vim.b[bufnr].changedtick
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr), version = vim.lsp.util.buf_versions[bufnr] },
    position = { line = cursor[1] - 1, character = cursor[2] },
  }
  local request = { bufnr = bufnr, tick = tick }
  local ok, request_id = client.request("textDocument/copilotInlineEdit", params, function(err, result)
    if pending ~= request then
      return -- (superseded or cancelled)
    end
    pending = nil
    local edit = not err and result and result.edits and result.edits[1]
    if not edit or not vim.api.nvim_buf_is_valid(bufnr) or vim.b[bufnr].changedtick ~= tick then
      return -- nothing to suggest, or the buffer moved on while it was computed
    end
    if vim.api.nvim_get_mode().mode:sub(1, 1) ~= "n" then
      return
    end
    M.show(bufnr, tick, edit)
  end, bufnr)
  if ok then
    request.request_id = request_id
    pending = request
  end
end

--- An edit settled (Insert mode left, or a Normal-mode change): ask after a pause, unless the
--- buffer changes again or the user goes back to typing first.
function M.on_edit()
  M.clear()
  cancel_pending()
  if not config.options.next_edits.enabled then
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local tick = vim.b[bufnr].changedtick
  timer = timer or vim.loop.new_timer()
  timer:stop()
  timer:start(config.options.next_edits.delay_ms, 0, vim.schedule_wrap(function()
    local mode = vim.api.nvim_get_mode().mode
    if vim.api.nvim_get_current_buf() == bufnr and vim.b[bufnr].changedtick == tick and mode == "n" then
      M.request()
    end
  end))
end

--- Typing again: whatever was shown or asked is over (the server judges it from the change).
function M.on_typing()
  if timer then
    timer:stop()
  end
  cancel_pending()
  M.clear()
end

--- The accept key: jump to the edit, or apply it when the cursor is on it. False when no edit
--- is shown (the key then does what it did before).
function M.accept()
  if not shown or vim.api.nvim_get_current_buf() ~= shown.bufnr then
    return false
  end
  if vim.b[shown.bufnr].changedtick ~= shown.tick then
    M.clear()
    return false
  end
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  local on_it = row >= shown.first and row < math.max(shown.last, shown.first + 1)
  if not on_it then
    vim.api.nvim_win_set_cursor(0, { shown.first + 1, 0 })
    return true
  end
  local edit = shown
  M.clear()
  vim.lsp.util.apply_text_edits({ { range = edit.range, newText = edit.text } }, edit.bufnr, "utf-8")
  vim.api.nvim_win_set_cursor(0, { math.min(edit.first + 1, vim.api.nvim_buf_line_count(edit.bufnr)), 0 })
  if edit.command then
    client.report(edit.command.command, unpack(edit.command.arguments or {}))
  end
  return true
end

--- The dismiss key: drop the edit shown (false when none is).
function M.dismiss()
  if not shown then
    return false
  end
  local id = shown.id
  M.clear()
  if id then
    client.report("codespec.didDismiss", id)
  end
  return true
end

return M
