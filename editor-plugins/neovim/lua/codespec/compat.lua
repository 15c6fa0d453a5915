-- The few Neovim APIs that differ between 0.7 and 0.11, wrapped once.

local M = {}
local has_011 = vim.fn.has("nvim-0.11") == 1

--- client:request (0.11) / client.request (older); returns ok, request_id.
function M.request(client, method, params, handler, bufnr)
  if has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

function M.notify(client, method, params)
  if has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

function M.cancel(client, request_id)
  if not request_id then
    return
  end
  if has_011 then
    return client:cancel_request(request_id)
  end
  return client.cancel_request(request_id)
end

function M.attached(client, bufnr)
  if vim.lsp.buf_is_attached then
    return vim.lsp.buf_is_attached(bufnr, client.id)
  end
  return true
end

--- Start the client once (or reuse ``existing``) and attach ``bufnr`` to it.
function M.start_client(config, bufnr, existing)
  local id = existing
  if not id or not vim.lsp.get_client_by_id(id) then
    if vim.lsp.start and has_011 then
      id = vim.lsp.start(config, { bufnr = bufnr, reuse_client = function() return false end })
      return id
    end
    id = vim.lsp.start_client(config)
  end
  if id then
    vim.lsp.buf_attach_client(bufnr, id)
  end
  return id
end

--- :checkhealth reporting (vim.health from 0.10, the `health` module before).
function M.health()
  if vim.health and vim.health.start then
    return vim.health.start, vim.health.ok, vim.health.warn, vim.health.error
  end
  local h = require("health")
  return h.report_start, h.report_ok, h.report_warn, h.report_error
end

return M
