-- :checkhealth codespec

local M = {}

function M.check()
  local start, ok, warn, err = require("codespec.compat").health()
  local codespec = require("codespec")
  start("codespec")
  if vim.fn.has("nvim-0.7") == 1 then
    ok("Neovim " .. tostring(vim.version().major) .. "." .. tostring(vim.version().minor))
  else
    err("Neovim 0.7 or newer is needed")
  end
  local cmd = codespec.find_server()
  if cmd then
    ok("server: " .. table.concat(cmd, " "))
  else
    err("`codespec` not found: install it (README) or pass `cmd` to setup()")
  end
  local status = codespec.status_text()
  if codespec.state.status == "error" then
    warn(status)
  else
    ok(status)
  end
end

return M
