-- Ghost text: the first line of a suggestion as virtual text at the cursor, the rest as
-- virtual lines below it, in one extmark.

local M = {}
M.ns = vim.api.nvim_create_namespace("codespec_ghost")
local drawn = nil -- { bufnr, id, text }
local inline = vim.fn.has("nvim-0.10") == 1 -- virt_text_pos = "inline" exists from 0.10

function M.clear()
  if drawn and vim.api.nvim_buf_is_valid(drawn.bufnr) then
    vim.api.nvim_buf_clear_namespace(drawn.bufnr, M.ns, 0, -1)
  end
  drawn = nil
end

function M.draw(bufnr, row, col, text)
  M.clear()
  local lines = vim.split(text, "\n", { plain = true })
  local first = lines[1]
  local opts = { hl_mode = "combine" }
  if inline then
    opts.virt_text = { { first, "Comment" } }
    opts.virt_text_pos = "inline"
  else
    -- no inline virtual text before 0.10: overlay the suggestion and the rest of the line
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
    opts.virt_text = { { first, "Comment" }, { line:sub(col + 1), "Normal" } }
    opts.virt_text_pos = "overlay"
  end
  if #lines > 1 then
    opts.virt_lines = {}
    for i = 2, #lines do
      table.insert(opts.virt_lines, { { lines[i], "Comment" } })
    end
  end
  local id = vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
  drawn = { bufnr = bufnr, id = id, text = text }
end

--- The text drawn now (from the extmark itself, so tests see what the screen shows), or nil.
function M.text()
  if not drawn or not vim.api.nvim_buf_is_valid(drawn.bufnr) then
    return nil
  end
  local mark = vim.api.nvim_buf_get_extmark_by_id(drawn.bufnr, M.ns, drawn.id, { details = true })
  if not mark or not mark[3] then
    return nil
  end
  local parts = { mark[3].virt_text[1][1] }
  for _, vl in ipairs(mark[3].virt_lines or {}) do
    table.insert(parts, vl[1][1])
  end
  return table.concat(parts, "\n")
end

return M
