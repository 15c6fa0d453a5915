-- :checkhealth codespec

local M = {}

function M.check()
  local start, ok, warn, err = require("codespec.compat").health()
  local client = require("codespec.client")
  local status = require("codespec.status")
  start("codespec")
  if vim.fn.has("nvim-0.7") == 1 then
    ok("Neovim " .. tostring(vim.version().major) .. "." .. tostring(vim.version().minor))
  else
    err("Neovim 0.7 or newer is needed")
  end
  local cmd = client.find_server()
  if cmd then
    ok("server: " .. table.concat(cmd, " "))
  else
    err(client.NOT_FOUND)
  end
  local text = status.text()
  if status.state.status == "error" then
    warn(text)
  else
    ok(text)
  end
end

return M
