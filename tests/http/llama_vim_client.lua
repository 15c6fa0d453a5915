-- A minimal client that speaks /infill as llama.vim does (autoload/llama.vim at a1c8e6e4:
-- s:fim_ctx_local and s:fim): the lines above the cursor, the cursor line split at the cursor,
-- the lines below, sent by `curl` through jobstart with the body on stdin; a newer request stops
-- the running job. Nothing here is llama.vim's own code; the tests load it into a real Neovim.
local M = { job = nil, replies = {}, exits = {} }

local function context(n_prefix, n_suffix)
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local line = lines[row]
  local before = {}
  for i = math.max(1, row - n_prefix), row - 1 do
    table.insert(before, lines[i])
  end
  local after = { line:sub(col + 1) }
  for i = row + 1, math.min(#lines, row + n_suffix) do
    table.insert(after, lines[i])
  end
  return table.concat(before, "\n") .. "\n", line:sub(1, col), table.concat(after, "\n") .. "\n"
end

function M.request(url, n_predict)
  local prefix, middle, suffix = context(256, 64)
  local body = vim.fn.json_encode({
    id_slot = 0,
    input_prefix = prefix,
    input_suffix = suffix,
    input_extra = {},
    prompt = middle,
    n_predict = n_predict,
    stop = {},
    n_indent = 0,
    top_k = 40,
    top_p = 0.90,
    samplers = { "top_k", "top_p", "infill" },
    stream = false,
    cache_prompt = true,
    t_max_prompt_ms = 500,
    t_max_predict_ms = 1000,
    response_fields = { "content", "timings/predicted_n", "truncated", "tokens_cached" },
  })
  if M.job ~= nil then
    vim.fn.jobstop(M.job) -- as llama.vim: a newer request stops the one still running
  end
  local job
  job = vim.fn.jobstart({
    "curl", "--silent", "--no-buffer", "--request", "POST", "--url", url,
    "--header", "Content-Type: application/json", "--data", "@-",
  }, {
    stdout_buffered = true,
    on_stdout = function(_, data)
      local raw = table.concat(data, "\n")
      if raw:match('^%s*{') and raw:match('"content"%s*:') then
        table.insert(M.replies, vim.fn.json_decode(raw))
      end
    end,
    on_exit = function(_, code)
      table.insert(M.exits, code)
      if M.job == job then
        M.job = nil
      end
    end,
  })
  M.job = job
  vim.fn.chansend(job, body)
  vim.fn.chanclose(job, "stdin")
end

function M.accept(reply)
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local line = vim.api.nvim_get_current_line()
  local text = vim.split(reply.content, "\n", { plain = true })
  text[1] = line:sub(1, col) .. text[1]
  text[#text] = text[#text] .. line:sub(col + 1)
  vim.api.nvim_buf_set_lines(0, row - 1, row, false, text)
end

return M
